"""The onnxruntime engine on a tiny real model."""
import logging
import subprocess
import sys

import numpy as np
import pytest

import service.engine.engine
from service.engine.bundle import load_bundle
from service.config import EngineConfig
from service.engine.engine import Engine


@pytest.fixture(params=["onnx", "python"])
def greedy_loop(request):
    """decode() both ways: the bundle's ONNX Loop graph and the Python step loop."""
    return request.param


def make_engine(bundle, **kw):
    return Engine(load_bundle(bundle), EngineConfig(**kw))


def loop_feeds(engine, seed: int) -> tuple[list[list[str]], dict]:
    """40 random words and every input a greedy Loop graph may take for them (each Loop takes its own)."""
    rng = np.random.default_rng(seed)
    words = [list(rng.choice(engine.src_vocab[4:], size=rng.integers(1, 15))) for _ in range(40)]
    run = engine.encode(words)
    return words, {"y_prev": run.y_prev, **run.state, "enc_out": run.enc_out, "keys": run.keys,
                   "pad_mask": run.pad_mask, "top_k": run.top_k, "max_output_len": np.full(len(words), 20, dtype=np.int64),
                   "steps0": np.zeros(len(words), np.int64), "log_prob0": np.zeros(len(words), np.float32),
                   "min_live": np.array(0, np.int64)}


def test_shapes_labels_and_attention_rows(tiny_bundle, greedy_loop):
    engine = make_engine(tiny_bundle, greedy_loop=greedy_loop)
    words = ["attention", "a", "phoenix"]
    results = engine.decode([engine.tokenize(w) for w in words])
    for word, r in zip(words, results):
        T, S = r.attn.shape
        assert S == len(word) and r.src_tokens == list(word)
        assert T == len(r.output_tokens) + (1 if r.finished else 0)
        assert np.allclose(r.attn.sum(axis=1), 1.0, atol=1e-5)
        assert r.log_prob <= 0.0
        assert all(t in engine.tgt_vocab for t in r.output_tokens)


def test_result_does_not_depend_on_batch_neighbours(tiny_bundle, greedy_loop):
    engine = make_engine(tiny_bundle, greedy_loop=greedy_loop)
    alone = engine.decode([list("cat")])[0]
    together = engine.decode([list("internationalization"), list("cat"), list("x")])[1]
    assert alone.output_tokens == together.output_tokens
    assert np.allclose(alone.attn, together.attn, atol=1e-5)


def test_each_row_stops_at_its_own_length_limit(tiny_bundle, greedy_loop):
    engine = make_engine(tiny_bundle, max_output_len=30, greedy_loop=greedy_loop)
    short, free = engine.decode([list("internationalization"), list("internationalization")], [2, 0])
    assert len(short.attn) == 2 and not short.finished
    assert len(free.attn) > 2


def test_engine_cap_bounds_every_request(tiny_bundle, greedy_loop):
    engine = make_engine(tiny_bundle, max_output_len=3, greedy_loop=greedy_loop)
    (r,) = engine.decode([list("internationalization")], [100])
    assert len(r.attn) <= 3


class RecordingSession:
    """An onnxruntime session that keeps the inputs of every run."""

    def __init__(self, session):
        self.session, self.feeds = session, []

    def run(self, names, feeds, *args, **kw):
        self.feeds.append({k: v.copy() for k, v in feeds.items()})
        return self.session.run(names, feeds, *args, **kw)


def test_unknown_symbols_are_decoded_as_unk(tiny_bundle, greedy_loop):
    engine = make_engine(tiny_bundle, greedy_loop=greedy_loop)
    engine.encoder = RecordingSession(engine.encoder)
    assert {"€", "¥"}.isdisjoint(engine.src_vocab) and {"a", "b"} <= set(engine.src_vocab)
    (r,) = engine.decode([list("a€b")])
    (other,) = engine.decode([list("a¥b")])  # another symbol the model does not know
    assert r.src_tokens == ["a", "€", "b"] and r.attn.shape[1] == 3
    a, b = engine.src_vocab.index("a"), engine.src_vocab.index("b")
    assert [f["src"].tolist() for f in engine.encoder.feeds] == [[[a, engine.unk_id, b]]] * 2  # the encoder saw <unk>
    assert other.output_ids == r.output_ids and other.log_prob == r.log_prob and np.array_equal(other.attn, r.attn)


def test_onnx_loop_decodes_exactly_as_the_step_loop(tiny_bundle):
    loop, steps = make_engine(tiny_bundle), make_engine(tiny_bundle, greedy_loop="python")
    assert loop.greedy_loop is not None and steps.greedy_loop is None
    rng = np.random.default_rng(0)
    letters = loop.src_vocab[4:]
    words = [list(rng.choice(letters, size=rng.integers(1, 15))) for _ in range(60)]
    limits = [int(n) for n in rng.integers(0, 14, size=60)]  # 0 = the engine's cap
    # Soft rows only (the Loop), then soft, hard and top-2 rows together (the step loop: see below).
    for modes in ([0] * 60, [int(k) for k in rng.integers(0, 3, size=60)]):
        for a, b in zip(loop.decode(words, limits, modes), steps.decode(words, limits, modes)):
            assert a.output_ids == b.output_ids and a.finished == b.finished
            assert a.attn.shape == b.attn.shape and np.allclose(a.attn, b.attn, atol=1e-5)
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)


