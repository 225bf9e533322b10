"""The ONNX Loop graph is an accelerator of the decoding core, held to it bit for bit.

On shipped bundles in the precision they are served in (g2p-en and a small SIGMORPHON one), a batch
greedy-decoded by the Loop and by the core's GreedySearch (service/engine/strategy.py) over the
decoder-step graph gives every row the same ids, steps, attention and log_prob, to the last bit, the
core adding each row's log_prob in float32 as the Loop does: soft rows through the engine's own Loop
(built around soft_only(step)), and soft, hard and top-k rows mixed through a Loop around the whole step.
Rows stop at </s> or at their own length limits, some of them short.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from service.config import EngineConfig
from service.engine import strategy
from service.engine.bundle import load_bundle
from service.engine.engine import Engine, _session_options
from service.engine.loop_graph import build_greedy_loop, run_loop
from tests.conftest import REPO

BUNDLES = ["g2p-en", "g2p-ady"]
WORDS = 96


@pytest.fixture(scope="module", params=BUNDLES)
def engine(request) -> Engine:
    return Engine(load_bundle(REPO / "models" / request.param), EngineConfig(intra_op_threads=1))


def sample(engine: Engine, seed: int) -> tuple[list[list[str]], np.ndarray]:
    """WORDS of the bundle's lexicon (sources as the model reads them) and each one's length limit."""
    bundle = load_bundle(REPO / "models" / engine.name)
    lines = (bundle.path / "lexicon.tsv").read_text(encoding="utf-8").splitlines()
    words = sorted({line.split("\t")[0] for line in lines if line})
    rng = np.random.default_rng(seed)
    sources = [engine.tokenize(words[i]) for i in rng.choice(len(words), WORDS, replace=False)]
    limits = rng.integers(1, 12, size=WORDS)
    limits[::2] = engine.cfg.max_output_len  # half the rows free to reach </s>
    return sources, limits


def core(engine: Engine, sources, limits, modes) -> list:
    """The decoding core over the decoder-step graph, log_probs added up in float32."""
    return engine._step_greedy(sources, engine.encode(sources, modes), limits, log_prob_dtype=np.float32)


def assert_same(loop, stepped) -> None:
    for a, b in zip(loop, stepped, strict=True):
        assert (a.output_ids, a.finished, a.steps) == (b.output_ids, b.finished, b.steps)
        assert np.float64(a.log_prob).tobytes() == np.float64(b.log_prob).tobytes()
        assert (a.attn is None) == (b.attn is None)
        assert a.attn is None or (a.attn.dtype == b.attn.dtype and np.array_equal(a.attn, b.attn))


def test_soft_rows_through_the_engines_loop_are_the_cores(engine):
    assert engine.greedy_loop is not None and "top_k" not in engine._loop_inputs
    sources, limits = sample(engine, seed=0)
    assert_same(engine.decode(sources, list(limits)), core(engine, sources, limits, None))
    assert any(d.finished for d in core(engine, sources, limits, None))


def test_mixed_hard_and_top_k_rows_through_a_loop_around_the_whole_step_are_the_cores(engine):
    assert engine.attention_modes == ("soft", "hard", "topk")
    suffix = "" if engine.precision == "fp32" else f".{engine.precision}"
    step = onnx.load(load_bundle(REPO / "models" / engine.name).graph_path("decoder_step" + suffix))
    session = ort.InferenceSession(build_greedy_loop(step, engine.eos_id, engine.pad_id).SerializeToString(),
                                   _session_options(1), providers=["CPUExecutionProvider"])
    sources, limits = sample(engine, seed=1)
    modes = [0, 1, 2, 0, 3, 1] * (WORDS // 6)
    run = engine.encode(sources, modes)
    ids, steps, log_prob, attn = run_loop(session, [i.name for i in session.get_inputs()],
                                          [o.name for o in session.get_outputs()], run, limits)
    loop = [engine.result(s, ids[b, :steps[b]], None if attn is None else attn[b], float(log_prob[b]))
            for b, s in enumerate(sources)]
    assert_same(loop, core(engine, sources, limits, modes))


class _Counting:
    """A session that counts its calls and the rows of each."""

    def __init__(self, session):
        self.session, self.rows = session, []

    def run(self, names, feeds):
        self.rows.append(len(feeds["y_prev"]))
        return self.session.run(names, feeds)


def test_finished_rows_leave_the_loop_and_no_answer_changes(engine):
    """run_loop drops finished rows between Loop calls: the answers are those of one call that keeps
    every row to the end, bit for bit, and the later calls hold fewer rows."""
    sources, limits = sample(engine, seed=2)
    run = engine.encode(sources)
    counting = _Counting(engine.greedy_loop)
    args = (engine._loop_inputs, engine._loop_outputs, run, limits, engine.pad_id)
    whole = run_loop(engine.greedy_loop, *args, compact=False)
    compacted = run_loop(counting, *args)
    assert len(counting.rows) > 1 and counting.rows[0] == WORDS and counting.rows[-1] < WORDS // 2
    steps = whole[1]
    assert np.array_equal(steps, compacted[1]) and whole[2].tobytes() == compacted[2].tobytes()
    for b in range(WORDS):
        assert np.array_equal(whole[0][b, :steps[b]], compacted[0][b, :steps[b]])
        assert np.array_equal(whole[3][b, :steps[b]], compacted[3][b, :steps[b]])
