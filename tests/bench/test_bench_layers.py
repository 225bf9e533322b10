"""bench/ in layers: bench/harness.py at the bottom, the measurements above it (importing the harness
and each other downward only), bench/run.py (the driver of `make bench`) and bench/report.py on top.
Read from the sources with ast, every import counted: absolute or relative, at the top or inside a
function (a lazy import closes a circle as surely as a top-level one)."""
from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
TOP = {"run", "report"}


def bench_imports(source: str, modules: set[str]) -> set[str]:
    """The bench modules (names in `modules`) that `source`, a module directly in bench/, imports.
    Any import of bench's imports the package (its __init__) first."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:
                continue  # above bench/: not a bench module
            base = "bench" if node.level == 1 else node.module or ""
            if node.level == 1 and node.module:
                base += "." + node.module
            names = [base] + [f"{base}.{a.name}" for a in node.names]  # `from bench import x`: x may be a module
        else:
            continue
        for parts in (name.split(".") for name in names):
            if parts[0] == "bench":
                found.add("__init__")
                found.update(parts[1:2])
    return found & modules


def bench_graph(folder: Path = BENCH) -> dict[str, set[str]]:
    """Who imports whom among folder/*.py (bench/, or a made-up package laid out as bench/)."""
    files = {p.stem: p for p in folder.glob("*.py")}
    return {m: bench_imports(p.read_text(encoding="utf-8"), set(files)) - {m} for m, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as [a, b, ..., a], or None: a depth-first search that meets a module still
    on its own path."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once all below it was searched
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_circles_and_only_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is no circle
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": {"y"}}) == ["y", "z", "y"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_every_kind_of_import_is_read():
    modules = {"harness", "loadgen", "peers", "run", "report", "echo", "__init__"}
    source = '''
import json
import bench.echo
from bench.harness import Server
from . import loadgen
from .report import best
from bench import run, helper_not_a_module
from service.engine import engine


def later():
    from bench.peers import PEER_NOTE
'''
    assert bench_imports(source, modules) == {"echo", "harness", "loadgen", "report", "run", "peers", "__init__"}


def test_a_circle_closed_by_a_lazy_import_is_found_in_files(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "low.py").write_text("def f():\n    from bench.top import g\n")
    (tmp_path / "top.py").write_text("from . import low\n")
    assert find_cycle(bench_graph(tmp_path)) == ["low", "top", "low"]


def test_bench_modules_import_one_another_without_a_circle():
    graph = bench_graph()
    assert {"harness", "run", "report", "fairness", "realtraffic"} <= set(graph)  # it read the real files
    assert graph["realtraffic"] and graph["run"]  # and found their imports
    assert find_cycle(graph) is None, f"import circle in bench/: {' -> '.join(find_cycle(graph))}"


def test_only_the_top_imports_the_driver_and_the_report():
    graph = bench_graph()
    upward = {m: sorted(deps & TOP) for m, deps in graph.items() if m not in TOP and deps & TOP}
    assert upward == {}, f"below bench/run.py and bench/report.py, these import them: {upward}"


def test_the_harness_imports_no_measurement():
    assert bench_graph()["harness"] <= {"__init__"}
