"""`attnserve-server --workers 2` as real processes (service/supervisor.py): calls spread over every
worker and /metrics sums them; SIGTERM mid-burst loses no call and exits 0; a reload, an override
change and a repository load reach every worker; a worker that dies takes the server down.

Which worker did what is read from the workers' own Prometheus files (the test names the
directory, PROMETHEUS_MULTIPROC_DIR): prometheus-client's MultiProcessCollector over one worker's
files alone is that worker's view.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from attnserve.inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kpbg
from bench.harness import metric_samples
from service.config import worker_core
from tests.helpers import free_port, until_counted, wait_serving
from tests.live import VENV_BIN, LogLines, add_version, copy_model, terminate

WORKERS = 2
MAX_CONNECTIONS = 200  # only bounds a hang: each new connection lands on a worker at random
NO_ATTENTION = pb.DecodeOptions(return_attention=False)


class Workers:
    """A supervisor and its workers serving a model repository; metrics in `metrics_dir`."""

    def __init__(self, repository: Path, tmp_path: Path, *args: str):
        self.port, self.http_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.metrics_dir = tmp_path / "prometheus"
        self.log = tmp_path / "server.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        env["PROMETHEUS_MULTIPROC_DIR"] = str(self.metrics_dir)
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "attnserve-server"), "--workers", str(WORKERS), "--model-repository", str(repository),
             "--host", "127.0.0.1", "--port", str(self.port), "--metrics-port", str(self.http_port),
             "--admin-without-token", "true", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.lines = LogLines(self.proc, self.log)

    def __enter__(self):
        wait_serving(self.address, 180, self.proc)
        return self

    def __exit__(self, *exc):
        terminate(self.proc)

    def pids(self) -> list[int]:
        """The workers: the supervisor's children."""
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    out.append(int(stat.parent.name))
            except (OSError, IndexError, ValueError):
                continue
        return sorted(out)

    def worker_value(self, pid: int, metric: str, tmp: Path, **labels) -> float:
        """One worker's sum of a metric's samples matching `labels`, from its own files."""
        alone = tmp / f"worker-{pid}"
        shutil.rmtree(alone, ignore_errors=True)
        alone.mkdir()
        for f in self.metrics_dir.glob(f"*_{pid}.db"):
            shutil.copy(f, alone / f.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, str(alone))
        return sum(s.value for family in registry.collect() for s in family.samples
                   if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()))

    def server_value(self, metric: str, **labels) -> float:
        """The same, as /metrics shows it for the whole server."""
        return sum(s.value for s in metric_samples(self.http_port)
                   if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()))

    def per_worker(self, metric: str, tmp: Path, **labels) -> dict[int, float]:
        return {pid: self.worker_value(pid, metric, tmp, **labels) for pid in self.pids()}


def thread_masks(pid: int) -> list[str]:
    """The cores each thread of the process may run on (`Cpus_allowed_list`), one entry a thread."""
    return [next(line.split(":")[1].strip() for line in status.read_text().splitlines()
                 if line.startswith("Cpus_allowed_list:")) for status in Path(f"/proc/{pid}/task").glob("*/status")]


@pytest.fixture
def repository(tiny_bundle, tmp_path) -> Path:
    root = tmp_path / "models"
    copy_model(tiny_bundle, root, "tiny")
    return root


def channel(address: str, i: int) -> grpc.aio.Channel:
    """A channel of its own connection (distinct arguments: gRPC does not share the subchannel)."""
    return grpc.aio.insecure_channel(address, options=[("attnserve.test.connection", i)])


async def until_every_worker(server: Workers, tmp: Path, call, metric: str, **labels) -> int:
    """Make `call(stub)` over new connections until every worker's `metric` has counted one; returns
    how many calls it took. A connection stays with the worker that accepted it."""
    calls = 0
    for i in range(MAX_CONNECTIONS):
        async with channel(server.address, i) as ch:
            await call(pbg.TransducerStub(ch))
            calls += 1
        counts = server.per_worker(metric, tmp, **labels)
        if len(counts) == WORKERS and all(v > 0 for v in counts.values()):
            return calls
    raise AssertionError(f"{MAX_CONNECTIONS} connections never reached every worker: {counts}")


