"""The batcher with a fake engine: batching, limits, overload, faults, cancellation."""
import asyncio
import threading
import time

import numpy as np
import pytest

from service.domain import DeadlineExpired, Decoded, InvalidInput, NotReady, Overloaded
from service.answering.answerer import Answerer
from service.scheduling.batcher import Batcher
from service.config import AnswerConfig, BatcherConfig, parse_config
from service.metrics import Metrics
from service.scheduling import lengths


class FakeEngine:
    """Echoes each source upper-cased; records every batch it is given."""

    tgt_joiner = " "
    precision = "fp32"

    def __init__(self, delay_s=0.0, fail_on=None):
        self.batches: list[list[str]] = []
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.gate = threading.Event()
        self.gate.set()

    src_tokens_kind = "words"  # no compound splitting (service/answering/compound.py): one text, one source

    def tokenize(self, text):
        return list(text.strip())

    def unknown_symbols(self, tokens):
        return []

    def decode(self, sources, max_output_lens=None, top_k=None):
        self.gate.wait(5)
        words = ["".join(s) for s in sources]
        self.batches.append(words)
        time.sleep(self.delay_s)
        if self.fail_on and self.fail_on in words:
            raise RuntimeError(f"engine failed on {self.fail_on}")
        return [Decoded(src_tokens=s, output_ids=[], output_tokens=[t.upper() for t in s], score=-1.0,
                        attn=np.eye(len(s), dtype=np.float32), finished=True) for s in sources]


def answering(engine, batcher_cls=None, metrics=None, cache_entries=0, **cfg) -> Answerer:
    """A batcher (not started) and the answerer that holds it, as the repository builds them.
    No response cache unless a test asks: these tests count what reaches the engine."""
    metrics = metrics or Metrics().for_model("m")
    batcher = (batcher_cls or Batcher)(engine, BatcherConfig(**cfg), metrics)
    return Answerer(engine, batcher, AnswerConfig(cache_entries=cache_entries), metrics)


async def started(engine, **cfg) -> Answerer:
    b = answering(engine, **cfg)
    b.batcher.start()
    return b


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
    await b.batcher.stop()


async def loaded(engine: FakeEngine, **cfg) -> tuple[Batcher, list[asyncio.Future]]:
    """A batcher whose rate under load is measured (full batches of 4 at 20 ms: 200 sources/s), then
    a held engine with 40 sources queued behind the batch it holds: about (40 - 4) / 200 = 180 ms of wait."""
    b = await started(engine, max_batch_size=4, max_wait_ms=0, **cfg)
    await asyncio.gather(*(b.transduce([f"warm{i}"]) for i in range(16)))
    engine.gate.clear()
    queued = [asyncio.ensure_future(b.transduce([f"q{i}"])) for i in range(44)]
    await asyncio.sleep(0.05)  # one batch is in the held engine, 40 sources wait
    return b, queued


async def test_a_call_the_queue_cannot_serve_within_its_deadline_is_refused_at_once():
    engine = FakeEngine(delay_s=0.02)
    b, queued = await loaded(engine)
    per_s = b.batcher.rate.sources_per_s()
    assert 150 < per_s < 210, per_s  # the full-batch rate, not the small batches' (sleep overshoots a little)
    t0 = time.perf_counter()
    with pytest.raises(Overloaded, match="does not fit in the call's deadline"):
        await b.transduce(["late"], deadline_s=time.perf_counter() + 0.1)
    refused_in_s = time.perf_counter() - t0
    admitted = asyncio.ensure_future(b.transduce(["patient"], deadline_s=time.perf_counter() + 5))
    await asyncio.sleep(0)
    engine.gate.set()
    ((r,),) = await admitted
    assert r.output_tokens == list("PATIENT")
    assert all(isinstance(o, list) for o in await asyncio.gather(*queued, return_exceptions=True))
    assert refused_in_s < 0.005  # told at once, not after waiting
    assert "late" not in [w for batch in engine.batches for w in batch]
    assert b.metrics.admission_refusals.labels("deadline")._value.get() == 1
    await b.batcher.stop()


