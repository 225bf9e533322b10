"""Deadlines and cancellation in continuous batching, measured with the row-step counters.

The real engine's decoder step is paced to 5 ms so a deadline can fall mid-sequence on
any machine; the server, its batcher and the gRPC cancellation path are the real ones.
"""
import asyncio
import threading
import time

import grpc
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from tests.live import ServerSetup, loopback_config

STEP_S = 0.005
CANCEL_AFTER_STEPS = 6  # the second victim is cancelled this many engine steps into the burst
LONG = "internationalization"
OTHERS = [LONG, "characteristically", "cat", "phoenix"]
NO_ATTENTION = pb.DecodeOptions(return_attention=False, max_output_len=40)


@pytest.fixture(scope="module")
def server_setup(tiny_bundle):
    def pace(s):
        engine = s.batcher.engine
        engine.step = Pacer(engine.step)

    cfg = loopback_config(tiny_bundle, server={"metrics_port": -1}, answering={"cache_entries": 0},
                          batcher={"mode": "continuous", "max_batch_size": 16})
    return ServerSetup(cfg, per_test=True, prepare=pace)


class Pacer:
    """The engine's decoder step, paced to STEP_S and counted, so that a test waits for steps taken
    rather than for time passing."""

    def __init__(self, step):
        self.step, self.taken, self.changed = step, 0, threading.Condition()

    def __call__(self, running):
        time.sleep(STEP_S)  # the pacing itself: a deadline must be able to fall mid-sequence
        out = self.step(running)
        with self.changed:
            self.taken += 1
            self.changed.notify_all()
        return out

    def until(self, taken: int, timeout_s: float = 30) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.taken >= taken, timeout_s), f"{self.taken} steps, not {taken}"


def counters(server) -> tuple[float, float]:
    m = server.batcher.metrics
    return m.decode_row_steps._value.get(), m.decode_row_steps_after_cancel._value.get()


async def test_cancelled_and_expired_sequences_stop_within_one_step(server, capsys):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)

        def call(word, **kw):
            return stub.Transduce(pb.TransduceRequest(inputs=[word], options=NO_ATTENTION), **kw)

        # Alone and uncancelled: how long the victims' word takes, and what the others should get.
        full = await stub.Transduce(pb.TransduceRequest(inputs=[LONG]), timeout=30)
        full_steps = full.results[0].attention.rows
        assert full_steps * STEP_S > 0.06, "the victims' word must outlive their deadline"
        alone = [(await call(w, timeout=30)).results[0].output_tokens for w in OTHERS]

        steps0, after0 = counters(server)
        pacer = server.batcher.engine.step
        mark = pacer.taken
        others = [asyncio.ensure_future(stub.Transduce(pb.TransduceRequest(inputs=[w]), timeout=30)) for w in OTHERS]
        expired = call(LONG, timeout=0.03)  # its deadline passes mid-sequence
        cancelled = call(LONG, timeout=30)
        waiter = asyncio.ensure_future(cancelled)
        await asyncio.to_thread(pacer.until, mark + CANCEL_AFTER_STEPS)
        cancelled.cancel()  # the client gives up mid-sequence
        try:
            await expired
            raise AssertionError("the 30 ms deadline should have passed")
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        try:
            await waiter
        except asyncio.CancelledError:
            pass
        replies = await asyncio.gather(*others)
        steps1, after1 = counters(server)

    # The others shared the running batch with the victims and are unaffected.
    assert [r.results[0].output_tokens for r in replies] == alone
    others_steps = sum(r.results[0].attention.rows for r in replies)  # one row-step per emitted token, </s> too
    victim_steps = steps1 - steps0 - others_steps
    after_cancel = after1 - after0
    with capsys.disabled():
        print(f"\ncancellation: {len(OTHERS)} others took {others_steps:.0f} row-steps as alone; 2 victims "
              f"(deadline 30 ms, cancelled {CANCEL_AFTER_STEPS} steps in) took {victim_steps:.0f} row-steps of {2 * full_steps} uncancelled; "
              f"row-steps after cancel/deadline: {after_cancel:.0f} (at most 1 per victim)")
    assert after_cancel <= 2
    assert victim_steps < 2 * full_steps  # they stopped early rather than ran to the end
