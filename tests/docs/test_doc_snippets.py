"""The docs runner itself: what it runs, how it rewrites ports, and that a broken snippet fails its test."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_snippets import PageRun, SnippetError, check_pip_install, parse_page, rewrite_ports, without_pip_installs


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_runs_python_and_bash_blocks_with_their_markers(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "# t\n\n```python\nprint(1)\n```\n\n<!-- doc-test: background, timeout 5 -->\n```bash\namqpd\n```\n\n"
        "```text\nnot run\n```\n\n<!-- doc-test: file amqpd.toml -->\n```toml\nport = 5672\n```\n",
    )
    snippets = parse_page(page)
    assert [(s.line, s.lang, s.runs) for s in snippets] == [
        (3, "python", True),
        (8, "bash", True),
        (12, "text", False),
        (17, "toml", True),
    ]
    assert snippets[1].markers == {"background": "", "timeout": "5"}
    assert snippets[3].markers == {"file": "amqpd.toml"}


@pytest.mark.parametrize(
    "text, error",
    [
        ("```console\n$ amqpd\n```\n", "```console is not run"),
        ("```bash\nls\n", "never closed"),
        ("<!-- doc-test: sometimes -->\n```bash\nls\n```\n", "unknown doc-test marker"),
        ("<!-- doc-test: background -->\n```text\nls\n```\n", "does not run"),
    ],
)
def test_refuses_pages_that_break_the_convention(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(SnippetError, match=error):
        parse_page(_page(tmp_path, text))


def test_rewrites_default_ports_only() -> None:
    ports = {5672: 40001, 15672: 40002, 15692: 40003, 5673: 40004}
    code = "amqp://guest:guest@localhost:5672/%2F http://127.0.0.1:15672 --port 5673 :15692 x56720 1.5672"
    assert rewrite_ports(code, ports | {p: p for p in (5671, 15671, 15673, 15691, 15693)}) == (
        "amqp://guest:guest@localhost:40001/%2F http://127.0.0.1:40002 --port 40004 :40003 x56720 1.5672"
    )


def test_pip_install_lines_are_checked_and_not_run() -> None:
    assert without_pip_installs("pip install -e '.[spark]' && amqpd\n") == ": && amqpd\n"
    check_pip_install("pika 'amqpd[test,dev]'")
    with pytest.raises(AssertionError, match="no extra"):
        check_pip_install("'.[sparks]'")
    with pytest.raises(AssertionError, match="not installed"):
        check_pip_install("no-such-package-for-docs")


def test_a_broken_snippet_fails_and_the_rest_of_its_page_is_not_run(tmp_path: Path) -> None:
    page = _page(tmp_path, "```bash\ntrue\n```\n\n```bash\nfalse\necho unreachable\n```\n\n```python\nprint(1)\n```\n")
    (tmp_path / "work").mkdir()
    run = PageRun(page, tmp_path / "work")
    try:
        first, broken, after = parse_page(page)
        run.run(first)
        with pytest.raises(AssertionError, match=r"page.md:5: exit status 1"):
            run.run(broken)
        with pytest.raises(AssertionError, match=r"earlier snippet of the page failed"):
            run.run(after)
    finally:
        run.close()


def test_a_default_port_left_in_python_is_refused(tmp_path: Path) -> None:
    """pika's default port is 5672: unwritten, it would reach the reference RabbitMQ and pass for amqpd."""
    page = _page(tmp_path, "```python\nimport socket\nsocket.create_connection(('127.0.0.1', 5600 + 72))\n```\n")
    (tmp_path / "work").mkdir()
    run = PageRun(page, tmp_path / "work")
    try:
        with pytest.raises(AssertionError, match="reached default port 5672"):
            run.run(parse_page(page)[0])
    finally:
        run.close()
