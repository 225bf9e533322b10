"""attnserve beside MLServer, the server people would pick instead, measured in one run the same way
(`make bench` runs it; or `python -m bench.servers`).

    python -m bench.servers --bundle models/g2p-en/1 --loadgen build/attnserve-loadgen [--rounds 2]
    python -m bench.servers --tune      # MLServer's own settings compared, its best kept

The peer is MLServer 1.7.1 running our own Engine (bench/mlserver_runtime.py), so what differs is
the serving stack. Both serve the Open Inference Protocol; both get the test split's words, lexicon
and cache off on our side (MLServer has neither), single-word ModelInfer calls over gRPC from
bench/cpp/loadgen.cc (closed loop at 1, 16 and 64 calls outstanding, and 16 words a call at 16)
and over REST from wrk (Debian's; a Lua script cycles the words), every point --seconds long.
attnserve runs as it ships (--workers 0: one process per core) and as one process (--workers 1),
the mode before worker processes, for the ratio between the two in the same run.

Each point records calls/s, latency, errors, the server's CPU per call and the cores it used: the
CPU time of every process of the server (the supervisor and its workers; MLServer and its
inference workers) over the point's wall time. Rounds interleave the servers, so that a busy
machine weighs on each alike; read the ratios within a round. Writes bench/results/servers.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, Server, free_port, server_cpu_seconds, test_words
from bench.overload import METHOD, write_requests
from service.engine.bundle import load_bundle

MLSERVER = Path("build/mlserver-venv/bin/mlserver")  # `make mlserver-venv`
CHANNELS = 64  # loadgen connections: the kernel spreads connections, not calls, over worker processes
GRPC_POINTS = {"c1": (1, 1), "c16": (16, 1), "c64": (64, 1), "16 words c16": (16, 16)}  # (calls outstanding, words)
REST_POINTS = {"REST c1": 1, "REST c16": 16, "REST c64": 64}
# MLServer's settings compared by --tune: inference worker processes, and its adaptive batching
# (max_batch_size calls, max_batch_time seconds).
TUNE_WORKERS = (0, 1, 2)
TUNE_BATCHING = ((64, 0.008), (64, 0.002), (16, 0.002))
MLSERVER_DEFAULT = {"parallel_workers": 1, "max_batch_size": 64, "max_batch_time": 0.008}


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
        url = f"http://127.0.0.1:{self.http_port}/v2/models/{self.name}/ready"
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(url, timeout=2).status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"MLServer did not serve {self.name} ({settings})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def grpc_point(loadgen: str, server, requests: Path, seconds: float, concurrency: int) -> dict:
    cpu0, t0 = server_cpu_seconds(server.proc.pid), time.perf_counter()
    out = subprocess.run([loadgen, "--target", server.addr, "--method", METHOD, "--requests", str(requests),
                          "--seconds", str(seconds), "--deadline-ms", "30000", "--concurrency", str(concurrency),
                          "--channels", str(CHANNELS)], capture_output=True, text=True, check=True).stdout
    wall, cpu = time.perf_counter() - t0, server_cpu_seconds(server.proc.pid) - cpu0
    r = json.loads(out)
    ok = r["latency_ms"].get("OK", {"p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0})
    calls = r["codes"].get("OK", 0)
    return {"calls_per_s": calls / r["seconds"], "p50_ms": ok["p50_ms"], "p90_ms": ok["p90_ms"],
            "p99_ms": ok["p99_ms"], "errors": r["answered"] - calls, "cores": cpu / wall,
            "cpu_ms_per_call": 1000 * cpu / max(calls, 1), "client_cores": r["client_cpu_s"] / wall}


WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %d, "seconds": %f, "non2xx": %d, "errors": %d, "p50_ms": %f, '
    .. '"p90_ms": %f, "p99_ms": %f}\\n', summary.requests, summary.duration / 1e6, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000))
end
"""


def wrk_script(path: Path, model: str, words: list[str]) -> None:
    """A wrk script that POSTs one word a call, cycling the words, and prints a JSON summary."""
    bodies = [json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [w]}]})
              for w in words[:2000]]
    lua = ["local bodies = {"] + [f"  {json.dumps(b)}," for b in bodies] + ["}", "local i = 0",
           "request = function()", "  i = i % #bodies + 1",
           f'  return wrk.format("POST", "/v2/models/{model}/infer", '
           '{["Content-Type"] = "application/json"}, bodies[i])', "end"]
    path.write_text("\n".join(lua) + WRK_DONE)


