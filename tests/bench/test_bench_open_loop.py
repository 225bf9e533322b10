"""make bench's open loop: the server's load generator and the in-process driver send the same calls
at the same Poisson times (target 5 compares their tails), and count failures alike."""
import asyncio
import itertools
import selectors

import pytest

from bench import inprocess, loadgen
from service.domain import Overloaded

# Longer than most gaps at 400 calls/s (1/400 s on average): a driver that waited for each answer before
# the next call would start nearly every call late.
SERVICE_S = 0.010


def test_both_drivers_share_one_seeded_schedule():
    a = list(itertools.islice(loadgen.poisson_gaps(200.0), 1000))
    assert a == list(itertools.islice(loadgen.poisson_gaps(200.0), 1000))
    assert 0.0045 < sum(a) / len(a) < 0.0055  # mean gap 1/rate
    assert a != list(itertools.islice(loadgen.poisson_gaps(200.0, seed=2), 1000))


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock jumps to its next timer instead of waiting for it: asyncio.sleep
    takes no wall-clock time, so when a call starts depends on the schedule alone, not on how busy
    the machine is."""

    def __init__(self):
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualTimeLoop):
        super().__init__()
        self.loop = loop

    def select(self, timeout=None):
        if timeout is None:  # no timer and nothing ready: a real loop would wait forever
            raise RuntimeError("the drive is stuck: nothing to run and no timer")
        self.loop.now += timeout
        return super().select(0)


class FakeBatcher:
    """Answers SERVICE_S after a call (on the loop's clock); refuses every fifth call at once, as the
    real batcher refuses when overloaded."""

    def __init__(self, clock):
        self.clock = clock
        self.texts, self.started = [], []
        self.in_flight = self.most_in_flight = 0

    async def transduce(self, texts):
        self.texts += texts
        self.started.append(self.clock())
        if len(self.texts) % 5 == 0:
            raise Overloaded("full")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(SERVICE_S)
        self.in_flight -= 1
        return [[]]


def test_the_in_process_driver_sends_the_schedules_calls_in_order_and_counts_refusals():
    rate, duration_s = 400.0, 0.5
    loop = VirtualTimeLoop()
    batcher = FakeBatcher(loop.time)
    rec = loadgen.Recorder()
    try:
        loop.run_until_complete(inprocess.open_loop(batcher, ["a", "b", "c"], rate, duration_s, rec,
                                                    clock=loop.time))
    finally:
        loop.close()
    due = list(itertools.takewhile(lambda t: t < duration_s, itertools.accumulate(loadgen.poisson_gaps(rate))))
    n = 1 + len(due)  # the first call at 0, then one per gap that ends before the stop
    assert n >= 150 and len(batcher.texts) == n and batcher.texts[:4] == ["a", "b", "c", "a"]
    assert rec.errors == n // 5 and len(rec.latencies) == n - n // 5
    assert rec.latencies == pytest.approx([SERVICE_S] * len(rec.latencies))  # timed from each call's own start
    # Each call starts at its scheduled time, not after the previous one answered (open, not closed loop).
    assert batcher.started == pytest.approx([0.0] + due, abs=1e-9)
    assert batcher.most_in_flight > 1
