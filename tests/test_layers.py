"""The folder tree is the flow, one way: transport -> repository -> answering -> scheduling -> engine.

A module may import its own layer and the layers below it, and the shared modules every layer may
use (domain, config, metrics, tasks), which import no other part of the service. Only transport/
(and server.py, client/) touch grpc or the generated protobuf modules; the server never imports
the client tools. Beside the service: the bundle contract (attnserve/bundle), which imports neither
the service nor training nor torch, and training, which imports of the service only the engine (to
evaluate what it exports) and the domain. No import cycle anywhere. Imports are read from the source
with ast, relative ones resolved, so a lazy import inside a function counts too.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_layers import find_cycle  # the one cycle finder, tested there

SERVICE = Path(__file__).resolve().parent.parent / "service"
REPO = SERVICE.parent
TRAINING, BUNDLE = REPO / "training", REPO / "attnserve" / "bundle"
# The generated protocol is attnserve.v1 and attnserve.inference; attnserve's other modules (attnserve.config,
# attnserve.bundle) are plain Python every layer may use.
WIRE = ("grpc", "grpc_health", "grpc_reflection", "attnserve.v1", "attnserve.inference", "google.protobuf")
# Top to bottom: a request walks down this list and never back up.
LAYERS = ["transport", "repository", "answering", "scheduling", "engine"]
SHARED = ["domain", "config", "metrics", "tasks"]  # below every layer, beside each other
NO_WIRE = LAYERS[1:] + [f"{m}.py" for m in SHARED]
# Above every layer: the server that wires them, the supervisor of its worker processes, and the
# channel between the two.
TOP = ["server", "supervisor", "control"]


def imported(path: Path, package: str) -> set[str]:
    """Every module a file imports, relative imports resolved against its package (e.g. service.engine)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                if node.module:
                    names.add(module)
                else:  # `from . import x`: the submodule x
                    names.update(f"{module}.{a.name}" for a in node.names)
            elif node.module:
                names.add(node.module)
    return names


def package_of(path: Path) -> str:
    parts = path.relative_to(SERVICE.parent).with_suffix("").parts
    return ".".join(parts if path.name == "__init__.py" else parts[:-1]).removesuffix(".__init__")


def part_of(module: str) -> str | None:
    """The part of the service a module belongs to: a layer, a shared module, server, client; None outside."""
    parts = module.split(".")
    if parts[0] != "service":
        return None
    return parts[1] if len(parts) > 1 else "service"


def rank(part: str) -> float:
    """Lower is higher up. The server builds everything; shared modules are below every layer."""
    if part in TOP:
        return -1
    if part in LAYERS:
        return LAYERS.index(part)
    if part in SHARED:
        return len(LAYERS)
    raise AssertionError(f"service/{part} is in no layer: add it to LAYERS or SHARED")


def own_part(path: Path) -> str:
    return part_of(package_of(path) if path.name == "__init__.py" else package_of(path) + "." + path.stem)


def upward(path: Path) -> set[str]:
    """The service modules this file imports from a layer above its own (or, for a shared module, any)."""
    own = own_part(path)
    found = set()
    for name in imported(path, package_of(path)):
        other = part_of(name)
        if other is None or other == own or other == "service":
            continue
        if own in SHARED or rank(other) < rank(own):
            found.add(name)
    return found


def modules(part: str) -> list[Path]:
    path = SERVICE / part
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def server_modules() -> list[Path]:
    return [p for p in SERVICE.rglob("*.py") if "client" not in p.relative_to(SERVICE).parts]


@pytest.mark.parametrize("part", NO_WIRE)
def test_below_transport_nothing_imports_grpc_or_protobuf(part):
    for path in modules(part):
        wire = {n for n in imported(path, package_of(path)) if n in WIRE or n.startswith(tuple(w + "." for w in WIRE))}
        assert not wire, f"{path.relative_to(SERVICE)} imports {sorted(wire)}"


def test_no_module_imports_a_layer_above_its_own():
    found = {str(p.relative_to(SERVICE)): sorted(up) for p in server_modules() if (up := upward(p))}
    assert not found, f"upward imports: {found}"


def test_the_domain_imports_nothing_of_the_service_or_outside_the_standard_library():
    names = imported(SERVICE / "domain.py", "service")
    assert not {n for n in names if n.startswith("service")}, names
    assert names <= {"__future__", "dataclasses", "pathlib", "typing", "numpy"}, names
    tree = ast.parse((SERVICE / "domain.py").read_text())
    runtime = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(getattr(n, "module", None) != "numpy" for n in runtime)  # numpy only for annotations


def test_the_server_never_imports_the_client_tools():
    for path in server_modules():
        found = {n for n in imported(path, package_of(path)) if n.startswith("service.client")}
        assert not found, f"{path.relative_to(SERVICE)} imports {sorted(found)}"