def rest_point(script: Path, server, http_port: int, seconds: float, connections: int) -> dict:
    cpu0, t0 = server_cpu_seconds(server.proc.pid), time.perf_counter()
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "30s", "-s", str(script),
                          f"http://127.0.0.1:{http_port}"], capture_output=True, text=True, check=True).stdout
    wall, cpu = time.perf_counter() - t0, server_cpu_seconds(server.proc.pid) - cpu0
    r = json.loads(out.strip().splitlines()[-1])
    calls = r["requests"] - r["non2xx"] - r["errors"]
    return {"calls_per_s": calls / r["seconds"], "p50_ms": r["p50_ms"], "p90_ms": r["p90_ms"], "p99_ms": r["p99_ms"],
            "errors": r["non2xx"] + r["errors"], "cores": cpu / wall, "cpu_ms_per_call": 1000 * cpu / max(calls, 1)}


def points(loadgen: str, server, http_port: int, files: dict, seconds: float, rest: bool = True,
           which: tuple[str, ...] | None = None) -> dict:
    grpc_point(loadgen, server, files[1], 2.0, 64)  # warm-up: connections, the first batches
    out = {}
    for name, (concurrency, words) in GRPC_POINTS.items():
        if which is None or name in which:
            out[name] = grpc_point(loadgen, server, files[words], seconds, concurrency)
    for name, connections in REST_POINTS.items():
        if rest and (which is None or name in which):
            out[name] = rest_point(files["wrk"], server, http_port, seconds, connections)
    for name, x in out.items():
        print(f"    {name}: {x['calls_per_s']:.0f} calls/s, p50 {x['p50_ms']:.2f} ms, p99 {x['p99_ms']:.1f} ms, "
              f"{x['cores']:.2f} cores, {x['cpu_ms_per_call']:.3f} ms CPU a call, errors {x['errors']}", flush=True)
    return out


def attnserve(bundle_dir: Path, workers: int) -> tuple[Server, int]:
    http_port = free_port()
    return Server([str(BIN / "attnserve-server"), "--model-dir", str(bundle_dir), "--host", "127.0.0.1",
                   "--metrics-port", str(http_port), "--workers", str(workers), *MODEL_ONLY]), http_port


def tune(bundle_dir: Path, loadgen: str, files: dict, seconds: float) -> dict:
    """MLServer at each of its settings, at c16 and c64 over gRPC: the best by their sum of calls/s."""
    runs = []
    for workers in TUNE_WORKERS:
        for size, wait_s in TUNE_BATCHING:
            settings = {"parallel_workers": workers, "max_batch_size": size, "max_batch_time": wait_s}
            print(f"  MLServer {settings}", flush=True)
            with MLServer(bundle_dir, settings) as m:
                runs.append({"settings": settings, "points": points(loadgen, m, m.http_port, files, seconds,
                                                                    rest=False, which=("c16", "c64"))})
    best = max(runs, key=lambda r: r["points"]["c16"]["calls_per_s"] + r["points"]["c64"]["calls_per_s"])
    return {"runs": runs, "best": best["settings"]}


def workload(bundle_dir: Path, tmp: Path) -> dict:
    bundle = load_bundle(bundle_dir)
    words = test_words(bundle)
    write_requests(tmp / "w1.bin", bundle.name, words)
    write_requests(tmp / "w16.bin", bundle.name, words, per_request=16)
    wrk_script(tmp / "rest.lua", bundle.name, words)
    return {1: tmp / "w1.bin", 16: tmp / "w16.bin", "wrk": tmp / "rest.lua"}


def measure(bundle_dir: Path, loadgen: str, seconds: float, rounds: int, mlserver_settings: dict,
            attnserve_workers: tuple[int, ...] = (0, 1)) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        files = workload(bundle_dir, Path(tmp))
        out = []
        for i in range(rounds):
            this: dict = {}
            for workers in attnserve_workers:
                print(f"  round {i + 1}: attnserve --workers {workers}", flush=True)
                server, http_port = attnserve(bundle_dir, workers)
                with server:
                    this[f"attnserve --workers {workers}"] = points(loadgen, server, http_port, files, seconds)
            print(f"  round {i + 1}: MLServer {mlserver_settings}", flush=True)
            with MLServer(bundle_dir, mlserver_settings) as m:
                this["MLServer"] = points(loadgen, m, m.http_port, files, seconds)
            out.append(this)
    return {"seconds": seconds, "channels": CHANNELS, "mlserver_settings": mlserver_settings,
            "cpus": len(os.sched_getaffinity(0)), "rounds": out}


def ratio(run: dict, ours: str, theirs: str, point: str, key: str = "calls_per_s") -> float:
    return run[ours][point][key] / max(run[theirs][point][key], 1e-9)


