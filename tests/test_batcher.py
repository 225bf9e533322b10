"""The batcher with fake engines: batching, limits, overload, faults, cancellation.

The fakes tell a test where the engine thread is (`Calls`: each call counted as it begins, any of
them held until the test releases it), and admission's time comes from a `Clock` the test moves:
these tests wait on events and decide by virtual time, never by sleeping, so a busy machine
changes nothing they check.
"""
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

HOLD_S = 60  # bounds a hang only: a held call or an awaited one that never comes fails after this


class Calls:
    """The engine calls begun so far, counted as each begins; a test can hold any of them, or all
    of them while `gate` is cleared."""

    def __init__(self):
        self._changed = threading.Condition()
        self.begun = 0
        self._holds: dict[int, threading.Event] = {}
        self.gate = threading.Event()
        self.gate.set()

    def hold(self, index: int) -> threading.Event:
        """Call number `index` (from 0), once begun, waits until the returned event is set."""
        self._holds[index] = threading.Event()
        return self._holds[index]

    def begin(self) -> None:
        """Engine thread: a call begins, and waits while held."""
        with self._changed:
            index, self.begun = self.begun, self.begun + 1
            self._changed.notify_all()
        for event in (self._holds.get(index), self.gate):
            if event is not None and not event.wait(HOLD_S):
                raise TimeoutError(f"engine call {index} was held {HOLD_S} s and never released")

    async def reached(self, n: int) -> None:
        """Until n calls have begun (waited for in a thread: they begin in the engine's)."""
        def wait():
            with self._changed:
                if not self._changed.wait_for(lambda: self.begun >= n, HOLD_S):
                    raise TimeoutError(f"{self.begun} engine calls began in {HOLD_S} s, not {n}")
        await asyncio.to_thread(wait)


class Clock:
    """The batcher's clock in tests of what it decides by time: it moves only when told to."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now_s += seconds


class FakeEngine:
    """Echoes each source upper-cased (one output id a symbol, then </s>); records every batch it
    is given. With a clock, each call takes `call_s` of it."""

    tgt_joiner = " "
    tgt_vocab = ()  # answering reads it (an ARPAbet model's text has an IPA form): none here
    precision = "fp32"
    src_tokens_kind = "words"  # no compound splitting (service/answering/compound.py): one text, one source

    def __init__(self, clock: Clock | None = None, call_s: float = 0.0, fail_on: str | None = None):
        self.batches: list[list[str]] = []
        self.calls = Calls()
        self.clock, self.call_s = clock, call_s
        self.fail_on = fail_on

    def tokenize(self, text):
        return list(text.strip())

    def unknown_symbols(self, tokens):
        return []

    def decode(self, sources, max_output_lens=None, top_k=None):
        self.calls.begin()
        words = ["".join(s) for s in sources]
        self.batches.append(words)
        if self.clock is not None:
            self.clock.advance(self.call_s)
        if self.fail_on in words:
            raise RuntimeError(f"engine failed on {self.fail_on}")
        return [Decoded(src_tokens=s, output_ids=list(range(len(s))), output_tokens=[t.upper() for t in s],
                        score=-1.0, attn=np.eye(len(s), dtype=np.float32), finished=True) for s in sources]


def answering(engine, batcher_cls=None, metrics=None, cache_entries=0, clock=time.perf_counter, **cfg) -> Answerer:
    """A batcher (not started) and the answerer that holds it, as the repository builds them.
    No response cache unless a test asks: these tests count what reaches the engine."""
    metrics = metrics or Metrics().for_model("m")
    batcher = (batcher_cls or Batcher)(engine, BatcherConfig(**cfg), metrics, clock)
    return Answerer(engine, batcher, AnswerConfig(cache_entries=cache_entries), metrics)


async def started(engine, **cfg) -> Answerer:
    b = answering(engine, **cfg)
    b.batcher.start()
    return b


async def one_pass() -> None:
    """One pass of the event loop: calls just created queue their sources or are refused in it, since
    transduce awaits nothing before the queue (each test checks the queue it expects after it)."""
    await asyncio.sleep(0)


def refused_at_once(call, match: str) -> None:
    """The call (a coroutine not yet started) is refused in its first step, before it awaits
    anything, the queue included: what "at once" means, whatever the machine's speed."""
    try:
        with pytest.raises(Overloaded, match=match):
            call.send(None)
    finally:
        call.close()


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
    assert len(b.batcher._queue) == 1  # e waits for a second source rather than going alone
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
    assert len(b.batcher._pending) + sum(c.done() for c in calls) == 10  # each admitted or refused
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
    assert b.batcher.rate.sources_per_s() == pytest.approx(200)  # the rate under load: 4 sources in 20 ms
    assert len(b.batcher._queue) == 40
    # (40 queued + its own - 4 in the next batch) / 200 per s = 185 ms expected, past 0.6 x 100 ms.
    refused_at_once(b.transduce(["late"], deadline_s=clock() + 0.1), "does not fit in the call's deadline")
    admitted = asyncio.ensure_future(b.transduce(["patient"], deadline_s=clock() + 5))
    await one_pass()
    assert len(b.batcher._queue) == 41
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
    assert len(b.batcher._queue) == 20  # 24 admitted, 4 of them in the engine; 20 refused
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
    assert len(b.batcher._queue) == 1
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
    assert len(b.batcher._queue) == 1
    doomed.cancel()
    await asyncio.wait([doomed])  # its caller has gone
    engine.calls.gate.set()
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
    with pytest.raises(ValueError, match="company_wait_ms must be >= 0, got nan"):
        BatcherConfig(company_wait_ms=float("nan"))


