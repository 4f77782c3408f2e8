"""The import rule (docs/architecture.md): imports go one way — server -> session -> broker -> protocol,
mgmt -> broker, broker -> store only through `store/__init__` — with no circle anywhere.

Every module's imports are read with `ast`, all of them: the ones under `if TYPE_CHECKING:` and the ones inside
functions count the same as the ones at the top, because a circle of types is still a circle a reader has to
hold in their head, and an import inside a function is how a circle is hidden.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKER = "amqpd.broker"
# Packages of the broker that are leaves of the broker: they import nothing else of it.
BROKER_LEAVES = ("amqpd.broker.access",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of amqpd and store, by dotted name."""
    found = {}
    for top in ("amqpd", "store"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, node: ast.AST) -> Iterable[str]:
    """The project modules one import statement loads (a name imported from a package may be a module)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        source = _resolve(module, node)
        for alias in node.names:
            yield f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules() else source


@cache
def imports() -> dict[str, set[str]]:
    """module -> the project modules it imports, from anywhere in its text."""
    graph: dict[str, set[str]] = {}
    for name, path in modules().items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(name, node):
                if target in modules() and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def unit(module: str) -> str:
    """The package a module belongs to for the rule: amqpd's top-level packages (amqpd's own top-level modules
    each count as one), store as a whole."""
    parts = module.split(".")
    if parts[0] == "store":
        return "store"
    if len(parts) == 1:
        return module
    top = ".".join(parts[:2])
    return top


def broker_unit(module: str) -> str:
    """The broker's sub-package a module belongs to (broker.py and its siblings each count as one)."""
    parts = module.split(".")
    sub = ".".join(parts[:3])
    return sub


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _collapsed(keep: Iterable[str], key: Callable[[str], str]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    kept = set(keep)
    for source, targets in imports().items():
        if source not in kept:
            continue
        node = graph.setdefault(key(source), set())
        node.update(key(t) for t in targets if t in kept and key(t) != key(source))
    return graph


def _edges(source_prefix: str, target_prefixes: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{source} -> {target}"
        for source, targets in imports().items()
        if _within(source, source_prefix)
        for target in targets
        if any(_within(target, p) for p in target_prefixes)
    )


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_modules_are_found() -> None:
    # The rules below pass vacuously on an empty graph; make sure it is not.
    assert "amqpd.broker.broker" in imports()
    assert "amqpd.broker.queues.queue" in imports()["amqpd.broker.broker"]


def test_no_circle_between_packages() -> None:
    assert _cycles(_collapsed(imports(), unit)) == []


def test_no_circle_between_the_broker_packages() -> None:
    broker = [m for m in imports() if _within(m, BROKER) and m != BROKER]
    assert _cycles(_collapsed(broker, broker_unit)) == []


def test_no_circle_between_the_broker_modules() -> None:
    broker = [m for m in imports() if _within(m, BROKER)]
    assert _cycles(_collapsed(broker, lambda m: m)) == []


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("amqpd.server", ("amqpd.mgmt",)),
        ("amqpd.mgmt", ("amqpd.server",)),
        ("amqpd.session", ("amqpd.server", "amqpd.mgmt")),
        ("amqpd.broker", ("amqpd.session", "amqpd.server", "amqpd.mgmt", "amqpd.spark", "amqpd.shovel")),
        ("amqpd.shovel", ("amqpd.session", "amqpd.server", "amqpd.mgmt")),
        ("amqpd.protocol", ("amqpd.session", "amqpd.broker", "amqpd.server", "amqpd.mgmt")),
        ("store", ("amqpd",)),
    ]
    + [(leaf, (BROKER,)) for leaf in BROKER_LEAVES],
)
def test_imports_go_one_way(source: str, forbidden: tuple[str, ...]) -> None:
    edges = _edges(source, forbidden)
    if source in BROKER_LEAVES:
        edges = [e for e in edges if not _within(e.split(" -> ")[1], source)]
    assert edges == []


def test_the_broker_reaches_the_store_only_through_its_front_door() -> None:
    reaches = [e for e in _edges(BROKER, ("store",)) if e.split(" -> ")[1] != "store"]
    assert reaches == []


def test_nothing_but_spark_imports_spark() -> None:
    edges = [e for e in _edges("amqpd", ("amqpd.spark",)) if not _within(e.split(" -> ")[0], "amqpd.spark")]
    assert edges == []


def test_mgmt_touches_no_private_attribute_of_another_object() -> None:
    """The management API goes through the broker's public methods: no `obj._name` on anything but itself."""
    touches = []
    for name, path in modules().items():
        if not _within(name, "amqpd.mgmt"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                touches.append(f"{name}:{node.lineno} .{node.attr}")
    assert touches == []
