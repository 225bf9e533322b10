"""make bench's open loop: the server's load generator and the in-process driver send the same calls
at the same Poisson times (target 5 compares their tails), and count failures alike."""
import asyncio
import itertools
import time

from bench import inprocess, loadgen
from service.scheduling.batcher import Overloaded


def test_both_drivers_share_one_seeded_schedule():
    a = list(itertools.islice(loadgen.poisson_gaps(200.0), 1000))
    assert a == list(itertools.islice(loadgen.poisson_gaps(200.0), 1000))
    assert 0.0045 < sum(a) / len(a) < 0.0055  # mean gap 1/rate
    assert a != list(itertools.islice(loadgen.poisson_gaps(200.0, seed=2), 1000))


class FakeBatcher:
    """Answers after 1 ms; refuses every fifth call as the real batcher refuses when overloaded."""

    def __init__(self):
        self.texts, self.started = [], []

    async def transduce(self, texts):
        self.texts += texts
        self.started.append(time.perf_counter())
        if len(self.texts) % 5 == 0:
            raise Overloaded("full")
        await asyncio.sleep(0.001)
        return [[]]


def test_the_in_process_driver_sends_the_schedules_calls_in_order_and_counts_refusals():
    rate, duration_s = 400.0, 0.5
    batcher = FakeBatcher()

    rec = loadgen.Recorder()

    async def drive():
        t0 = time.perf_counter()
        await inprocess.open_loop(batcher, ["a", "b", "c"], rate, t0 + duration_s, rec)
        return t0

    t0 = asyncio.run(drive())
    latencies, errors = rec.latencies, rec.errors
    due = list(itertools.takewhile(lambda t: t < duration_s, itertools.accumulate(loadgen.poisson_gaps(rate))))
    n = 1 + len(due)  # the first call at 0, then one per gap that ends before the stop
    assert len(batcher.texts) == n and batcher.texts[:4] == ["a", "b", "c", "a"]
    assert errors == n // 5 and len(latencies) == n - n // 5
    assert all(lat >= 0.001 for lat in latencies)
    # Each call starts at its scheduled time, not after the previous one answered (open, not closed loop).
    lateness = [s - t0 - d for s, d in zip(batcher.started[1:], due)]
    assert len(lateness) == len(due) >= 150 and sorted(lateness)[len(lateness) // 2] < 0.005