TARGETS = [  # (what, point, ours, theirs, key, needed, higher is better)
    ("attnserve / MLServer calls/s, gRPC c16", "c16", "attnserve --workers 0", "MLServer", "calls_per_s", 2.5, True),
    ("attnserve / MLServer calls/s, gRPC c64", "c64", "attnserve --workers 0", "MLServer", "calls_per_s", 2.5, True),
    ("attnserve / MLServer calls/s, REST c16", "REST c16", "attnserve --workers 0", "MLServer", "calls_per_s", 3.0,
     True),
    ("attnserve / MLServer words/s, 16 words a call", "16 words c16", "attnserve --workers 0", "MLServer",
     "calls_per_s", 2.0, True),
    ("attnserve / MLServer calls/s, gRPC c1", "c1", "attnserve --workers 0", "MLServer", "calls_per_s", 6.0, True),
    ("c1 p50: workers minus single process, ms (<= 0.3)", "c1", "attnserve --workers 0", "attnserve --workers 1",
     "p50_ms", 0.3, False),
    ("p99 at c64: attnserve / MLServer (<= 1)", "c64", "attnserve --workers 0", "MLServer", "p99_ms", 1.0, False),
    ("c64 calls/s: workers / single process", "c64", "attnserve --workers 0", "attnserve --workers 1", "calls_per_s",
     1.8, True),
]


def target_rows(r: dict) -> list[tuple[str, list[float], float, bool]]:
    """Each target's figure in each round, what it needs, and whether every round meets it."""
    rows = []
    for what, point, ours, theirs, key, need, higher in TARGETS:
        if not all(ours in run and theirs in run and point in run[ours] for run in r["rounds"]):
            continue
        if key == "p50_ms" and not higher:  # a difference in ms
            figures = [run[ours][point][key] - run[theirs][point][key] for run in r["rounds"]]
        else:
            figures = [ratio(run, ours, theirs, point, key) for run in r["rounds"]]
        rows.append((what, figures, need, all(f >= need if higher else f <= need for f in figures)))
    cores = [run["attnserve --workers 0"]["c64"]["cores"] for run in r["rounds"] if "attnserve --workers 0" in run]
    if cores:
        rows.append(("cores used at c64 by attnserve", cores, 1.8, all(c >= 1.8 for c in cores)))
    return rows


def lines(r: dict) -> list[str]:
    out = [f"MLServer {r['mlserver_settings']}; {r['seconds']:g} s a point, {r['channels']} gRPC connections, "
           f"{r['cpus']} CPUs shared by client and server.", "",
           "| target | each round | needed | met |", "|---|---|---|---|"]
    out += [f"| {what} | {', '.join(f'{f:.2f}' for f in figures)} | {need} | {'yes' if met else '**no**'} |"
            for what, figures, need, met in target_rows(r)]
    out += ["", "| round | point | server | calls/s | p50 ms | p99 ms | errors | cores used | CPU ms a call |",
            "|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(r["rounds"], 1):
        for point in [*GRPC_POINTS, *REST_POINTS]:
            for server, pts in run.items():
                if point in pts:
                    x = pts[point]
                    out.append(f"| {i} | {point} | {server} | {x['calls_per_s']:.0f} | {x['p50_ms']:.2f} | "
                               f"{x['p99_ms']:.1f} | {x['errors']} | {x['cores']:.2f} | {x['cpu_ms_per_call']:.3f} |")
    if "tuning" in r:
        out += ["", "MLServer's settings (gRPC, calls/s):", "", "| settings | c16 | c64 |", "|---|---|---|"]
        out += [f"| {t['settings']} | {t['points']['c16']['calls_per_s']:.0f} | {t['points']['c64']['calls_per_s']:.0f} |"
                for t in r["tuning"]["runs"]]
    return out


def tuned_and_measured(bundle_dir: Path, loadgen: str, seconds: float, rounds: int = 2) -> dict:
    """What `make bench` runs: MLServer's settings compared (half-length points), then the rounds with its best."""
    with tempfile.TemporaryDirectory() as tmp:
        tuning = tune(bundle_dir, loadgen, workload(bundle_dir, Path(tmp)), seconds / 2)
    return {**measure(bundle_dir, loadgen, seconds, rounds, tuning["best"]), "tuning": tuning}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--loadgen", default="build/attnserve-loadgen")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tune", action="store_true", help="compare MLServer's settings first and keep its best")
    p.add_argument("--attnserve-workers", type=int, nargs="+", default=[0, 1])
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    bundle_dir = Path(args.bundle)
    settings, tuning = dict(MLSERVER_DEFAULT), None
    if args.tune:
        with tempfile.TemporaryDirectory() as tmp:
            tuning = tune(bundle_dir, args.loadgen, workload(bundle_dir, Path(tmp)), args.seconds)
        settings = tuning["best"]
    r = measure(bundle_dir, args.loadgen, args.seconds, args.rounds, settings, tuple(args.attnserve_workers))
    if tuning:
        r["tuning"] = tuning
    r["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "servers.json").write_text(json.dumps(r, indent=2) + "\n")
    (out / "servers.md").write_text("\n".join([f"# attnserve beside MLServer ({r['when']})", "", *lines(r)]) + "\n")
    print("\n".join(lines(r)))
    return r


if __name__ == "__main__":
    main()
