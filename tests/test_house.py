"""The shape of the code, checked (issue 19): no new import cycles inside ``app/ferry``, no new
function above cyclomatic complexity 20, and a module map in docs/architecture.md that names every
module. The layer rules themselves are import-linter's contracts in pyproject.toml.

Each allowlist below holds what exists today. It may only shrink: a test fails when an entry no
longer matches the tree, so whoever removes a cycle or simplifies a function deletes its line (or
lowers its score) in the same change.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest
from radon.visitors import Class, ComplexityVisitor, Function  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
PACKAGE = APP / "ferry"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# ------------------------------------------------------------------------------------- cycles

# Every strongly connected group of modules in the import graph (every import counts: module
# level, inside functions, under ``if TYPE_CHECKING:``), with what will break it. A group that
# shrinks (some modules no longer take part) must be written here as the smaller group.
KNOWN_CYCLES: dict[frozenset[str], str] = {
}


def import_graph() -> grimp.ImportGraph:
    spec = importlib.util.find_spec("ferry")
    assert spec and spec.origin and Path(spec.origin).parent == PACKAGE, f"ferry is imported from {spec}"
    return grimp.build_graph("ferry", cache_dir=None)


def strongly_connected(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative; only groups of two or more modules (a module importing
    itself is not a cycle anyone can break)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []
    for start in modules:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(frozenset(group))
    return groups


def describe(graph: grimp.ImportGraph, group: frozenset[str]) -> str:
    lines = []
    for importer in sorted(group):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & group):
            where = sorted(d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported))
            lines.append(f"  {importer} -> {imported} (line {', '.join(map(str, where))})")
    return "\n".join(lines)


def test_strongly_connected_finds_cycles_of_every_length() -> None:
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.e", "p.f"), ("p.f", "p.e")]:
        graph.add_import(importer=a, imported=b)
    graph.add_module("p.alone")
    assert sorted(map(sorted, strongly_connected(graph))) == [["p.a", "p.b", "p.c"], ["p.e", "p.f"]]


def test_grimp_sees_imports_inside_functions() -> None:
    graph = import_graph()
    # backends.sharing imports the registry only inside create_share/revoke_share
    assert "ferry.backends.registry" in graph.find_modules_directly_imported_by("ferry.backends.sharing")


def test_no_new_import_cycles() -> None:
    graph = import_graph()
    found = strongly_connected(graph)
    new = [g for g in found if not any(g <= known for known in KNOWN_CYCLES)]
    assert not new, "new import cycles inside app/ferry (break them; do not allowlist them):\n" + "\n\n".join(
        describe(graph, g) for g in new
    )
    stale = [sorted(known) for known in KNOWN_CYCLES if known not in found]
    assert not stale, (
        "these KNOWN_CYCLES in tests/test_house.py no longer exist as written: remove them, or write "
        f"the smaller group that remains ({sorted(map(sorted, found))}):\n{stale}"
    )


# --------------------------------------------------------------------------------- complexity

MAX_COMPLEXITY = 20

# Functions above MAX_COMPLEXITY today, with radon's score. Lower the number when you simplify
# one; delete the line when it reaches MAX_COMPLEXITY or less. Nothing may be added.
KNOWN_COMPLEX: dict[str, int] = {
}


def _functions(block: Function, prefix: str) -> Iterator[tuple[str, int]]:
    name = prefix + block.name
    yield name, block.complexity
    for closure in block.closures:  # radon leaves nested functions out of their parent's score
        yield from _functions(closure, name + ".")


def _methods(block: Class, prefix: str) -> Iterator[tuple[str, int]]:
    name = prefix + block.name
    for method in block.methods:
        yield from _functions(method, name + ".")
    for inner in block.inner_classes:
        yield from _methods(inner, name + ".")


def complexities() -> dict[str, int]:
    """``ferry/path.py::Class.method`` -> radon's cyclomatic complexity, for every function,
    method and nested function under app/ferry."""
    scores: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        visitor = ComplexityVisitor.from_code(path.read_text(encoding="utf-8"))
        where = path.relative_to(APP).as_posix()
        for function in visitor.functions:
            scores.update((f"{where}::{name}", score) for name, score in _functions(function, ""))
        for cls in visitor.classes:
            scores.update((f"{where}::{name}", score) for name, score in _methods(cls, ""))
    return scores


def test_complexity_walk_counts_methods_and_closures() -> None:
    code = (
        "class A:\n    def m(self, x):\n        def inner(y):\n            return 1 if y else 2\n        return inner\n"
    )
    visitor = ComplexityVisitor.from_code(code)
    assert dict(_methods(visitor.classes[0], "")) == {"A.m": 1, "A.m.inner": 2}


def test_no_function_above_complexity_limit() -> None:
    scores = complexities()
    assert len(scores) > 500  # the walk found the code
    over = {name: score for name, score in scores.items() if score > MAX_COMPLEXITY}
    new = {name: score for name, score in over.items() if name not in KNOWN_COMPLEX}
    assert not new, f"functions above cyclomatic complexity {MAX_COMPLEXITY} (split them): {new}"
    worse = {name: (KNOWN_COMPLEX[name], score) for name, score in over.items() if score > KNOWN_COMPLEX.get(name, 0)}
    assert not worse, f"allowlisted functions got more complex (allowed, now): {worse}"
    shrunk = {
        name: (allowed, scores.get(name)) for name, allowed in KNOWN_COMPLEX.items() if scores.get(name) != allowed
    }
    assert not shrunk, (
        "KNOWN_COMPLEX in tests/test_house.py is out of date (allowed, now; None: gone or renamed). "
        f"Lower the score, or delete the line once it is {MAX_COMPLEXITY} or less: {shrunk}"
    )


# --------------------------------------------------------------------------------- module map

MAP_START = "<!-- module map: start -->"
MAP_END = "<!-- module map: end -->"
MAP_ENTRY = re.compile(r"^- `(ferry/(?:[\w/]*\w(?:\.py|/))?)`( — \S.*)?$")


def modules_on_disk() -> set[str]:
    """``ferry/core/units.py`` for a module, ``ferry/core/`` for a package (its ``__init__.py``)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(APP).as_posix()
        names.add(rel.removesuffix("__init__.py") if path.name == "__init__.py" else rel)
    return names


