"""Continuous (step-level) batching with a fake step engine (tests/batching.py): rows join and leave
between steps and keep their own outputs; limits, faults, cancellation, admission by free rows."""
import asyncio

import numpy as np
import pytest

from service.domain import DecodeOptions
from tests.batching import Clock, StepEngine, continuous, one_pass, refused_at_once


async def test_continuous_outputs_are_right_for_rows_joining_and_leaving():
    engine = StepEngine()
    release = engine.calls.hold(2)
    b = await continuous(engine, max_batch_size=8)
    words = ["a", "internationalization", "bc", "hello", "x", "abcdefghij"]
    first = asyncio.ensure_future(b.transduce(words[:3]))
    await engine.calls.reached(3)  # the first request's third step is under way
    second = asyncio.ensure_future(b.transduce(words[3:]))  # joins the batch already running
    await one_pass()
    assert len(b.batcher.intake.queue) == 3
    release.set()
    results = (await first) + (await second)
    for w, (r,) in zip(words, results):
        assert "".join(r.output_tokens) == w and r.finished
        assert r.attn.shape == (len(w) + 1, len(w))
        assert np.allclose(r.attn.sum(axis=1), 1.0)
    assert engine.first_step("hello") == 3 and "internationalization" in engine.step_batches[3]
    await b.batcher.stop()


async def test_short_sequences_leave_without_waiting_for_long_ones():
    engine = StepEngine()
    release = engine.calls.hold(2)
    b = await continuous(engine, max_batch_size=8)
    long_word = "x" * 35
    long_call = asyncio.ensure_future(b.transduce([long_word]))
    await engine.calls.reached(3)  # the long word is decoding
    short = asyncio.ensure_future(b.transduce(["ab"]))
    await one_pass()
    release.set()
    assert "".join((await short)[0][0].output_tokens) == "ab"
    await long_call
    # Judged by the engine's own record of steps: "ab" joined a batch where the long word was
    # running, and its last step came well before the long word's last step.
    with_short = [i for i, batch in enumerate(engine.step_batches) if "ab" in batch]
    with_long = [i for i, batch in enumerate(engine.step_batches) if long_word in batch]
    assert all(long_word in engine.step_batches[i] for i in with_short)
    assert len(with_short) == 3 and max(with_short) < max(with_long)
    await b.batcher.stop()


@pytest.mark.parametrize("join_wait_ms", [0, 200])
async def test_arrivals_during_decoding_wait_to_join_together(join_wait_ms):
    clock = Clock()  # stands still but where the test moves it
    engine = StepEngine()
    releases = [engine.calls.hold(i) for i in (1, 2, 3, 4)]
    b = await continuous(engine, max_batch_size=8, max_join_wait_ms=join_wait_ms, clock=clock)
    long_call = asyncio.ensure_future(b.transduce(["x" * 35]))
    calls = []
    for i, w in enumerate(("ab", "cd", "ef")):  # one arrives during each of the long word's steps 1, 2, 3
        await engine.calls.reached(2 + i)
        calls.append(asyncio.ensure_future(b.transduce([w])))
        await one_pass()
        releases[i].set()
    await engine.calls.reached(5)
    clock.advance(0.2)  # during step 4, the first arrival has waited 200 ms
    releases[3].set()
    results = await asyncio.gather(*calls)
    assert ["".join(r[0][0].output_tokens) for r in results] == ["ab", "cd", "ef"]
    await long_call
    if join_wait_ms:  # one encoder run for the three, at the step after the first had waited 200 ms
        assert engine.encode_batches == [["x" * 35], ["ab", "cd", "ef"]]
        assert [engine.first_step(w) for w in ("ab", "cd", "ef")] == [5, 5, 5]
    else:  # each joined at the next step, on its own
        assert engine.encode_batches == [["x" * 35], ["ab"], ["cd"], ["ef"]]
        assert [engine.first_step(w) for w in ("ab", "cd", "ef")] == [2, 3, 4]
    await b.batcher.stop()


