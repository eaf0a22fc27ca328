"""Dependencies point down (docs/architecture.md): no package of axl, nor a
module at its top, imports (at the top of a file or inside a function) one
that imports it back, directly or through others."""

from __future__ import annotations

import ast
from pathlib import Path

AXL = Path(__file__).resolve().parent.parent / "axl"


def unit_of(module: str) -> str:
    """`axl.node.store` -> `axl.node`; `axl.wire` stays itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (AXL / parts[-1]).is_dir() else module


def module_names() -> dict[str, Path]:
    names = {}
    for path in AXL.rglob("*.py"):
        parts = path.relative_to(AXL.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(path: Path, known: dict[str, Path]) -> set[str]:
    """The axl modules a file imports anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            candidates = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in candidates if name in known)
    return found


def unit_graph() -> dict[str, set[str]]:
    known = module_names()
    graph: dict[str, set[str]] = {unit_of(name): set() for name in known}
    for name, path in known.items():
        graph[unit_of(name)].update(unit_of(other) for other in imported(path, known) if unit_of(other) != unit_of(name))
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from `start` back to itself, or None."""
    seen: set[str] = set()
    trail: list[str] = [start]

    def walk(unit: str) -> bool:
        for nxt in sorted(graph[unit]):
            if nxt == start:
                trail.append(nxt)
                return True
            if nxt not in seen:
                seen.add(nxt)
                trail.append(nxt)
                if walk(nxt):
                    return True
                trail.pop()
        return False

    return trail if walk(start) else None


def test_the_graph_is_read_from_the_sources() -> None:
    graph = unit_graph()
    assert "axl.wire" in graph["axl.routing"]
    assert "axl.supported" in graph["axl.link"]
    assert {"axl.sessions", "axl.supported"} <= graph["axl.dependencies"]


def test_no_package_imports_one_that_imports_it_back() -> None:
    graph = unit_graph()
    cycles = [" -> ".join(found) for unit in sorted(graph) if (found := cycle_through(graph, unit))]
    assert cycles == []


def test_a_cycle_is_found_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_through(graph, "a") == ["a", "b", "c", "a"]
    assert cycle_through(graph, "d") is None
