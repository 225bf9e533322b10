"""Row-step counters and length grouping (service/scheduling/lengths.py) with the fake engines
(tests/batching.py). FakeEngine's rows take their source's length + 1 steps (one output a symbol,
then </s>)."""
import asyncio

import pytest

from service.config import BatcherConfig, parse_config
from service.scheduling import lengths
from tests.batching import HOLD_S, FakeEngine, StepEngine, continuous, one_pass, started


def row_steps(b) -> tuple[float, float, float]:
    m = b.metrics
    return m.decode_steps._value.get(), m.decode_row_steps._value.get(), m.decode_row_steps_useful._value.get()


SHORT = ["ab", "cd", "ef", "gh"]
LONG = ["a" * 20, "b" * 20, "c" * 20, "d" * 20]
MIXED = [w for pair in zip(SHORT, LONG) for w in pair]


@pytest.mark.parametrize("grouping", [False, True])
async def test_row_step_counters_for_a_known_batch(grouping):
    engine = FakeEngine()
    b = await started(engine, max_batch_size=8, length_grouping=grouping)
    results = await b.transduce(MIXED)  # queued at once: one popped batch
    assert [r.output_tokens for (r,) in results] == [list(w.upper()) for w in MIXED]
    if grouping:  # two groups, shortest first: 3 steps for 4 rows, then 21 for 4; no row waits
        assert engine.batches == [SHORT, LONG]
        assert row_steps(b) == (3 + 21, 4 * 3 + 4 * 21, 4 * 3 + 4 * 21)
    else:  # one batch of 21 steps; the short rows' own steps are 3 each, the other 18 are waste
        assert engine.batches == [MIXED]
        assert row_steps(b) == (21, 8 * 21, 4 * 3 + 4 * 21)
    await b.batcher.stop()


async def test_continuous_counts_every_row_step_as_useful():
    engine = StepEngine()
    b = await continuous(engine, max_batch_size=8)
    await b.transduce(MIXED)
    steps, rows, useful = row_steps(b)
    assert rows == useful == sum(len(w) + 1 for w in MIXED)  # rows leave at the step they end
    assert steps == 21
    await b.batcher.stop()


async def test_length_groups_answer_short_callers_before_the_long_group_ends():
    engine = FakeEngine()
    release_hold, release_long = engine.calls.hold(0), engine.calls.hold(2)
    b = await started(engine, max_batch_size=8)  # length grouping is the default
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await engine.calls.reached(1)  # "hold" is in the engine; the eight calls below queue behind it
    calls = {w: asyncio.ensure_future(b.transduce([w])) for w in MIXED}
    await one_pass()
    assert len(b.batcher.intake.queue) == 8
    release_hold.set()
    await engine.calls.reached(3)  # the long group is in the engine, held there
    short = await asyncio.wait_for(asyncio.gather(*(calls[w] for w in SHORT)), HOLD_S)
    assert [r[0][0].output_tokens for r in short] == [list(w.upper()) for w in SHORT]
    assert not any(calls[w].done() for w in LONG)
    release_long.set()
    await asyncio.gather(hold, *calls.values())
    assert engine.batches == [["hold"], SHORT, LONG]
    await b.batcher.stop()


async def test_length_grouping_never_passes_over_a_source_popped_earlier():
    """The long sources of a popped batch go before shorter ones queued after them: sorting the
    whole queue by length would put every short source first and the long ones last."""
    engine = FakeEngine()
    release = engine.calls.hold(0)
    b = await started(engine, max_batch_size=8)
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await engine.calls.reached(1)
    first = asyncio.ensure_future(b.transduce(MIXED))  # the oldest 8: the next batch
    later = [f"{c}{c}" for c in "pqrstuvw"]
    second = asyncio.ensure_future(b.transduce(later))  # short, but queued after them
    await one_pass()
    assert len(b.batcher.intake.queue) == 16
    release.set()
    await asyncio.gather(hold, first, second)
    assert engine.batches == [["hold"], SHORT, LONG, later]
    await b.batcher.stop()


async def test_an_engine_failure_in_one_length_group_fails_only_that_groups_callers():
    engine = FakeEngine(fail_on=LONG[0])
    release = engine.calls.hold(0)
    b = await started(engine, max_batch_size=8)
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await engine.calls.reached(1)
    calls = [asyncio.ensure_future(b.transduce([w])) for w in MIXED]  # one popped batch, two groups
    await one_pass()
    assert len(b.batcher.intake.queue) == 8
    release.set()
    await hold
    outcomes = dict(zip(MIXED, await asyncio.gather(*calls, return_exceptions=True)))
    assert engine.batches == [["hold"], SHORT, LONG]
    assert all(outcomes[w][0][0].output_tokens == list(w.upper()) for w in SHORT)
    assert all(isinstance(outcomes[w], RuntimeError) for w in LONG)
    assert (await b.transduce(["ok"]))[0][0].output_tokens == ["O", "K"]  # the loop goes on
    await b.batcher.stop()


async def test_a_length_group_whose_callers_all_left_is_not_decoded():
    engine = FakeEngine()
    release_hold, release_short = engine.calls.hold(0), engine.calls.hold(1)
    b = await started(engine, max_batch_size=8)
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await engine.calls.reached(1)
    short = [asyncio.ensure_future(b.transduce([w])) for w in SHORT]
    long_call = asyncio.ensure_future(b.transduce(LONG))  # one caller, the whole long group
    await one_pass()
    assert len(b.batcher.intake.queue) == 8
    release_hold.set()
    await hold
    await engine.calls.reached(2)  # the short group is in the engine
    long_call.cancel()
    await asyncio.wait([long_call])  # the long group's caller has gone
    release_short.set()
    assert [r[0][0].output_tokens for r in await asyncio.gather(*short)] == [list(w.upper()) for w in SHORT]
    await b.transduce(["after"])  # queued after that batch: answered once the batch loop is past it
    assert engine.batches == [["hold"], SHORT, ["after"]]  # nothing decoded for the long group
    assert long_call.cancelled()
    await b.batcher.stop()


def test_split_groups_by_length_shortest_first_and_only_where_it_saves():
    mixed = [len(w) for w in MIXED]
    assert lengths.split(mixed) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert lengths.split([7] * 64) == [list(range(64))]  # one length: nothing to save
    assert lengths.split([3, 6]) == [[0, 1]]  # a second call would cost more than the 3 row-steps saved
    assert lengths.split([2, 20]) == [[0], [1]]  # 18 saved: worth a second call
    assert lengths.split([5, 6, 5, 6, 5]) == [[0, 2, 4, 1, 3]]  # near lengths stay together
    assert lengths.split([]) == []
    # A short limit on the long sources' outputs takes away the reason to split.
    capped = [lengths.expected_steps(n, 3) for n in mixed]
    assert lengths.split(mixed, capped) == [list(range(8))[0::2] + list(range(8))[1::2]]
    groups = lengths.split([len(w) for w in MIXED * 8 + ["abcdefgh"] * 5])
    assert sorted(i for g in groups for i in g) == list(range(69))  # every source, once


def test_length_grouping_is_a_flag():
    assert BatcherConfig().length_grouping is True
    assert parse_config(["--length-grouping", "false"], {}).batcher.length_grouping is False
    assert parse_config([], {"ATTNSERVE_LENGTH_GROUPING": "false"}).batcher.length_grouping is False