async def test_calls_spread_over_every_worker_and_metrics_sum_them(repository, tmp_path):
    with Workers(repository, tmp_path) as server:
        assert len(server.pids()) == WORKERS

        answers: dict[str, set] = {"hello": set(), "world": set()}  # every answer each word got, any worker

        async def transduce(stub):
            reply = await stub.Transduce(pb.TransduceRequest(inputs=["hello", "world"], options=NO_ATTENTION),
                                         timeout=30)
            assert len(reply.results) == 2
            for word, r in zip(["hello", "world"], reply.results):
                answers[word].add((r.output_text, r.log_prob))

        calls = await until_every_worker(server, tmp_path, transduce, "attnserve_requests_total", rpc="Transduce")
        # One answer per input: every worker decoded these words, and all gave the same output and score.
        assert all(len(got) == 1 for got in answers.values()), answers
        per_worker = server.per_worker("attnserve_requests_total", tmp_path, rpc="Transduce")
        inputs = server.per_worker("attnserve_inputs_total", tmp_path, model="tiny")
        # Every thread of each worker (its engine's, started by its first decode, included) runs on the core
        # its number names, where the cores are the workers' own (two on CI's two cores); elsewhere each
        # runs where the supervisor may.
        assert all(inputs.values())
        cores = [worker_core(i, WORKERS) for i in range(WORKERS)]
        expected = ([{str(c)} for c in cores] if all(c >= 0 for c in cores)
                    else [set(thread_masks(server.proc.pid))] * WORKERS)
        assert sorted(map(sorted, (set(thread_masks(pid)) for pid in server.pids()))) == sorted(map(sorted, expected))
        assert sum(per_worker.values()) == calls and all(v > 0 for v in per_worker.values())
        # /metrics, whichever worker answers it, is the whole server: counters, histograms and gauges
        for _ in range(4):  # new connections each time, so more than one worker answers
            assert server.server_value("attnserve_requests_total", rpc="Transduce") == calls
            assert server.server_value("attnserve_request_duration_seconds_count", rpc="Transduce") == calls
            assert server.server_value("attnserve_inputs_total", model="tiny") == sum(inputs.values()) > 0
            assert server.server_value("attnserve_inflight_requests") == 0
            assert server.server_value("attnserve_model_info", name="tiny", version="1") == 1


async def test_sigterm_mid_burst_loses_no_call_across_workers_and_exits_0(repository, tmp_path):
    """Streams held open on every worker are calls provably in flight when the signal comes: each
    worker drains them (answers every message sent during the drain) before it exits, and so does
    the burst of unary calls sent before the signal; the supervisor exits 0 once every worker has."""
    with Workers(repository, tmp_path, "--lame-duck-s", "0", "--grace-period-s", "60") as server:
        channels, streams = [], []
        for i in range(MAX_CONNECTIONS):
            ch = channel(server.address, i)
            channels.append(ch)
            stream = pbg.TransducerStub(ch).TransduceStream(timeout=120)
            await stream.write(pb.TransduceRequest(inputs=["first"], request_id="0", options=NO_ATTENTION))
            assert (await stream.read()).request_id == "0"
            streams.append(stream)
            held = server.per_worker("attnserve_requests_total", tmp_path, rpc="TransduceStream")
            if len(held) == WORKERS and all(v > 0 for v in held.values()):
                break
        else:
            raise AssertionError(f"streams never reached every worker: {held}")
        words = ["internationalization", "photosynthesis", "counterproductive", "misunderstanding"] * 4
        burst = [asyncio.ensure_future(pbg.TransducerStub(channels[i % len(channels)]).Transduce(
            pb.TransduceRequest(inputs=words, options=NO_ATTENTION), timeout=120)) for i in range(64)]
        # taken in: answered, or in flight (a stream between messages is not)
        await until_counted(lambda: server.server_value("attnserve_requests_total", rpc="Transduce")
                            + server.server_value("attnserve_inflight_requests"), len(burst), burst)
        server.proc.send_signal(signal.SIGTERM)
        outcomes = await asyncio.gather(*burst, return_exceptions=True)
        # Every worker is draining now, and waits for its streams: each still answers what it is sent.
        for stream in streams:
            await stream.write(pb.TransduceRequest(inputs=["during"], request_id="1", options=NO_ATTENTION))
            reply = await stream.read()
            assert reply.request_id == "1" and not reply.HasField("error"), reply
        assert server.proc.poll() is None, "the server exited while its streams were still open"
        for stream in streams:
            await stream.done_writing()
            assert await stream.read() == grpc.aio.EOF
            assert await stream.code() == grpc.StatusCode.OK
        exit_code = await asyncio.to_thread(server.proc.wait, 60)
        for ch in channels:
            await ch.close()
    failed = [o for o in outcomes if isinstance(o, Exception)]
    assert failed == [], failed[:3]
    assert all(len(o.results) == len(words) for o in outcomes)
    assert exit_code == 0
    log = await server.lines.whole()
    assert all(f"[worker {i}]: shutting down" in log for i in range(WORKERS)), log[-2000:]