# --- continuous (step-level) batching -------------------------------------------------------

from service.scheduling.batcher import ContinuousBatcher  # noqa: E402
from service.config import EngineConfig  # noqa: E402
from service.domain import DecodeOptions  # noqa: E402
from service.engine.engine import Engine, Running  # noqa: E402

EOS = 2


class StepEngine:
    """A deterministic step-level engine: each source is copied out symbol by symbol, then </s>.

    The 'decoder state' is the position in the source, so rows joining and leaving
    between steps must keep their own positions for the outputs to come out right.
    Its `calls` are its decoder steps; with a clock, each step takes `step_s` of it.
    """

    eos_id = EOS
    tgt_joiner = ""
    precision = "fp32"
    src_tokens_kind = "words"  # as FakeEngine: no compound splitting
    tgt_vocab = [chr(i) for i in range(200)]  # output id i is the symbol chr(i)
    # The real engine's length limit and results, not copies that could drift from them.
    limit = Engine.limit
    result = Engine.result

    def __init__(self, max_output_len=40, clock: Clock | None = None, step_s: float = 0.0):
        self.cfg = EngineConfig(max_output_len=max_output_len)
        self.calls = Calls()
        self.clock, self.step_s = clock, step_s
        self.step_batches: list[list[str]] = []  # the sources in each step, in row order
        self.encode_batches: list[list[str]] = []  # the sources of each encoder run
        self.fail_when = None

    def tokenize(self, text):
        return list(text)

    def unknown_symbols(self, tokens):
        return []

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
        B, S = run.pad_mask.shape
        pos = run.state["feed"][:, 0].astype(int)
        lengths = (~run.pad_mask).sum(axis=1)
        self.step_batches.append(["".join(chr(int(c)) for c in run.enc_out[b, :lengths[b], 0]) for b in range(B)])
        self.calls.begin()
        if self.clock is not None:
            self.clock.advance(self.step_s)
        if self.fail_when and any(self.fail_when in w for w in self.step_batches[-1]):
            raise RuntimeError("injected engine fault")
        log_probs = np.full((B, len(self.tgt_vocab)), -10.0, dtype=np.float32)
        for b in range(B):
            log_probs[b, int(run.enc_out[b, pos[b], 0]) if pos[b] < lengths[b] else EOS] = -0.1
        attn = np.where(run.pad_mask, 0.0, 1.0 / lengths[:, None]).astype(np.float32)
        return log_probs, attn, Running(run.y_prev, {"feed": run.state["feed"] + 1}, run.enc_out, run.keys, run.pad_mask)

    def first_step(self, word: str) -> int:
        """The index of the first step `word` was decoded in."""
        return next(i for i, batch in enumerate(self.step_batches) if word in batch)


async def continuous(engine, **cfg):
    b = answering(engine, ContinuousBatcher, **cfg)
    b.batcher.start()
    return b


async def test_continuous_outputs_are_right_for_rows_joining_and_leaving():
    engine = StepEngine()
    release = engine.calls.hold(2)
    b = await continuous(engine, max_batch_size=8)
    words = ["a", "internationalization", "bc", "hello", "x", "abcdefghij"]
    first = asyncio.ensure_future(b.transduce(words[:3]))
    await engine.calls.reached(3)  # the first request's third step is under way
    second = asyncio.ensure_future(b.transduce(words[3:]))  # joins the batch already running
    await one_pass()
    assert len(b.batcher._queue) == 3
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
    per_s = b.batcher.rate.sources_per_s()
    assert per_s is not None
    ((r,),) = await b.transduce(["alone"], deadline_s=clock() + 0.001)  # free rows: admitted
    assert r.output_tokens == list("alone")
    first_busy = engine.calls.begun
    release = engine.calls.hold(first_busy)  # the busy calls' first step
    busy = [asyncio.ensure_future(b.transduce([f"busy{i}"])) for i in range(24)]
    await engine.calls.reached(first_busy + 1)
    # However many joined that step, 21 sources stand before the next free row.
    assert len(b.batcher._queue) + b.batcher._in_service == 24 and 21 / per_s > 0.6 * 0.05
    refused_at_once(b.transduce(["late"], deadline_s=clock() + 0.05), "does not fit in the call's deadline")
    release.set()
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
# FakeEngine's rows take their source's length + 1 steps (one output a symbol, then </s>).


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
    assert len(b.batcher._queue) == 8
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
    assert len(b.batcher._queue) == 16
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
    assert len(b.batcher._queue) == 8
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
    assert len(b.batcher._queue) == 8
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