def test_the_loop_leaves_the_top_k_work_out_and_answers_bit_for_bit_as_the_whole_graph(tiny_bundle):
    """The engine's Loop is built around soft_only(step): keep_top_k's nodes are gone (a soft decode
    needs none), and its answers for soft rows are the whole step graph's Loop's, bit for bit."""
    import onnx
    import onnxruntime as ort

    from service.engine.loop_graph import build_greedy_loop, soft_only

    engine = make_engine(tiny_bundle)
    step = onnx.load(load_bundle(tiny_bundle).graph_path("decoder_step"))
    soft = soft_only(step)
    assert "top_k" not in engine._loop_inputs and "top_k" not in [i.name for i in soft.graph.input]
    assert not [n for n in soft.graph.node if "top_k" in n.input]
    assert len(soft.graph.node) < len(step.graph.node)
    whole = ort.InferenceSession(build_greedy_loop(step, engine.eos_id, engine.pad_id).SerializeToString(),
                                 service.engine.engine._session_options(1), providers=["CPUExecutionProvider"])
    words, feeds = loop_feeds(engine, seed=1)
    a = whole.run(None, {i.name: feeds[i.name] for i in whole.get_inputs()})
    b = engine.greedy_loop.run(None, {n: feeds[n] for n in engine._loop_inputs})
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))

    # Beside hard and top-2 rows (which take the step loop), a soft row still takes the Loop: the same
    # answer as in an all-soft batch, to the last bit of its score.
    modes = [0, 1, 0, 2] * 10
    alone, mixed = engine.decode(words), engine.decode(words, top_k=modes)
    for a, b, k in zip(alone, mixed, modes):
        if k == 0:
            assert a.output_ids == b.output_ids and a.log_prob == b.log_prob and np.array_equal(a.attn, b.attn)


# Counted in a process of its own: in the test's, threads that other tests left (gRPC's, executors')
# come and go on their own.
THREADS_AFTER_MORE_ENGINES = """
import os, sys
from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
bundle = load_bundle(sys.argv[1])
Engine(bundle, EngineConfig()).decode([list("cat")])  # the process's pool exists from here on
before = len(os.listdir("/proc/self/task"))
engines = [Engine(bundle, EngineConfig(greedy_loop=loop)) for loop in ("onnx", "python", "onnx")]  # kept alive
for engine in engines:
    engine.decode([list("cat"), list("internationalization")])
print(before, len(os.listdir("/proc/self/task")))
"""


def test_engines_share_the_process_onnxruntime_thread_pool(tiny_bundle, caplog):
    out = subprocess.run([sys.executable, "-c", THREADS_AFTER_MORE_ENGINES, str(tiny_bundle)],
                         capture_output=True, text=True, check=True).stdout
    before, after = map(int, out.split())
    assert after == before  # 9 more sessions, no more threads
    make_engine(tiny_bundle).decode([list("cat")])  # this process's pool exists from here on
    with caplog.at_level(logging.WARNING, logger="service.engine.engine"):
        make_engine(tiny_bundle, intra_op_threads=service.engine.engine._process_pool_threads + 1)
    assert "ignored" in caplog.text  # the pool cannot be resized; saying so beats a silent no-op


def test_warm_up_runs_the_step_graph_too(tiny_bundle):
    """decode() goes through the ONNX Loop, so warming up must also run the decoder-step graph
    that continuous batching and beam search use."""
    engine = make_engine(tiny_bundle)

    class Counting:
        def __init__(self, session):
            self.session, self.runs = session, 0

        def run(self, *args, **kw):
            self.runs += 1
            return self.session.run(*args, **kw)

    engine.decoder, engine.greedy_loop = Counting(engine.decoder), Counting(engine.greedy_loop)
    engine.warm_up([list("cat"), list("a")])
    assert engine.decoder.runs >= 1 and engine.greedy_loop.runs >= 1


def test_the_loop_holds_each_weight_once_where_its_kernel_wants_it(tiny_bundle):
    """The step's weights are split between the Loop's body (those its kernels prepack: products' and RNN
    weights) and the outer graph (the rest, read by the body: held once). Each is in one place, and the
    answers are bit for bit those of a Loop whose body holds them all."""
    import onnx
    import onnxruntime as ort

    from service.engine.loop_graph import build_greedy_loop, soft_only

    engine = make_engine(tiny_bundle)
    step = onnx.load(load_bundle(tiny_bundle).graph_path("decoder_step"))
    step = soft_only(step) or step
    loop = build_greedy_loop(step, engine.eos_id, engine.pad_id)
    body = next(a.g for n in loop.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body")
    inner, outer = {t.name for t in body.initializer}, {t.name for t in loop.graph.initializer}
    assert not inner & outer and inner | outer == {t.name for t in step.graph.initializer}
    packed = {i for n in step.graph.node if n.op_type in ("LSTM", "GRU", "RNN") for i in n.input[1:3]} | {
        n.input[1] for n in step.graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in inner | outer}
    assert packed and packed <= inner
    assert "decoder.embed.weight" in outer

    whole = onnx.ModelProto()
    whole.CopyFrom(loop)
    whole_body = next(a.g for n in whole.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body")
    whole_body.initializer.extend(whole.graph.initializer)
    del whole.graph.initializer[:]
    whole = ort.InferenceSession(whole.SerializeToString(), service.engine.engine._session_options(1),
                                 providers=["CPUExecutionProvider"])
    words, feeds = loop_feeds(engine, seed=2)
    a = whole.run(None, {i.name: feeds[i.name] for i in whole.get_inputs()})
    b = engine.greedy_loop.run(None, {n: feeds[n] for n in engine._loop_inputs})
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
