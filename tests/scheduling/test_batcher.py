"""Request-level batching with a fake engine (tests/batching.py): batches, limits, overload,
deadlines, faults, cancellation, the response cache. Continuous batching: test_continuous.py;
length groups: test_lengths.py."""
import asyncio
import inspect

import pytest

from service.answering.answerer import Answerer
from service.config import BatcherConfig
from service.domain import DeadlineExpired, DecodeOptions, InvalidInput, NotReady, Overloaded
from service.metrics import Metrics
from service.scheduling.batcher import Batcher, make_batcher
from service.scheduling.continuous import ContinuousBatcher
from service.scheduling.request import RequestBatcher
from tests.batching import HOLD_S, Clock, FakeEngine, answering, one_pass, refused_at_once, started


async def test_concurrent_requests_share_a_batch_and_keep_order():
    engine = FakeEngine()
    b = await started(engine, max_batch_size=64, max_wait_ms=20)
    results = await asyncio.gather(*(b.transduce([f"w{i}", f"x{i}"]) for i in range(10)))
    for i, ((r1,), (r2,)) in enumerate(results):
        assert r1.output_tokens == list(f"W{i}") and r2.output_tokens == list(f"X{i}")
    assert max(len(batch) for batch in engine.batches) > 2
    await b.batcher.stop()


async def test_max_batch_size_is_respected():
    engine = FakeEngine()
    b = await started(engine, max_batch_size=4, max_wait_ms=20)
    await asyncio.gather(*(b.transduce([f"w{i}"]) for i in range(17)))
    assert max(len(batch) for batch in engine.batches) == 4
    assert sum(len(batch) for batch in engine.batches) == 17
    await b.batcher.stop()


async def test_after_batches_with_company_a_first_arrival_waits_for_as_many():
    engine = FakeEngine()
    # A wait no test outlasts: any batch formed early shows in engine.batches, never by timing.
    b = await started(engine, max_batch_size=2, max_wait_ms=0, company_wait_ms=HOLD_S * 1000)
    calls = [asyncio.ensure_future(b.transduce([w])) for w in "abcde"]
    await asyncio.gather(*calls[:4])  # batches [a, b] and [c, d]: each had company
    assert engine.batches == [["a", "b"], ["c", "d"]]
    assert len(b.batcher.intake.queue) == 1  # e waits for a second source rather than going alone
    ((f,),) = await b.transduce(["f"])
    assert engine.batches[-1] == ["e", "f"] and f.output_tokens == ["F"]
    await calls[4]
    await b.batcher.stop()


async def test_a_lone_caller_never_waits_for_company():
    engine = FakeEngine()
    b = await started(engine, max_batch_size=8, max_wait_ms=0, company_wait_ms=HOLD_S * 1000)
    for w in "abcd":  # one call at a time: a wait for company would hold each for HOLD_S
        ((r,),) = await asyncio.wait_for(b.transduce([w]), HOLD_S / 2)
        assert r.output_tokens == [w.upper()]
    assert engine.batches == [["a"], ["b"], ["c"], ["d"]]
    await b.batcher.stop()


async def test_a_full_queue_refuses_new_requests_and_finishes_admitted_ones():
    engine = FakeEngine()
    engine.calls.gate.clear()  # hold the engine so the queue fills
    b = await started(engine, max_batch_size=2, max_wait_ms=0, max_queue_size=4)
    calls = [asyncio.ensure_future(b.transduce([f"a{i}"])) for i in range(10)]
    await one_pass()
    assert len(b.batcher.intake.pending) + sum(c.done() for c in calls) == 10  # each admitted or refused
    engine.calls.gate.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    rejected = [o for o in outcomes if isinstance(o, Overloaded)]
    served = [o for o in outcomes if isinstance(o, list)]
    assert len(rejected) + len(served) == 10
    assert len(served) <= 4 + 2  # the queue plus the batch already in the engine
    assert rejected and "queue is full" in str(rejected[0])
    await b.batcher.stop()