def test_every_module_is_in_a_layer():
    for path in server_modules():
        part = own_part(path)
        if part not in ("service", *TOP):
            rank(part)


def test_the_checks_see_the_modules():
    # a renamed folder must not turn the checks above into checks of nothing
    for part in NO_WIRE + ["transport", "client"]:
        assert modules(part) and all(p.exists() for p in modules(part)), part
    assert "grpc" in imported(SERVICE / "transport" / "servicer.py", "service.transport")


def test_the_check_fails_on_an_upward_import_absolute_or_relative(tmp_path, monkeypatch):
    """The rules above catch what they are for: an engine module reaching up to scheduling, once
    absolutely and once relatively, and a shared module importing a layer."""
    root = tmp_path / "service"
    for part in LAYERS:
        (root / part).mkdir(parents=True)
        (root / part / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "engine" / "absolute.py").write_text("def f():\n    from service.scheduling.batcher import Batcher\n")
    (root / "engine" / "relative.py").write_text("from ..scheduling import batcher\n")
    (root / "engine" / "fine.py").write_text("from .bundle import Bundle\nfrom service.domain import Decoded\n")
    (root / "domain.py").write_text("from service.engine.engine import Engine\n")
    (root / "answering" / "down.py").write_text("from ..scheduling.batcher import Batcher\n")
    monkeypatch.setattr(sys.modules[__name__], "SERVICE", root)
    assert upward(root / "engine" / "absolute.py") == {"service.scheduling.batcher"}
    assert upward(root / "engine" / "relative.py") == {"service.scheduling"}
    assert upward(root / "engine" / "fine.py") == set()
    assert upward(root / "domain.py") == {"service.engine.engine"}
    assert upward(root / "answering" / "down.py") == set()


def submodules_imported(path: Path, package: str) -> set[str]:
    """`from service.client import text` names the module service.client.text, which imported() reads as
    the package service.client: every `from X import y` as X.y too (not all of them modules)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            (module,) = imported_from(node, package)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def imported_from(node: ast.ImportFrom, package: str) -> set[str]:
    if not node.level:
        return {node.module}
    base = package.split(".")
    return {".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))}


def module_files(root: Path) -> dict[str, Path]:
    """module name -> file, for every module under root (a package directory)."""
    return {package_of(p) if p.name == "__init__.py" else f"{package_of(p)}.{p.stem}": p for p in root.rglob("*.py")}


EVERY_PACKAGE = [SERVICE, TRAINING, REPO / "attnserve", REPO / "experiments", REPO / "bench"]


@pytest.mark.parametrize("roots", [[SERVICE], [TRAINING], [BUNDLE], EVERY_PACKAGE],
                         ids=["service", "training", "attnserve.bundle", "the whole project"])
def test_no_import_cycle(roots):
    """None within a package, and none through several (training -> service.engine -> ... -> training)."""
    files = {m: p for root in roots for m, p in module_files(root).items()}
    graph = {m: {n for n in imported(p, package_of(p)) | submodules_imported(p, package_of(p))
                 if n in files and n != m} for m, p in files.items()}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_the_bundle_module_imports_nothing_of_the_service_training_or_torch():
    banned = ("service", "training", "torch", "onnx", "onnxruntime", "bench")
    files = module_files(BUNDLE)
    assert {"attnserve.bundle", "attnserve.bundle.manifest", "attnserve.bundle.hints"} <= set(files)
    for name, path in files.items():
        found = {n for n in imported(path, package_of(path)) if n.split(".")[0] in banned}
        assert not found, f"{name} imports {sorted(found)}"


def test_importing_the_bundle_module_loads_no_service_training_or_torch():
    code = ("import sys, attnserve.bundle, attnserve.bundle.hints, attnserve.bundle.prosody, "
            "attnserve.bundle.text_policy\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'service', 'training', 'torch', 'onnxruntime'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# What training may use of the service: the engine, to evaluate the bundles it exports, and the domain
# (DecodeOptions, errors). The bundle's own rules are attnserve.bundle's, not the server's.
TRAINING_MAY_USE = ("service.engine", "service.domain")


def test_training_imports_of_the_service_only_the_engine_and_the_domain():
    found = {}
    for name, path in module_files(TRAINING).items():
        serving = {n for n in imported(path, package_of(path)) if n.split(".")[0] == "service"}
        if bad := sorted(n for n in serving if n not in TRAINING_MAY_USE
                         and not n.startswith(tuple(m + "." for m in TRAINING_MAY_USE))):
            found[name] = bad
    assert not found, f"training reaches into the server: {found}"


def test_the_training_checks_see_the_modules():
    files = module_files(TRAINING)
    assert {"training.export", "training.train", "training.evaluate"} <= set(files)
    assert "service.engine.engine" in imported(files["training.export"], "training")
