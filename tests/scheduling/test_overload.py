"""Overload: measure the real server's capacity, then flood it at four times that.

Requests carry eight long words each with a small batch, so the engine (not the gRPC
plumbing this process shares with the server) is what runs out.
"""
import asyncio
import os
import time

import grpc
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from tests.live import Calls, ServerSetup, loopback_config

WORDS = ["internationalization", "characteristically", "photosynthesis", "counterproductive",
         "incomprehensible", "extraordinarily", "misunderstanding", "responsibilities"]
MAX_QUEUE = 32  # sources: four requests
FLOOD_FACTOR, FLOOD_S = 4, 3.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def server_setup(tiny_bundle):
    return ServerSetup(loopback_config(tiny_bundle, server={"metrics_port": -1}, answering={"cache_entries": 0},
                                       batcher={"max_batch_size": 2, "max_queue_size": MAX_QUEUE}), per_test=True)


async def test_flood_at_four_times_capacity(server, capsys):
    depths = []  # every value the queue-depth gauge is ever set to
    gauge_set = server.batcher.metrics.queue_depth.set
    server.batcher.metrics.queue_depth.set = lambda v: (depths.append(v), gauge_set(v))
    request = pb.TransduceRequest(inputs=WORDS, options=pb.DecodeOptions(return_attention=False))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        # Capacity: a closed loop of three callers keeps the engine busy without ever filling the queue.
        done, stop = 0, time.perf_counter() + 2.0

        async def caller():
            nonlocal done
            while time.perf_counter() < stop:
                await stub.Transduce(request, timeout=30)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(3)))
        capacity = done / (time.perf_counter() - started)

        # Flood: an open loop at FLOOD_FACTOR x capacity, whatever the replies.
        outcomes = {"served": 0, "rejected": 0, "other": []}

        async def one():
            try:
                reply = await stub.Transduce(request, timeout=30)
                assert len(reply.results) == len(WORDS)
                outcomes["served"] += 1
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    outcomes["rejected"] += 1
                else:
                    outcomes["other"].append(f"{e.code().name}: {e.details()}")

        rss_before, rate = rss_bytes(), FLOOD_FACTOR * capacity
        calls, started = [], time.perf_counter()
        while (elapsed := time.perf_counter() - started) < FLOOD_S:
            while len(calls) < rate * elapsed:
                calls.append(asyncio.create_task(one()))
            await asyncio.sleep(0.002)
        offered = len(calls) / (time.perf_counter() - started)
        await asyncio.wait_for(asyncio.gather(*calls), 60)  # every admitted call finishes
        rss_after = rss_bytes()
    served, rejected, other = outcomes["served"], outcomes["rejected"], outcomes["other"]
    with capsys.disabled():
        print(f"\noverload: capacity {capacity:.0f} req/s ({capacity * len(WORDS):.0f} words/s); offered "
              f"{offered:.0f} req/s = {offered / capacity:.1f}x for {FLOOD_S:.0f} s: {len(calls)} sent, "
              f"{served} served, "
              f"{rejected} RESOURCE_EXHAUSTED, {len(other)} other failures; queue depth max {max(depths)} "
              f"(limit {MAX_QUEUE}); RSS {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB")
    assert offered >= 3 * capacity
    assert other == []
    assert served + rejected == len(calls) and served > 0 and rejected > 0
    assert max(depths) <= MAX_QUEUE  # the queue, and so memory, stays bounded
    assert rss_after - rss_before < 64 * 2**20
    assert server.batcher.metrics.queue_depth._value.get() == 0 and server.metrics.inflight_requests._value.get() == 0


PACE_S = 0.25  # each engine batch of 2 in the deadline test: 8 sources/s or less, on any machine


async def test_a_short_deadline_past_the_admission_limit_is_refused_at_once(server, capsys):
    """Over gRPC: with a queue ahead that the caller's deadline cannot wait out, the call hears
    RESOURCE_EXHAUSTED at once (it is not queued to time out), and the queued work completes.
    The real engine is paced, so the queue's expected wait (seconds) dwarfs how long a busy machine
    takes to carry the call to admission, and the deadline can be long enough for that."""
    engine = server.batcher.engine
    real_decode = engine.decode

    def paced_decode(*args, **kwargs):
        time.sleep(PACE_S)
        return real_decode(*args, **kwargs)

    engine.decode = paced_decode
    request = pb.TransduceRequest(inputs=WORDS, options=pb.DecodeOptions(return_attention=False))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        await stub.Transduce(request, timeout=30)  # the service rate is measured
        queued = Calls().of(server.batcher, "_notify")  # the batcher's wake-up, once per call queued
        backlog = [asyncio.ensure_future(stub.Transduce(request, timeout=60)) for _ in range(4)]  # 32 sources
        await queued.until(lambda: server.batcher.metrics.queue_depth._value.get() >= 24)
        expected_s = (24 + 1 - 2) / server.batcher.intake.rate.sources_per_s()
        t0 = time.perf_counter()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Transduce(pb.TransduceRequest(inputs=["late"]), timeout=1.0)
        refused_ms = (time.perf_counter() - t0) * 1000
        replies = await asyncio.gather(*backlog)
    with capsys.disabled():
        print(f"\nadmission: refused in {refused_ms:.1f} ms: {refused.value.details()}")
    assert expected_s > 0.6 * 1.0  # 24 or more queued, 2 to the next batch: past what 1 s admits
    # Refused by admission, not queued: a queued call would have ended DEADLINE_EXCEEDED.
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "deadline" in refused.value.details()
    assert all(len(r.results) == len(WORDS) for r in replies)
