"""The batcher with a fake engine: batching, limits, overload, faults, cancellation."""
import asyncio
import threading
import time

import numpy as np
import pytest

from service.batcher import Batcher, InvalidInput, NotReady, Overloaded
from service.config import BatcherConfig
from service.engine import Decoded
from service.metrics import Metrics


class FakeEngine:
    """Echoes each source upper-cased; records every batch it is given."""

    tgt_joiner = " "

    def __init__(self, delay_s=0.0, fail_on=None):
        self.batches: list[list[str]] = []
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.gate = threading.Event()
        self.gate.set()

    def tokenize(self, text):
        return list(text.strip())

    def decode(self, sources, max_output_lens=None):
        self.gate.wait(5)
        words = ["".join(s) for s in sources]
        self.batches.append(words)
        time.sleep(self.delay_s)
        if self.fail_on and self.fail_on in words:
            raise RuntimeError(f"engine failed on {self.fail_on}")
        return [Decoded(src_tokens=s, output_ids=[], output_tokens=[t.upper() for t in s], score=-1.0,
                        attn=np.eye(len(s), dtype=np.float32), finished=True) for s in sources]


async def started(engine, **cfg):
    b = Batcher(engine, BatcherConfig(**cfg), Metrics())
    b.start()
    return b


async def test_concurrent_requests_share_a_batch_and_keep_order():
    engine = FakeEngine()
    b = await started(engine, max_batch_size=64, max_wait_ms=20)
    results = await asyncio.gather(*(b.transduce([f"w{i}", f"x{i}"]) for i in range(10)))
    for i, (r1, r2) in enumerate(results):
        assert r1.output_tokens == list(f"W{i}") and r2.output_tokens == list(f"X{i}")
    assert max(len(batch) for batch in engine.batches) > 2
    await b.stop()


async def test_max_batch_size_is_respected():
    engine = FakeEngine()
    b = await started(engine, max_batch_size=4, max_wait_ms=20)
    await asyncio.gather(*(b.transduce([f"w{i}"]) for i in range(17)))
    assert max(len(batch) for batch in engine.batches) == 4
    assert sum(len(batch) for batch in engine.batches) == 17
    await b.stop()


async def test_a_full_queue_refuses_new_requests_and_finishes_admitted_ones():
    engine = FakeEngine()
    engine.gate.clear()  # hold the engine so the queue fills
    b = await started(engine, max_batch_size=2, max_wait_ms=0, max_queue_size=4)
    calls = [asyncio.ensure_future(b.transduce([f"a{i}"])) for i in range(10)]
    await asyncio.sleep(0.05)
    engine.gate.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    rejected = [o for o in outcomes if isinstance(o, Overloaded)]
    served = [o for o in outcomes if isinstance(o, list)]
    assert len(rejected) + len(served) == 10
    assert len(served) <= 4 + 2  # the queue plus the batch already in the engine
    assert rejected and "queue is full" in str(rejected[0])
    await b.stop()


async def test_an_engine_fault_fails_only_its_batch():
    engine = FakeEngine(fail_on="boom")
    b = await started(engine, max_batch_size=8, max_wait_ms=0)
    with pytest.raises(RuntimeError, match="engine failed on boom"):
        await b.transduce(["boom"])
    (r,) = await b.transduce(["ok"])
    assert r.output_tokens == ["O", "K"]
    await b.stop()


async def test_cancelled_callers_are_dropped_from_the_queue():
    engine = FakeEngine()
    engine.gate.clear()
    b = await started(engine, max_batch_size=1, max_wait_ms=0)
    first = asyncio.ensure_future(b.transduce(["first"]))
    await asyncio.sleep(0.02)  # "first" is now in the engine
    doomed = asyncio.ensure_future(b.transduce(["doomed"]))
    await asyncio.sleep(0.02)
    doomed.cancel()
    engine.gate.set()
    await first
    (r,) = await b.transduce(["after"])
    assert r.output_tokens == list("AFTER")
    assert ["doomed"] not in engine.batches
    await b.stop()


async def test_empty_after_tokenization_is_invalid_and_not_ready_before_start():
    b = Batcher(FakeEngine(), BatcherConfig(), Metrics())
    with pytest.raises(NotReady):
        await b.transduce(["x"])
    b.start()
    with pytest.raises(InvalidInput, match=r"inputs\[1\]"):
        await b.transduce(["x", "   "])
    await b.stop()


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="max_batch_size must be >= 1, got 0"):
        BatcherConfig(max_batch_size=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatcherConfig(max_wait_ms=-1)