async def test_the_queue_is_bounded_in_time_for_calls_without_a_deadline():
    engine = FakeEngine(delay_s=0.02)
    b, queued = await loaded(engine, max_queue_wait_ms=100)
    # Of the 44 queued without a deadline, those past 100 ms of expected wait (~20 sources at 200/s) were refused.
    assert 15 <= len(b.batcher._queue) <= 25, len(b.batcher._queue)
    with pytest.raises(Overloaded, match="exceeds max_queue_wait_ms"):
        await b.transduce([f"no-deadline{i}" for i in range(10)])  # 10 more sources: 50 ms more
    engine.gate.set()
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, Overloaded)]
    assert refused and len(refused) + sum(isinstance(o, list) for o in outcomes) == len(queued)
    ((r,),) = await b.transduce(["now"])  # the queue drained: admitted again
    assert r.output_tokens == list("NOW")
    await b.batcher.stop()


async def test_a_source_whose_deadline_passes_in_the_queue_is_not_decoded():
    engine = FakeEngine()
    engine.gate.clear()
    b = await started(engine, max_batch_size=1, max_wait_ms=0)
    first = asyncio.ensure_future(b.transduce(["first"]))
    await asyncio.sleep(0.02)  # "first" holds the engine
    doomed = asyncio.ensure_future(b.transduce(["doomed"], deadline_s=time.perf_counter() + 0.03))
    await asyncio.sleep(0.06)
    engine.gate.set()
    with pytest.raises(DeadlineExpired):
        await doomed
    await first
    assert ["doomed"] not in engine.batches
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
    engine.gate.clear()
    b = await started(engine, max_batch_size=1, max_wait_ms=0)
    first = asyncio.ensure_future(b.transduce(["first"]))
    await asyncio.sleep(0.02)  # "first" is now in the engine
    doomed = asyncio.ensure_future(b.transduce(["doomed"]))
    await asyncio.sleep(0.02)
    doomed.cancel()
    engine.gate.set()
    await first
    ((r,),) = await b.transduce(["after"])
    assert r.output_tokens == list("AFTER")
    assert ["doomed"] not in engine.batches
    await b.batcher.stop()


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


# --- continuous (step-level) batching -------------------------------------------------------

from service.scheduling.batcher import ContinuousBatcher  # noqa: E402
from service.config import EngineConfig
from service.domain import DecodeOptions
from service.engine.engine import Running  # noqa: E402

EOS = 2


