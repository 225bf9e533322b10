"""`make bench`: every number side by side in one run, on one machine, on the test split's words.

    python -m bench.run [--bundle models/g2p-en/1] [--duration-s 8]
    python -m bench.run --engine-only      # words/s of in-process decoding by batch size

Writes bench/results/bench.json, bench/results/bench.md, bench/results/bench.png and
bench/results/frontier.png. Everything runs in the precision the server serves by default
(`--precision auto`: int8 where `make quantize` measured it within 0.1 points of fp32's test WER),
with one fp32 server run beside it. Not a test: it measures. Machines are shared and noisy, so compare the ratios
within a run rather than absolute numbers across runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import write_report
from service.engine.bundle import load_bundle
from service.engine.engine import Engine, EngineConfig, served_precision
from training.evaluate import load_refs

BIN = Path(sys.executable).parent
OPEN_LOOP_FRACTIONS = (0.3, 0.5, 0.7, 0.9)


# The model's own speed: no lexicon answers, no cached ones (bench/realtraffic.py measures those),
# in the precision a user gets (--precision auto).
MODEL_ONLY = ["--lexicon", "false", "--cache-entries", "0"]


def test_words(bundle, refs: dict | None = None) -> list[str]:
    """The test split's sources (refs: its references, when already loaded), shuffled by
    random.Random(0): the words every bench measures on."""
    words = ["".join(src) for src in refs or load_refs(bundle.manifest["data"], "test")]
    random.Random(0).shuffle(words)
    return words


def varied(words: list[str]) -> list[str]:
    """The varied-length workload: a word of <= 4 letters, then one of >= 11, in turn, so that
    output lengths in a batch differ a lot."""
    short, long_ = [w for w in words if len(w) <= 4], [w for w in words if len(w) >= 11]
    return [w for pair in zip(short, long_) for w in pair]


def metric_samples(metrics_port: int) -> list:
    """Every sample a server's /metrics shows, parsed by prometheus-client."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A server in its own process, ready when its health check (or first call) answers."""

    def __init__(self, argv: list[str], health: bool = True):
        self.port = free_port()
        self.proc = subprocess.Popen(argv + ["--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.addr = f"127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            if health:
                ok = subprocess.run([sys.executable, "-m", "service.client.healthcheck", "--addr", self.addr,
                                     "--timeout-s", "1"], capture_output=True).returncode == 0
            else:
                import socket

                with socket.socket() as s:
                    ok = s.connect_ex(("127.0.0.1", self.port)) == 0
            if ok:
                return
            time.sleep(0.5)
        raise RuntimeError(f"server {argv} did not start")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(30)


def load(server: Server, words_file: str, duration_s: float, **kw) -> dict:
    argv = [sys.executable, "-m", "bench.loadgen", "--addr", server.addr, "--words", words_file,
            "--duration-s", str(duration_s)]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        argv += [flag] if v is True else ([f"--no-{k.replace('_', '-')}"] if v is False else [flag, str(v)])
    cpu0 = proc_cpu_seconds(server.proc.pid)
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    result["server_cpu_util"] = round((proc_cpu_seconds(server.proc.pid) - cpu0) / (result["seconds"] + 1.0), 3)
    print(f"  {kw} -> {result['words_per_s']:.0f} words/s, p50 {result['p50_ms']:.2f} ms, "
          f"p99 {result['p99_ms']:.2f} ms, errors {result['errors']}", flush=True)
    return result


def closed_loop(server: Server, words_file: Path, d: float) -> dict:
    """Unloaded latency, (a) 1 word per request at concurrency 64, (b) 16 words per request at 16."""
    return {"unloaded": load(server, str(words_file), d / 2, concurrency=1),
            "a_1word_c64": load(server, str(words_file), d, concurrency=64),
            "b_16words_c16": load(server, str(words_file), d, concurrency=16, words_per_request=16)}


def engine_sweep(bundle, words: list[str], seconds: float) -> dict:
    """In-process onnxruntime greedy decoding, no server: words/s by precision, decode loop and
    batch size, with the server's thread pool (the process's one pool is sized once, by the first
    engine). Keys: "<precision>/greedy-loop=<onnx|python>/batch=<b>"."""
    out = {}
    int8 = "encoder.int8" in bundle.manifest["graphs"]
    for precision in ("fp32", "int8") if int8 else ("fp32",):
        for loop in ("onnx", "python"):  # --greedy-loop
            engine = Engine(bundle, EngineConfig(precision=precision, greedy_loop=loop))
            for batch in (1, 8, 32, 64, 128, 256) if loop == "onnx" else (1, 8, 64):
                key = f"{precision}/greedy-loop={loop}/batch={batch}"
                out[key] = decode_rate(engine, words, batch, seconds)
                print(f"  engine {key}: {out[key]:.0f} words/s", flush=True)
            for batch in (32, 64, 128) if loop == "onnx" else ():
                # As request mode decodes a batch by default (--length-grouping): E is the best of both.
                key = f"{precision}/greedy-loop={loop}/batch={batch}/length-grouped"
                out[key] = decode_rate(engine, words, batch, seconds, grouped=True)
                print(f"  engine {key}: {out[key]:.0f} words/s", flush=True)
    return out


def decode_latency_ms(engine: Engine, words: list[str], seconds: float) -> dict:
    """Single-word decode calls, one after another: the engine's own batch-1 latency (target 4's bound)."""
    lat, started, i = [], time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        t = time.perf_counter()
        engine.decode([list(words[i % len(words)])])
        lat.append(time.perf_counter() - t)
        i += 1
    lat.sort()
    return {"p50_ms": 1000 * lat[len(lat) // 2], "calls": len(lat)}


def engine_latency(bundle, words: list[str], precision: str, seconds: float) -> dict:
    """Batch-1 latency through each greedy loop: request mode decodes with the ONNX Loop, continuous
    mode with one decoder call per step."""
    return {loop: decode_latency_ms(Engine(bundle, EngineConfig(precision=precision, greedy_loop=loop)), words,
                                    seconds) for loop in ("onnx", "python")}


def open_loop_curves(server: Server, bundle_dir: str, words_file: Path, mode: str, rate_a: float, d: float) -> dict:
    """Target 5: the server and the same batcher and engine in-process, at the same Poisson arrival
    times, at each fraction of (a)'s throughput."""
    from bench import inprocess

    out = {}
    for f in OPEN_LOOP_FRACTIONS:
        served = load(server, str(words_file), d, mode="open", rate=f * rate_a)
        inproc = inprocess.measure(bundle_dir, str(words_file), mode, f * rate_a, d)
        print(f"  in-process at {f * rate_a:.0f}/s: p50 {inproc['p50_ms']:.2f} ms, p99 {inproc['p99_ms']:.2f} ms",
              flush=True)
        out[f"{int(f * 100)}%"] = {**served, "rate": f * rate_a, "in_process": inproc}
    return out


def decode_rate(engine: Engine, words: list[str], batch: int, seconds: float, grouped: bool = False) -> float:
    """Words/s of batches taken in order from the shuffled words; grouped: each batch decoded as
    service/scheduling/lengths.py's length-sorted groups, as the batcher does."""
    from service.scheduling import lengths

    n, started, i = 0, time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        chunk = [list(w) for w in words[i:i + batch]] or [list(w) for w in words[:batch]]
        i = (i + batch) % len(words)
        for group in lengths.split([len(w) for w in chunk]) if grouped else [range(len(chunk))]:
            engine.decode([chunk[k] for k in group])
        n += len(chunk)
    return n / (time.perf_counter() - started)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--duration-s", type=float, default=8.0)
    p.add_argument("--out", default="bench/results")
    p.add_argument("--engine-only", action="store_true", help="only the in-process engine sweep, printed")
    p.add_argument("--loadgen", default="build/attnserve-loadgen", help="bench/cpp/loadgen.cc, built (fairness)")
    args = p.parse_args(argv)
    bundle = load_bundle(args.bundle)
    refs = load_refs(bundle.manifest["data"], "test")
    words = test_words(bundle, refs)
    d = args.duration_s
    r: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform()},
               "bundle": str(bundle.path), "test_words": len(words), "duration_s": d}

    served = served_precision(bundle.manifest, "auto")
    r["served_precision"] = served
    print(f"engine (in-process onnxruntime, no server); the server serves {served}", flush=True)
    r["engine"] = engine_sweep(bundle, words, seconds=min(d, 4.0))
    r["engine_latency"] = engine_latency(bundle, words, served, seconds=min(d, 3.0))
    if args.engine_only:
        return
    print("the machine's own ceilings (bench/limits.py)", flush=True)
    from bench import limits

    r["limits"] = limits.measure(str(bundle.path), r["engine"])
    tmp = Path(tempfile.mkdtemp(prefix="attnserve-bench-"))
    words_file = tmp / "words.txt"
    words_file.write_text("\n".join(words))
    varied_file = tmp / "varied.txt"
    varied_file.write_text("\n".join(varied(words)))

    print("gRPC floor: echo RPC", flush=True)
    with Server([sys.executable, "-m", "bench.echo"], health=False) as echo:
        r["echo"] = load(echo, str(words_file), d, mode="echo", concurrency=64)
        r["echo_unloaded"] = load(echo, str(words_file), d / 2, mode="echo", concurrency=1)

    server_argv = [str(BIN / "attnserve-server"), "--model-dir", str(bundle.path), "--host", "127.0.0.1",
                   "--metrics-port", "-1", *MODEL_ONLY]
    for mode in ("continuous", "request"):
        print(f"attnserve, {mode} batching, {served}", flush=True)
        with Server(server_argv + ["--mode", mode]) as s:
            m = r[mode] = closed_loop(s, words_file, d)
            m["c_stream"] = load(s, str(words_file), d, mode="stream", concurrency=2, window=128)
            m["varied_c64"] = load(s, str(varied_file), d, concurrency=64)
            m["open_loop"] = open_loop_curves(s, str(bundle.path), words_file, mode,
                                              m["a_1word_c64"]["calls_per_s"], d)
    if served != "fp32":
        print("attnserve, request batching, fp32 (--precision fp32)", flush=True)
        with Server(server_argv + ["--mode", "request", "--precision", "fp32"]) as s:
            r["request_fp32"] = closed_loop(s, words_file, d)

    print("naive PyTorch server (eager, one request at a time)", flush=True)
    ckpt = bundle.path / "checkpoint.pt"
    with Server([sys.executable, "-m", "bench.peers", "naive-server", "--checkpoint", str(ckpt)],
                health=False) as naive:
        r["naive_torch"] = load(naive, str(words_file), d, concurrency=8)
    r["wer"] = {"fp32": bundle.manifest.get("metrics", {}).get("test"),
                "int8": bundle.manifest.get("int8", {}).get("metrics", {}).get("test")}
    print("two models in one server: fair sharing (bench/fairness.py)", flush=True)
    from bench import fairness

    r["fairness"] = fairness.measure(bundle.path, args.loadgen, d)
    print("real traffic: English words by their frequency, lexicon and cache on and off (bench/realtraffic.py)",
          flush=True)
    from bench import realtraffic

    r["real_traffic"] = realtraffic.measure(bundle, d, r["engine"], echo_unloaded=r["echo_unloaded"])
    print("the frontier: accuracy against speed, every model on the test words (bench/frontier.py)", flush=True)
    from bench import frontier

    r["frontier"] = frontier.measure(words, refs)
    write_report(r, Path(args.out))


if __name__ == "__main__":
    main()
