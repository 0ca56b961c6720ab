"""The house's layout holds: no import circles, and the core's rooms depend only on rooms before them
on the data's way (library files -> store -> catalog -> search -> results -> web)."""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PACKAGES = ("host", "access")
DATA_WAY = ("origin", "library", "store", "catalog", "search", "results", "web")


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that `path` imports when it runs (imports only for type checkers left out)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if is_type_checking_block(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
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


def test_each_room_of_the_core_imports_only_rooms_before_it_on_the_datas_way() -> None:
    backwards = []
    for module, targets in import_graph().items():
        source = room(module)
        for target in targets:
            destination = room(target)
            if source and destination and DATA_WAY.index(destination) > DATA_WAY.index(source):
                backwards.append(f"{module} -> {target}")
    assert backwards == []


def test_the_flat_core_is_gone_only_the_entry_points_stay_at_the_top() -> None:
    top = sorted(path.name for path in (PROJECT / "host").glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]


def test_a_circle_is_found_when_there_is_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
