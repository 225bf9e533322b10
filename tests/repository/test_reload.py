"""Model repository and hot reload: latest or pinned version, ReloadModel and polling, under load."""
import asyncio
import random
import shutil
import time

import grpc
import pytest
import pytest_asyncio

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.config import BatcherConfig, Config, RepositoryConfig, ServerConfig
from tests.live import add_version, start_loaded

WORDS = ["attention", "knight", "phoenix", "a", "characteristically", "exit", "queue", "rhythm"]


@pytest.fixture
def model_dir(tiny_bundle, tmp_path):
    """A private copy of the tiny model directory (version 1), to add versions to."""
    return shutil.copytree(tiny_bundle, tmp_path / "tiny")


@pytest_asyncio.fixture(loop_scope="session")
async def started():
    """Starts servers; stops them at teardown, whatever the test did."""
    servers = []

    async def start(model_dir, mode="continuous", **repository):
        s = await start_loaded(Config(model_dir=model_dir,
                                      server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1, grace_period_s=10,
                                                          admin_without_token=True),
                                      batcher=BatcherConfig(mode=mode, max_batch_size=16, max_wait_ms=2),
                                      repository=RepositoryConfig(**repository)))
        servers.append(s)
        return s

    yield start
    for s in servers:
        await s.stop(0)


class Load:
    """Closed-loop callers recording every reply's model version, and every failure."""

    def __init__(self, stub, callers=6):
        self.stub, self.callers = stub, callers
        self.replies: list[tuple[float, str]] = []  # (call start, model_version)
        self.failures: list[str] = []
        self._stop = asyncio.Event()
        self._replied = asyncio.Condition()

    async def _caller(self, seed):
        rng = random.Random(seed)
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                reply = await self.stub.Transduce(pb.TransduceRequest(inputs=rng.sample(WORDS, 3)), timeout=30)
                assert len(reply.results) == 3 and all(r.output_tokens for r in reply.results)
                self.replies.append((started, reply.model_version))
                async with self._replied:
                    self._replied.notify_all()
            except grpc.aio.AioRpcError as e:
                self.failures.append(f"{e.code().name}: {e.details()}")

    async def more(self, n: int = 10, timeout_s: float = 60) -> None:
        """Until n more replies have come: the load is running (each reply wakes it; the timeout
        bounds a hang)."""
        target = len(self.replies) + n
        await self.until(lambda: len(self.replies) >= target, f"not {target} replies", timeout_s)

    async def until(self, predicate, why: str, timeout_s: float = 60) -> None:
        """Until predicate() holds, checked at each reply (the timeout bounds a hang)."""
        try:
            async with self._replied:
                await asyncio.wait_for(self._replied.wait_for(predicate), timeout_s)
        except asyncio.TimeoutError:
            raise AssertionError(f"{why}: {len(self.replies)} replies, {self.failures[:3]}") from None

    async def __aenter__(self):
        self._tasks = [asyncio.ensure_future(self._caller(i)) for i in range(self.callers)]
        return self

    async def __aexit__(self, *exc):
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def versions_served(stub) -> tuple[str, str]:
    info = await stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
    reply = await stub.Transduce(pb.TransduceRequest(inputs=["a"]), timeout=10)
    return info.version, reply.model_version


async def test_serves_the_latest_version_or_the_pinned_one(model_dir, started):
    add_version(model_dir, "2")
    add_version(model_dir, "10")  # numeric order: 10 is the latest, not 2
    for pin, expected in (("", "10"), ("2", "2"), ("1", "1")):
        s = await started(model_dir, model_version=pin)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            assert await versions_served(pbg.TransducerStub(channel)) == (expected, expected)


@pytest.mark.parametrize("mode", ["continuous", "request"])
async def test_reload_rpc_swaps_under_load_without_a_failure_and_refuses_bad_bundles(model_dir, mode, started, capsys):
    s = await started(model_dir, mode)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        stub = pbg.TransducerStub(channel)
        async with Load(stub) as load:
            await load.more()  # version 1 answers
            add_version(model_dir, "2")
            info = await stub.ReloadModel(pb.ReloadModelRequest(), timeout=60)  # "" = the latest
            swapped = time.perf_counter()
            assert (info.name, info.version) == ("tiny", "2")
            await load.more()  # 6 callers: at least 4 of these 10 started after the swap
            add_version(model_dir, "3", bad_hash=True)
            add_version(model_dir, "4", break_onnx=True)
            refusals = {}
            refused, missing = grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND
            for version, code in (("3", refused), ("4", refused), ("9", missing), ("x/../1", missing)):
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await stub.ReloadModel(pb.ReloadModelRequest(model_version=version), timeout=60)
                assert e.value.code() == code
                refusals[version] = e.value.details()
            await load.more()
        assert await versions_served(stub) == ("2", "2")  # the refused bundles changed nothing
        again = await stub.ReloadModel(pb.ReloadModelRequest(model_version="2"), timeout=60)
        assert again.version == "2"  # already served: a no-op
    assert "sha256 mismatch" in refusals["3"] and "cannot load or run its ONNX graphs" in refusals["4"]
    assert load.failures == []
    after = [v for started_s, v in load.replies if started_s > swapped]
    before = [v for started_s, v in load.replies if started_s <= swapped]
    with capsys.disabled():
        print(f"\nreload ({mode}): {len(load.replies)} requests during the swap and 4 refused reloads, "
              f"{len(load.failures)} failed; {before.count('1')} answered by version 1, "
              f"{sum(v == '2' for _, v in load.replies)} by version 2")
    assert set(before) <= {"1", "2"} and "1" in before
    assert after and set(after) == {"2"}  # every call started after the swap got the new version
    assert s.metrics.model_reloads.labels("tiny", "refused")._value.get() == 4


async def test_polling_loads_a_new_version_and_skips_a_broken_one(model_dir, started):
    s = await started(model_dir, model_poll_s=0.1)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        stub = pbg.TransducerStub(channel)
        refused = s.metrics.model_reloads.labels("tiny", "refused")
        async with Load(stub) as load:
            await load.more()  # version 1 answers
            add_version(model_dir, "2")
            await load.until(lambda: load.replies[-1][1] == "2", "version 2 never served")
            add_version(model_dir, "3", break_onnx=True)
            # the server's poll tries version 3 between replies; each reply checks the counter
            await load.until(lambda: refused._value.get() >= 1, "the broken version 3 was never tried")
            await load.more()
        assert refused._value.get() == 1  # refused once, then left alone until it changes
        assert await versions_served(stub) == ("2", "2")
    assert load.failures == []
    assert {v for _, v in load.replies} == {"1", "2"}
    assert s.metrics.model_reloads.labels("tiny", "refused")._value.get() == 1
    assert s.metrics.model_info.labels("tiny", "2")._value.get() == 1
    assert ("tiny", "1") not in {tuple(k) for k in s.metrics.model_info._metrics}
