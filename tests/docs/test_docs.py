"""Every ```python and ```bash snippet of README.md and docs/*.md runs and exits 0 (docs/development.md,
"Snippets in the docs"). One test per snippet, named after its page and line; the snippets of a page run in
order, sharing a working directory and an amqpd."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from doc_snippets import REPO, PageRun, Snippet, SnippetError, pages, parse_page


def _cases() -> list[object]:
    cases: list[object] = []
    for page in pages():
        try:
            snippets = [s for s in parse_page(page) if s.runs]
        except SnippetError as e:
            cases.append(pytest.param(e, id=str(page.relative_to(REPO))))
            continue
        cases += [pytest.param(s, id=s.name) for s in snippets]
    return cases


@pytest.fixture(scope="module")
def page_runs() -> Iterator[dict[Path, PageRun]]:
    runs: dict[Path, PageRun] = {}
    yield runs
    for run in runs.values():
        run.close()


@pytest.fixture(scope="module")
def _pages_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("snippet", _cases())
def test_snippet_runs(snippet: Snippet | SnippetError, page_runs: dict[Path, PageRun], _pages_dir: Path) -> None:
    if isinstance(snippet, SnippetError):
        pytest.fail(str(snippet))
    run = page_runs.get(snippet.page)
    if run is None:
        for other in page_runs.values():  # one page's brokers at a time
            other.close()
        workdir = _pages_dir / snippet.page.stem
        workdir.mkdir()
        run = page_runs[snippet.page] = PageRun(snippet.page, workdir)
    for earlier in parse_page(snippet.page):  # when a test is picked alone (-k), the page's earlier ones first
        if earlier.runs and earlier.line < snippet.line and earlier.line not in run.done:
            run.run(earlier)
    run.run(snippet)


def test_readme_test_command_is_what_ci_runs() -> None:
    """The README's "Run the tests" command is the one .ci/run runs (a syntax-only snippet: the suite cannot
    run itself)."""
    command = next(s.code.strip() for s in parse_page(REPO / "README.md") if "scripts/test.sh" in s.code)
    assert command == "bash scripts/test.sh"
    ci = (REPO / ".ci" / "run").read_text()
    assert any(line.strip().startswith(command) for line in ci.splitlines())


# A file of the repository: a top-level directory, then a path ending in a file name with an extension.
_REPO_PATH = re.compile(r"(?<![\w./-])((?:amqpd|store|tests|bench|interop|examples|conf|scripts|\.ci)/[\w./-]*\.\w+)")


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_files_a_page_names_exist(page: Path) -> None:
    """A page that names `amqpd/broker/x.py` or links ../store/FORMAT.md names something that is there (links
    between docs pages are left out: other pages are written at the same time)."""
    missing = [p for p in _REPO_PATH.findall(page.read_text()) if not (REPO / p.rstrip(".")).exists()]
    assert not missing, f"{page.name} names files that do not exist: {sorted(set(missing))}"