async def test_a_reload_an_override_change_and_a_repository_load_reach_every_worker(repository, tmp_path, tiny_bundle):
    with Workers(repository, tmp_path, "--overrides-poll-s", "0.2") as server:
        pids = server.pids()
        async with channel(server.address, 0) as ch:
            add_version(repository / "tiny", "2")
            info = await pbg.TransducerStub(ch).ReloadModel(pb.ReloadModelRequest(model_name="tiny"), timeout=120)
            assert info.version == "2"
        # the reply comes once every worker serves version 2
        for pid in pids:
            assert server.worker_value(pid, "attnserve_model_reloads_total", tmp_path, model="tiny", result="ok") == 2
            assert server.worker_value(pid, "attnserve_model_info", tmp_path, name="tiny", version="2") == 1
            assert server.worker_value(pid, "attnserve_model_info", tmp_path, name="tiny", version="1") == 0

        async def version_2(stub):
            reply = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], options=NO_ATTENTION), timeout=30)
            assert reply.model_version == "2"

        await until_every_worker(server, tmp_path, version_2, "attnserve_requests_total", rpc="Transduce")

        # each worker polls the overrides file itself, and logs each read it takes (after counting it)
        (repository / "tiny" / "overrides.tsv").write_text("zyxwab\tZ IH K S\n")
        await server.lines.until(r"\[worker \d\]: tiny: overrides .* in force \(1 sources\)", WORKERS)
        assert all(v >= 1 for v in server.per_worker("attnserve_overrides_loads_total", tmp_path,
                                                     model="tiny", result="ok").values())

        async def override(stub):
            reply = await stub.Transduce(pb.TransduceRequest(inputs=["zyxwab"], options=NO_ATTENTION), timeout=30)
            assert reply.results[0].origin == pb.ORIGIN_OVERRIDE
            assert list(reply.results[0].output_tokens) == ["Z", "IH", "K", "S"]

        await until_every_worker(server, tmp_path, override, "attnserve_answers_total", model="tiny", origin="OVERRIDE")

        copy_model(tiny_bundle, repository, "late")  # copied in while the server runs
        async with channel(server.address, 1) as ch:
            await kpbg.GRPCInferenceServiceStub(ch).RepositoryModelLoad(
                kpb.RepositoryModelLoadRequest(model_name="late"), timeout=120)
        for pid in pids:
            assert server.worker_value(pid, "attnserve_model_reloads_total", tmp_path, model="late", result="ok") == 1

        async def late(stub):
            reply = await stub.Transduce(pb.TransduceRequest(inputs=["hello"], model_name="late",
                                                             options=NO_ATTENTION), timeout=30)
            assert reply.model_name == "late"

        await until_every_worker(server, tmp_path, late, "attnserve_requests_total", rpc="Transduce", model="late")
        # a failure in the workers reaches the caller: no such version in any of them
        async with channel(server.address, 2) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pbg.TransducerStub(ch).ReloadModel(pb.ReloadModelRequest(model_name="tiny", model_version="9"),
                                                         timeout=60)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_worker_that_dies_takes_the_server_down(repository, tmp_path):
    """Not a worker brought back alone on a version the others may have left: the supervisor stops
    the others and exits non-zero, for the orchestrator to restart the server whole."""
    with Workers(repository, tmp_path) as server:
        first, *others = server.pids()
        os.kill(first, signal.SIGKILL)
        exit_code = await asyncio.to_thread(server.proc.wait, 60)
    assert exit_code != 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in others)  # stopped, and waited for
    assert "exited with code -9 on its own" in await server.lines.whole()


async def test_port_0_gives_every_worker_the_same_free_ports(repository, tmp_path):
    """The supervisor picks the free ports itself (each worker picking its own would part them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    log = tmp_path / "server.log"
    proc = subprocess.Popen([str(VENV_BIN / "attnserve-server"), "--workers", str(WORKERS), "--model-repository",
                             str(repository), "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    lines = LogLines(proc, log)
    try:
        found = (await lines.until(r"supervising \d+ workers on port (\d+) \(HTTP (\d+)\)"))[0]
        port, http_port = int(found[1]), int(found[2])
        await asyncio.to_thread(wait_serving, f"127.0.0.1:{port}", 180, proc)
        serving = [m.groups() for m in await lines.until(
            r"\[worker (\d)\]: serving .* on port (\d+) \(.*metrics on (\d+)\)", WORKERS)]
        assert sorted(serving) == [(str(i), str(port), str(http_port)) for i in range(WORKERS)], serving
        assert any(s.name == "attnserve_model_info" for s in metric_samples(http_port))
    finally:
        terminate(proc)