class StepEngine:
    """A deterministic step-level engine: each source is copied out symbol by symbol, then </s>.

    The 'decoder state' is the position in the source, so rows joining and leaving
    between steps must keep their own positions for the outputs to come out right.
    """

    eos_id = EOS
    tgt_joiner = ""
    precision = "fp32"
    src_tokens_kind = "words"  # as FakeEngine: no compound splitting

    def __init__(self, max_output_len=40, step_s=0.0):
        self.cfg = EngineConfig(max_output_len=max_output_len)
        self.step_s = step_s  # a real step takes time; lets a test act between steps
        self.step_batches: list[list[str]] = []  # the sources in each step, in row order
        self.encode_batches: list[list[str]] = []  # the sources of each encoder run
        self.fail_when = None

    def tokenize(self, text):
        return list(text)

    def unknown_symbols(self, tokens):
        return []

    def limit(self, max_output_len):
        return min(max_output_len or self.cfg.max_output_len, self.cfg.max_output_len)

    def encode(self, sources, top_k=None):
        self.encode_batches.append(["".join(s) for s in sources])
        B, S = len(sources), max(len(s) for s in sources)
        enc = np.zeros((B, S, 1), dtype=np.float32)
        pad = np.ones((B, S), dtype=bool)
        for b, s in enumerate(sources):
            enc[b, :len(s), 0] = [ord(ch) for ch in s]
            pad[b, :len(s)] = False
        return Running(np.ones(B, dtype=np.int64), {"feed": np.zeros((B, 1), dtype=np.float32)}, enc, enc.copy(), pad)

    def step(self, run):
        time.sleep(self.step_s)
        B, S = run.pad_mask.shape
        pos = run.state["feed"][:, 0].astype(int)
        lengths = (~run.pad_mask).sum(axis=1)
        self.step_batches.append(["".join(chr(int(c)) for c in run.enc_out[b, :lengths[b], 0]) for b in range(B)])
        if self.fail_when and any(self.fail_when in w for w in self.step_batches[-1]):
            raise RuntimeError("injected engine fault")
        log_probs = np.full((B, 200), -10.0, dtype=np.float32)
        for b in range(B):
            log_probs[b, int(run.enc_out[b, pos[b], 0]) if pos[b] < lengths[b] else EOS] = -0.1
        attn = np.where(run.pad_mask, 0.0, 1.0 / lengths[:, None]).astype(np.float32)
        return log_probs, attn, Running(run.y_prev, {"feed": run.state["feed"] + 1}, run.enc_out, run.keys, run.pad_mask)

    def result(self, src_tokens, ids, attn, score, self_attn=None):
        out = [i for i in ids if i != EOS]
        return Decoded(src_tokens=list(src_tokens), output_ids=out, output_tokens=[chr(i) for i in out], score=score,
                       attn=attn, finished=bool(ids) and ids[-1] == EOS)


async def continuous(engine, **cfg):
    b = answering(engine, ContinuousBatcher, **cfg)
    b.batcher.start()
    return b


async def test_continuous_outputs_are_right_for_rows_joining_and_leaving():
    engine = StepEngine()
    b = await continuous(engine, max_batch_size=8)
    engine.step_s = 0.001
    words = ["a", "internationalization", "bc", "hello", "x", "abcdefghij"]
    first = asyncio.ensure_future(b.transduce(words[:3]))
    await asyncio.sleep(0.01)  # the second request joins a batch already running
    second = asyncio.ensure_future(b.transduce(words[3:]))
    results = (await first) + (await second)
    for w, (r,) in zip(words, results):
        assert "".join(r.output_tokens) == w and r.finished
        assert r.attn.shape == (len(w) + 1, len(w))
        assert np.allclose(r.attn.sum(axis=1), 1.0)
    await b.batcher.stop()


async def test_short_sequences_leave_without_waiting_for_long_ones():
    engine = StepEngine(step_s=0.002)
    b = await continuous(engine, max_batch_size=8)
    long_word = "x" * 35
    long_call = asyncio.ensure_future(b.transduce([long_word]))
    while len(engine.step_batches) < 3:  # the long word is decoding
        await asyncio.sleep(0.001)
    short = await b.transduce(["ab"])
    assert "".join(short[0][0].output_tokens) == "ab"
    await long_call
    # Judged by the engine's own record of steps, not by timing: "ab" joined a batch where the
    # long word was running, and its last step came well before the long word's last step.
    with_short = [i for i, batch in enumerate(engine.step_batches) if "ab" in batch]
    with_long = [i for i, batch in enumerate(engine.step_batches) if long_word in batch]
    assert all(long_word in engine.step_batches[i] for i in with_short)
    assert len(with_short) == 3 and max(with_short) < max(with_long)
    await b.batcher.stop()