async def loaded(engine: FakeEngine, **cfg) -> tuple[Answerer, list[asyncio.Future]]:
    """A batcher whose rate under load is measured on the engine's clock (full batches of 4 in
    20 ms: 200 sources/s), then a held engine with 44 sources offered behind the batch it holds."""
    b = await started(engine, max_batch_size=4, max_wait_ms=0, clock=engine.clock, **cfg)
    await asyncio.gather(*(b.transduce([f"warm{i}"]) for i in range(16)))
    engine.calls.gate.clear()
    begun = engine.calls.begun
    queued = [asyncio.ensure_future(b.transduce([f"q{i}"])) for i in range(44)]
    await engine.calls.reached(begun + 1)  # the next batch of 4 is in the held engine
    return b, queued


async def test_a_call_the_queue_cannot_serve_within_its_deadline_is_refused_at_once():
    clock = Clock()
    engine = FakeEngine(clock, call_s=0.02)
    b, queued = await loaded(engine)
    assert b.batcher.intake.rate.sources_per_s() == pytest.approx(200)  # the rate under load: 4 sources in 20 ms
    assert len(b.batcher.intake.queue) == 40
    # (40 queued + its own - 4 in the next batch) / 200 per s = 185 ms expected, past 0.6 x 100 ms.
    refused_at_once(b.transduce(["late"], deadline_s=clock() + 0.1), "does not fit in the call's deadline")
    admitted = asyncio.ensure_future(b.transduce(["patient"], deadline_s=clock() + 5))
    await one_pass()
    assert len(b.batcher.intake.queue) == 41
    engine.calls.gate.set()
    ((r,),) = await admitted
    assert r.output_tokens == list("PATIENT")
    assert all(isinstance(o, list) for o in await asyncio.gather(*queued, return_exceptions=True))
    assert "late" not in [w for batch in engine.batches for w in batch]
    assert b.metrics.admission_refusals.labels("deadline")._value.get() == 1
    await b.batcher.stop()


async def test_the_queue_is_bounded_in_time_for_calls_without_a_deadline():
    clock = Clock()
    engine = FakeEngine(clock, call_s=0.02)
    # At 200 sources/s the k-th of the 44 offered expects (k - 4 in the next batch) / 200 s of wait:
    # 100 ms from the 24th on. 101 ms, not 100, keeps rounding off that edge.
    b, queued = await loaded(engine, max_queue_wait_ms=101)
    assert len(b.batcher.intake.queue) == 20  # 24 admitted, 4 of them in the engine; 20 refused
    refused_at_once(b.transduce([f"no-deadline{i}" for i in range(10)]), "exceeds max_queue_wait_ms")  # 50 ms more
    engine.calls.gate.set()
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, Overloaded)]
    assert len(refused) == 20 and sum(isinstance(o, list) for o in outcomes) == 24
    ((r,),) = await b.transduce(["now"])  # the queue drained: admitted again
    assert r.output_tokens == list("NOW")
    await b.batcher.stop()


async def test_a_source_whose_deadline_passes_in_the_queue_is_not_decoded():
    clock = Clock()
    engine = FakeEngine(clock)
    engine.calls.gate.clear()
    b = await started(engine, max_batch_size=1, max_wait_ms=0, clock=clock)
    first = asyncio.ensure_future(b.transduce(["first"]))
    await engine.calls.reached(1)  # "first" holds the engine
    doomed = asyncio.ensure_future(b.transduce(["doomed"], deadline_s=clock() + 0.03))
    await one_pass()
    assert len(b.batcher.intake.queue) == 1
    clock.advance(0.06)  # its deadline passes while it waits
    engine.calls.gate.set()
    with pytest.raises(DeadlineExpired):
        await doomed
    await first
    assert ["doomed"] not in engine.batches
    await b.batcher.stop()


async def test_a_source_with_less_time_left_than_a_batch_takes_is_shed_as_overloaded():
    # its caller still has time to retry elsewhere: RESOURCE_EXHAUSTED, not a timeout of its own
    clock = Clock()
    engine = FakeEngine(clock)
    b = await started(engine, max_batch_size=1, max_wait_ms=0, clock=clock)
    b.batcher._batch_s = 0.05  # recent batches took 50 ms
    engine.calls.gate.clear()
    first = asyncio.ensure_future(b.transduce(["first"]))
    await engine.calls.reached(1)
    short = asyncio.ensure_future(b.transduce(["short"], deadline_s=clock() + 0.04))
    await one_pass()
    engine.calls.gate.set()
    with pytest.raises(Overloaded, match="ms left, less than a batch takes"):
        await short
    await first
    assert ["short"] not in engine.batches
    await b.batcher.stop()