async def test_a_full_batch_admits_without_waiting():
    clock = Clock()  # stands still: a wait to join would last until the long word ends
    engine = StepEngine()
    release = engine.calls.hold(2)
    b = await continuous(engine, max_batch_size=3, max_join_wait_ms=10_000, clock=clock)
    long_call = asyncio.ensure_future(b.transduce(["x" * 35]))
    await engine.calls.reached(3)
    both = asyncio.ensure_future(b.transduce(["ab", "cd"]))  # fills the two free rows: no reason to wait
    await one_pass()
    release.set()
    await both
    assert engine.first_step("ab") == engine.first_step("cd") == 3  # at the next step, beside the long word
    await long_call
    await b.batcher.stop()


async def test_continuous_respects_max_batch_size_and_length_limits():
    engine = StepEngine(max_output_len=5)
    b = await continuous(engine, max_batch_size=3)
    results = await asyncio.gather(*(b.transduce([f"word{i}" * 3]) for i in range(7)))
    assert max(len(batch) for batch in engine.step_batches) <= 3
    for ((r,),) in results:
        assert len(r.attn) == 5 and not r.finished  # cut by the engine's cap
    ((r,),) = await b.transduce(["abcdef"], DecodeOptions(max_output_len=2))
    assert r.output_tokens == ["a", "b"] and not r.finished
    await b.batcher.stop()


async def test_cancelled_sequence_leaves_the_running_batch():
    engine = StepEngine(max_output_len=40)
    release = engine.calls.hold(5)
    b = await continuous(engine, max_batch_size=8)
    doomed = asyncio.ensure_future(b.transduce(["d" * 39]))
    keeper = asyncio.ensure_future(b.transduce(["k" * 30]))
    await engine.calls.reached(6)  # step 5 is under way
    doomed.cancel()
    await asyncio.wait([doomed])  # its caller has gone
    release.set()
    ((r,),) = await keeper
    assert "".join(r.output_tokens) == "k" * 30
    with_doomed = [i for i, batch in enumerate(engine.step_batches) if "d" * 39 in batch]
    assert max(with_doomed) == 5  # the step under way at the cancel, and none after it
    await b.batcher.stop()


async def test_continuous_engine_fault_fails_its_batch_and_the_loop_survives():
    engine = StepEngine()
    engine.fail_when = "boom"
    b = await continuous(engine, max_batch_size=8)
    with pytest.raises(RuntimeError, match="injected engine fault"):
        await b.transduce(["boom"])
    ((r,),) = await b.transduce(["fine"])
    assert "".join(r.output_tokens) == "fine"
    await b.batcher.stop()


async def test_continuous_admission_counts_free_rows_and_refuses_what_the_queue_cannot_serve_in_time():
    """Step-level batching: a call that fits in the running batch's free rows is admitted whatever
    its deadline; once rows are full and a queue stands, a short deadline is refused at once."""
    clock = Clock()
    engine = StepEngine(clock=clock, step_s=0.004)  # 5-letter words: 6 steps, 24 ms at 4 rows
    b = await continuous(engine, max_batch_size=4, clock=clock)
    await asyncio.gather(*(b.transduce([f"warm{i}"]) for i in range(16)))  # the rate under load
    per_s = b.batcher.intake.rate.sources_per_s()
    assert per_s is not None
    ((r,),) = await b.transduce(["alone"], deadline_s=clock() + 0.001)  # free rows: admitted
    assert r.output_tokens == list("alone")
    first_busy = engine.calls.begun
    release = engine.calls.hold(first_busy)  # the busy calls' first step
    busy = [asyncio.ensure_future(b.transduce([f"busy{i}"])) for i in range(24)]
    await engine.calls.reached(first_busy + 1)
    # However many joined that step, 21 sources stand before the next free row.
    assert len(b.batcher.intake.queue) + b.batcher._in_service == 24 and 21 / per_s > 0.6 * 0.05
    refused_at_once(b.transduce(["late"], deadline_s=clock() + 0.05), "does not fit in the call's deadline")
    release.set()
    assert all(len(o) == 1 for o in await asyncio.gather(*busy))
    await b.batcher.stop()