@pytest.mark.parametrize("join_wait_ms", [0, 200])
async def test_arrivals_during_decoding_wait_to_join_together(join_wait_ms):
    engine = StepEngine(step_s=0.002)
    b = await continuous(engine, max_batch_size=8, max_join_wait_ms=join_wait_ms)
    long_call = asyncio.ensure_future(b.transduce(["x" * 35]))
    while not engine.step_batches:  # an idle engine admits at once
        await asyncio.sleep(0.001)
    calls = []
    for w in ("ab", "cd", "ef"):
        calls.append(asyncio.ensure_future(b.transduce([w])))
        await asyncio.sleep(0.01)
    results = await asyncio.gather(*calls)
    assert ["".join(r[0][0].output_tokens) for r in results] == ["ab", "cd", "ef"]
    await long_call
    if join_wait_ms:  # one encoder run for the three, once the first had waited 200 ms
        assert engine.encode_batches == [["x" * 35], ["ab", "cd", "ef"]]
    else:  # each joined at the next step, on its own
        assert engine.encode_batches == [["x" * 35], ["ab"], ["cd"], ["ef"]]
    await b.batcher.stop()


async def test_a_full_batch_admits_without_waiting():
    engine = StepEngine(step_s=0.002)
    b = await continuous(engine, max_batch_size=3, max_join_wait_ms=10_000)
    long_call = asyncio.ensure_future(b.transduce(["x" * 35]))
    while not engine.step_batches:
        await asyncio.sleep(0.001)
    started = time.perf_counter()
    await b.transduce(["ab", "cd"])  # fills the two free rows: no reason to wait
    assert time.perf_counter() - started < 5
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
    engine = StepEngine(max_output_len=40, step_s=0.002)
    b = await continuous(engine, max_batch_size=8)
    doomed = asyncio.ensure_future(b.transduce(["d" * 39]))
    keeper = asyncio.ensure_future(b.transduce(["k" * 30]))
    await asyncio.sleep(0.02)
    doomed.cancel()
    steps_at_cancel = len(engine.step_batches)
    ((r,),) = await keeper
    assert "".join(r.output_tokens) == "k" * 30
    with_doomed = [i for i, batch in enumerate(engine.step_batches) if "d" * 39 in batch]
    assert max(with_doomed) <= steps_at_cancel  # at most the step already under way
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
    engine = StepEngine(step_s=0.004)  # 5-letter words: 6 steps, ~25 ms each at 4 rows
    b = await continuous(engine, max_batch_size=4)
    await asyncio.gather(*(b.transduce([f"warm{i}"]) for i in range(16)))  # the rate under load
    assert b.batcher.rate.sources_per_s() is not None
    ((r,),) = await b.transduce(["alone"], deadline_s=time.perf_counter() + 0.001)  # free rows: admitted
    assert r.output_tokens == list("alone")
    busy = [asyncio.ensure_future(b.transduce([f"busy{i}"])) for i in range(24)]  # 4 rows + 20 queued
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    with pytest.raises(Overloaded, match="does not fit in the call's deadline"):
        await b.transduce(["late"], deadline_s=time.perf_counter() + 0.05)
    assert time.perf_counter() - t0 < 0.005
    assert all(len(o) == 1 for o in await asyncio.gather(*busy))
    await b.batcher.stop()


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


# --- row-step counters and length grouping (service/scheduling/lengths.py) ------------------


class LengthEngine(FakeEngine):
    """FakeEngine whose rows take their source's length + 1 steps (one output a symbol, then
    </s>), each batch taking `step_s` a step of its longest row."""

    def __init__(self, step_s=0.0):
        super().__init__()
        self.step_s = step_s

    def decode(self, sources, max_output_lens=None, top_k=None):
        self.gate.wait(5)
        self.batches.append(["".join(s) for s in sources])
        time.sleep(self.step_s * (max(len(s) for s in sources) + 1))
        if self.fail_on in self.batches[-1]:
            raise RuntimeError(f"engine failed on {self.fail_on}")
        return [Decoded(src_tokens=s, output_ids=list(range(len(s))), output_tokens=[t.upper() for t in s],
                        score=-1.0, attn=None, finished=True) for s in sources]


def row_steps(b) -> tuple[float, float, float]:
    m = b.metrics
    return m.decode_steps._value.get(), m.decode_row_steps._value.get(), m.decode_row_steps_useful._value.get()


