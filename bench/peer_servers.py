"""The peer servers of bench/servers.py as processes: MLServer (bench/mlserver_runtime.py) and BentoML
(bench/bentoml_service.py), each serving our own Engine from its own virtual environment, started,
waited for until its model answers, and stopped; and the wrk scripts that call each over REST.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.harness import free_port
from service.engine.bundle import load_bundle

MLSERVER = Path("build/mlserver-venv/bin/mlserver")  # `make mlserver-venv`
BENTOML = Path("build/bentoml-venv/bin/bentoml")  # `make bentoml-venv`


def wait_ready(proc: subprocess.Popen, url: str, what: str) -> None:
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up ({url})")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class MLServer:
    """MLServer serving the bundle through bench/mlserver_runtime.py, ready when the model is."""

    def __init__(self, bundle_dir: Path, settings: dict):
        self.dir = Path(tempfile.mkdtemp(prefix="attnserve-mlserver-"))
        self.port, self.http_port = free_port(), free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.name = load_bundle(bundle_dir).name
        (self.dir / "settings.json").write_text(json.dumps({
            "http_port": self.http_port, "grpc_port": self.port, "metrics_port": free_port(), "debug": False,
            "parallel_workers": settings["parallel_workers"], "load_models_at_startup": True}))
        (self.dir / "model-settings.json").write_text(json.dumps({
            "name": self.name, "implementation": "bench.mlserver_runtime.EngineRuntime",
            "max_batch_size": settings["max_batch_size"], "max_batch_time": settings["max_batch_time"],
            "parameters": {"uri": str(Path(bundle_dir).resolve())}}))
        env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
        self.proc = subprocess.Popen([str(MLSERVER), "start", str(self.dir)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env)
        try:
            wait_ready(self.proc, f"http://127.0.0.1:{self.http_port}/v2/models/{self.name}/ready", f"MLServer {settings}")
        except RuntimeError:
            self.__exit__()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)

    def wrk_script(self, path: Path, words: list[str]) -> Path:
        return oip_wrk_script(path, self.name, words)


class BentoML:
    """BentoML serving the bundle through bench/bentoml_service.py (REST only: BentoML 1.4 serves no
    gRPC), ready when its service is."""

    def __init__(self, bundle_dir: Path, settings: dict):
        self.http_port = free_port()
        env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "G2P_BENCH_BUNDLE": str(Path(bundle_dir).resolve()),
               "G2P_BENCH_WORKERS": str(settings["workers"]), "G2P_BENCH_MAX_BATCH": str(settings["max_batch_size"]),
               "G2P_BENCH_MAX_LATENCY_MS": str(settings["max_latency_ms"]),
               "BENTOML_CONFIG_OPTIONS": "api_server.logging.access.enabled=false"}  # attnserve logs no call either
        self.proc = subprocess.Popen([str(BENTOML), "serve", "bench.bentoml_service:G2P", "--host", "127.0.0.1",
                                      "--port", str(self.http_port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env)
        try:
            wait_ready(self.proc, f"http://127.0.0.1:{self.http_port}/readyz", f"BentoML {settings}")
        except RuntimeError:
            stop(self.proc)
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop(self.proc)

    def wrk_script(self, path: Path, words: list[str]) -> Path:
        return wrk_script(path, "/phonemes", [{"words": [w]} for w in words])


WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %d, "seconds": %f, "non2xx": %d, "errors": %d, "p50_ms": %f, '
    .. '"p90_ms": %f, "p99_ms": %f}\\n', summary.requests, summary.duration / 1e6, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000))
end
"""


def wrk_script(path: Path, route: str, bodies: list[dict]) -> Path:
    """A wrk script that POSTs the bodies in turn as JSON and prints a JSON summary at the end."""
    lua = ["local bodies = {"] + [f"  {json.dumps(json.dumps(b))}," for b in bodies[:2000]] + ["}", "local i = 0",
           "request = function()", "  i = i % #bodies + 1",
           f'  return wrk.format("POST", "{route}", {{["Content-Type"] = "application/json"}}, bodies[i])', "end"]
    path.write_text("\n".join(lua) + WRK_DONE)
    return path


def oip_wrk_script(path: Path, model: str, words: list[str]) -> Path:
    """The Open Inference Protocol's REST call, one word a call: MLServer and attnserve both take it."""
    return wrk_script(path, f"/v2/models/{model}/infer", [
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [w]}]} for w in words])
