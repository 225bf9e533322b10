"""The folder tree is the flow: transport -> repository -> scheduling -> engine. Only transport/
(and server.py, client/) may touch grpc or the generated protobuf modules, and the server never
imports the client tools. Read from the source with ast, so a lazy import inside a function counts."""
import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parent.parent / "service"
WIRE = ("grpc", "grpc_health", "grpc_reflection", "attnserve", "inference", "google.protobuf")
NO_WIRE = ["scheduling", "engine", "repository", "config.py", "metrics.py", "tasks.py"]


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules(part: str) -> list[Path]:
    path = SERVICE / part
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("part", NO_WIRE)
def test_below_transport_nothing_imports_grpc_or_protobuf(part):
    for path in modules(part):
        wire = {n for n in imported(path) if n.split(".")[0] in WIRE or n.startswith(WIRE)}
        assert not wire, f"{path.relative_to(SERVICE)} imports {sorted(wire)}"


@pytest.mark.parametrize("part", ["scheduling", "engine"])
def test_scheduling_and_engine_do_not_reach_up(part):
    up = ("service.transport", "service.repository", "service.server", "service.client")
    for path in modules(part):
        found = {n for n in imported(path) if n.startswith(up)}
        assert not found, f"{path.relative_to(SERVICE)} imports {sorted(found)}"


def test_the_server_never_imports_the_client_tools():
    for path in SERVICE.rglob("*.py"):
        if "client" in path.relative_to(SERVICE).parts:
            continue
        found = {n for n in imported(path) if n.startswith("service.client")}
        assert not found, f"{path.relative_to(SERVICE)} imports {sorted(found)}"


def test_the_checks_see_the_modules():
    # a renamed folder must not turn the checks above into checks of nothing
    for part in NO_WIRE + ["transport", "client"]:
        assert modules(part) and all(p.exists() for p in modules(part)), part
    assert "grpc" in imported(SERVICE / "transport" / "servicer.py")