SHORT = ["ab", "cd", "ef", "gh"]
LONG = ["a" * 20, "b" * 20, "c" * 20, "d" * 20]
MIXED = [w for pair in zip(SHORT, LONG) for w in pair]


@pytest.mark.parametrize("grouping", [False, True])
async def test_row_step_counters_for_a_known_batch(grouping):
    engine = LengthEngine()
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


async def test_length_groups_answer_short_callers_before_the_long_group_runs():
    engine = LengthEngine(step_s=0.01)  # the long group takes 0.21 s, the short one 0.03 s
    engine.gate.clear()
    b = await started(engine, max_batch_size=8)  # length grouping is the default
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await asyncio.sleep(0.02)  # "hold" is in the engine; the eight calls below queue behind it
    done_at: dict[str, float] = {}

    async def call(w):
        await b.transduce([w])
        done_at[w] = time.perf_counter()
    calls = [asyncio.ensure_future(call(w)) for w in MIXED]
    await asyncio.sleep(0.02)
    engine.gate.set()
    await asyncio.gather(hold, *calls)
    assert engine.batches == [["hold"], SHORT, LONG]
    assert max(done_at[w] for w in SHORT) < min(done_at[w] for w in LONG) - 0.1
    await b.batcher.stop()


async def test_length_grouping_never_passes_over_a_source_popped_earlier():
    """The long sources of a popped batch go before shorter ones queued after them: sorting the
    whole queue by length would put every short source first and the long ones last."""
    engine = LengthEngine()
    engine.gate.clear()
    b = await started(engine, max_batch_size=8)
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await asyncio.sleep(0.02)
    first = asyncio.ensure_future(b.transduce(MIXED))  # the oldest 8: the next batch
    later = [f"{c}{c}" for c in "pqrstuvw"]
    second = asyncio.ensure_future(b.transduce(later))  # short, but queued after them
    await asyncio.sleep(0.02)
    engine.gate.set()
    await asyncio.gather(hold, first, second)
    assert engine.batches == [["hold"], SHORT, LONG, later]
    await b.batcher.stop()


async def test_an_engine_failure_in_one_length_group_fails_only_that_groups_callers():
    engine = LengthEngine()
    engine.fail_on = LONG[0]
    engine.gate.clear()
    b = await started(engine, max_batch_size=8)
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await asyncio.sleep(0.02)
    calls = [asyncio.ensure_future(b.transduce([w])) for w in MIXED]  # one popped batch, two groups
    await asyncio.sleep(0.02)
    engine.gate.set()
    await hold
    outcomes = dict(zip(MIXED, await asyncio.gather(*calls, return_exceptions=True)))
    assert engine.batches == [["hold"], SHORT, LONG]
    assert all(outcomes[w][0][0].output_tokens == list(w.upper()) for w in SHORT)
    assert all(isinstance(outcomes[w], RuntimeError) for w in LONG)
    assert (await b.transduce(["ok"]))[0][0].output_tokens == ["O", "K"]  # the loop goes on
    await b.batcher.stop()


async def test_a_length_group_whose_callers_all_left_is_not_decoded():
    engine = LengthEngine(step_s=0.05)  # "hold" takes 0.25 s, the short group 0.15 s after it
    engine.gate.clear()
    b = await started(engine, max_batch_size=8)
    hold = asyncio.ensure_future(b.transduce(["hold"]))
    await asyncio.sleep(0.02)
    short = [asyncio.ensure_future(b.transduce([w])) for w in SHORT]
    long_call = asyncio.ensure_future(b.transduce(LONG))  # one caller, the whole long group
    await asyncio.sleep(0.02)
    engine.gate.set()
    await hold
    await asyncio.sleep(0.07)  # the short group is decoding
    long_call.cancel()
    assert [r[0][0].output_tokens for r in await asyncio.gather(*short)] == [list(w.upper()) for w in SHORT]
    await asyncio.sleep(0.1)
    assert engine.batches == [["hold"], SHORT]  # the long group's caller left: nothing decoded for it
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