async def test_an_engine_fault_fails_only_its_batch():
    engine = FakeEngine(fail_on="boom")
    b = await started(engine, max_batch_size=8, max_wait_ms=0)
    with pytest.raises(RuntimeError, match="engine failed on boom"):
        await b.transduce(["boom"])
    ((r,),) = await b.transduce(["ok"])
    assert r.output_tokens == ["O", "K"]
    await b.batcher.stop()


async def test_cancelled_callers_are_dropped_from_the_queue():
    engine = FakeEngine()
    engine.calls.gate.clear()
    b = await started(engine, max_batch_size=1, max_wait_ms=0)
    first = asyncio.ensure_future(b.transduce(["first"]))
    await engine.calls.reached(1)  # "first" is now in the engine
    doomed = asyncio.ensure_future(b.transduce(["doomed"]))
    await one_pass()
    assert len(b.batcher.intake.queue) == 1
    doomed.cancel()
    await asyncio.wait([doomed])  # its caller has gone
    engine.calls.gate.set()
    await first
    ((r,),) = await b.transduce(["after"])
    assert r.output_tokens == list("AFTER")
    assert ["doomed"] not in engine.batches
    await b.batcher.stop()


@pytest.mark.parametrize("mode,cls", [("request", RequestBatcher), ("continuous", ContinuousBatcher)])
def test_each_mode_is_a_batcher_with_the_one_submit(mode, cls):
    b = make_batcher(FakeEngine(), BatcherConfig(mode=mode), Metrics().for_model("m"))
    assert type(b) is cls and isinstance(b, Batcher) and not b.running
    assert inspect.signature(cls.submit) == inspect.signature(Batcher.submit)


async def test_empty_after_tokenization_is_invalid_and_not_ready_before_start():
    b = answering(FakeEngine())
    with pytest.raises(NotReady):
        await b.transduce(["x"])
    b.batcher.start()
    with pytest.raises(InvalidInput, match=r"inputs\[1\]"):
        await b.transduce(["x", "   "])
    await b.batcher.stop()


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="max_batch_size must be >= 1, got 0"):
        BatcherConfig(max_batch_size=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatcherConfig(max_wait_ms=-1)
    with pytest.raises(ValueError, match="max_join_wait_ms"):
        BatcherConfig(max_join_wait_ms=-1)
    with pytest.raises(ValueError, match="company_wait_ms must be >= 0, got nan"):
        BatcherConfig(company_wait_ms=float("nan"))


async def test_the_response_cache_answers_repeats_without_the_engine_and_stays_bounded():
    engine, metrics = FakeEngine(), Metrics()
    b = answering(engine, metrics=metrics.for_model("m"), max_batch_size=8, cache_entries=2)
    b.batcher.start()

    def value(name, **labels):
        return metrics.registry.get_sample_value(name, {"model": "m", **labels}) or 0

    first = await b.transduce(["abc"])
    again = await b.transduce(["abc"])
    assert again == first and engine.batches == [["abc"]]  # the repeat never reached the engine
    other = await b.transduce(["abc"], DecodeOptions(max_output_len=3))  # other options: another answer
    assert other[0][0].output_tokens == first[0][0].output_tokens and len(engine.batches) == 2
    await b.transduce(["xyz"])  # third entry: "abc" with default options is the least recently used
    assert value("attnserve_cache_evictions_total") == 1 and value("attnserve_cache_entries") == 2
    await b.transduce(["abc"])
    assert len(engine.batches) == 4  # evicted, so decoded again
    assert (value("attnserve_cache_lookups_total", result="hit"),
            value("attnserve_cache_lookups_total", result="miss")) == (1, 4)
    b.set_overrides({})  # the overrides changed: nothing cached survives
    assert value("attnserve_cache_entries") == 0
    await b.transduce(["xyz"])
    assert len(engine.batches) == 5
    await b.batcher.stop()


async def test_no_cache_with_zero_entries():
    engine = FakeEngine()
    b = await started(engine, cache_entries=0)
    for _ in range(3):
        await b.transduce(["abc"])
    assert len(engine.batches) == 3
    await b.batcher.stop()