def module_map() -> list[str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert text.count(MAP_START) == 1 and text.count(MAP_END) == 1, "docs/architecture.md lost its map markers"
    section = text.split(MAP_START, 1)[1].split(MAP_END, 1)[0]
    entries = []
    for line in section.splitlines():
        if line.startswith("- "):
            match = MAP_ENTRY.match(line)
            assert match and match.group(2), f"a map line is '- `ferry/path.py` — what it does': {line!r}"
            entries.append(match.group(1))
    return entries


def test_module_map_names_every_module() -> None:
    entries = module_map()
    duplicated = sorted({e for e in entries if entries.count(e) > 1})
    assert not duplicated, f"named twice in the module map: {duplicated}"
    on_disk = modules_on_disk()
    missing = sorted(on_disk - set(entries))
    assert not missing, f"add these to the module map in docs/architecture.md (one line each): {missing}"
    gone = sorted(set(entries) - on_disk)
    assert not gone, f"the module map in docs/architecture.md names modules that do not exist: {gone}"


def test_architecture_names_only_real_files() -> None:
    """Paths written anywhere in the document (``ferry/x/y.py``, ``app/ferry/x.py``) exist."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/])(?:app/)?(ferry/[\w/]+\.py)\b", text))
    assert named, "the document names no module paths at all"
    gone = sorted(n for n in named if not (APP / n).is_file())
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"


@pytest.mark.parametrize("line", ["- `ferry/x.py` — a thing", "- `ferry/pkg/` — a package", "- `ferry/` — the root"])
def test_map_line_format(line: str) -> None:
    match = MAP_ENTRY.match(line)
    assert match and match.group(2)


@pytest.mark.parametrize(
    "line", ["- `ferry/x.py`", "- `ferry/x.py` —", "- ferry/x.py — no quotes", "- `app/ferry/x.py` — a"]
)
def test_map_line_format_refused(line: str) -> None:
    match = MAP_ENTRY.match(line)
    assert not (match and match.group(2))
