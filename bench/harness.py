"""What every bench measurement shares: the test words and workloads, a server in its own process,
a free port, the load generator run against a server, and a server's /metrics.

Below every measurement: it imports no bench module, so that bench/run.py (the driver of `make
bench`) and bench/report.py can import the measurements without any of them importing the driver back.
"""
from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import free_port, wait_serving  # the tests' own: one way to pick a port and wait
from training.evaluate import load_refs

BIN = Path(sys.executable).parent

# The model's own speed: no lexicon answers, no cached ones (bench/realtraffic.py measures those),
# in the precision a user gets (--precision auto).
MODEL_ONLY = ["--lexicon", "false", "--cache-entries", "0"]


def write_messages(path: Path, messages) -> Path:
    """Serialized protobuf messages, each after its 4-byte little-endian length: the requests file
    bench/cpp/loadgen.cc reads and sends, cycling."""
    with path.open("wb") as f:
        for message in messages:
            raw = message.SerializeToString()
            f.write(struct.pack("<I", len(raw)) + raw)
    return path


def test_words(bundle, refs: dict | None = None) -> list[str]:
    """The test split's sources (refs: its references, when already loaded), shuffled by
    random.Random(0): the words every bench measures on."""
    words = ["".join(src) for src in refs or load_refs(bundle.manifest.data, "test")]
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


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """pid and every process below it: a server's supervisor and its workers, MLServer and its own."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def server_cpu_seconds(pid: int) -> float:
    """CPU time of a server's every process (with --workers, the supervisor's is next to nothing)."""
    total = 0.0
    for p in process_tree(pid):
        try:
            total += proc_cpu_seconds(p)
        except OSError:
            pass
    return total


class Server:
    """A server in its own process, ready when its health check says SERVING (or, for a peer
    without the gRPC health service, when its port takes a connection)."""

    def __init__(self, argv: list[str], health: bool = True):
        self.port = free_port()
        self.proc = subprocess.Popen(argv + ["--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.addr = f"127.0.0.1:{self.port}"
        if health:
            wait_serving(self.addr, 120, self.proc)
            return
        deadline = time.time() + 120
        while time.time() < deadline:
            import socket

            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
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
    cpu0 = server_cpu_seconds(server.proc.pid)
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    result["server_cpu_util"] = round((server_cpu_seconds(server.proc.pid) - cpu0) / (result["seconds"] + 1.0), 3)
    print(f"  {kw} -> {result['words_per_s']:.0f} words/s, p50 {result['p50_ms']:.2f} ms, "
          f"p99 {result['p99_ms']:.2f} ms, errors {result['errors']}", flush=True)
    return result
