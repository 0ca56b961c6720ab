"""The house's layout holds: no import circles, and the core's rooms depend only on rooms before them
on the data's way (origin -> library files -> their text index -> store -> catalog -> search -> results
-> web). An import made only for type checkers is an arrow too: a lower room that names a higher
one's types knows that room."""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PACKAGES = ("host", "access")
DATA_WAY = ("origin", "library", "constraints", "keywords", "store", "catalog", "search", "results", "web")


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that `path` imports, when it runs or for type checkers only."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    return imports_in(path.read_text(), package, known, str(path))


def imports_in(source: str, package: str, known: set[str], filename: str = "<source>") -> set[str]:
    """Modules of `known` that `source` (a module of `package`) imports anywhere, `if TYPE_CHECKING:` included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    paths = [path for package in PACKAGES for path in (PROJECT / package).rglob("*.py")]
    known = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, known) - {module_name(path)} for path in paths}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in order:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in order:
            connect(module)
    return found


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "host" and len(parts) > 1 and parts[1] in DATA_WAY else None


def test_no_module_imports_itself_in_a_circle() -> None:
    assert circles(import_graph()) == []


def backward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a room of the core to a room after it on the data's way."""
    backwards = []
    for module, targets in sorted(graph.items()):
        source = room(module)
        for target in sorted(targets):
            destination = room(target)
            if source and destination and DATA_WAY.index(destination) > DATA_WAY.index(source):
                backwards.append(f"{module} -> {target}")
    return backwards


def test_each_room_of_the_core_imports_only_rooms_before_it_on_the_datas_way() -> None:
    assert backward_arrows(import_graph()) == []


def test_the_flat_core_is_gone_only_the_entry_points_stay_at_the_top() -> None:
    top = sorted(path.name for path in (PROJECT / "host").glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]


def test_a_circle_is_found_when_there_is_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_an_import_for_type_checkers_only_is_an_arrow() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import host.constraints.words\n"
        "if TYPE_CHECKING:\n"
        "    from host.catalog.model_index import ModelIndex\n"
        "    from . import syntax\n"
    )
    known = {"host.constraints.words", "host.constraints.syntax", "host.catalog.model_index"}
    found = imports_in(source, "host.constraints", known)
    assert found == known
    assert backward_arrows({"host.constraints.masks": found}) == ["host.constraints.masks -> host.catalog.model_index"]
    assert circles({"host.store.compiled": {"host.constraints.masks"}, "host.constraints.masks": found,
                    "host.catalog.model_index": {"host.store.compiled"}}) == [
        ["host.catalog.model_index", "host.constraints.masks", "host.store.compiled"]]
