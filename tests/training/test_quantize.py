"""The int8 variant: quantized graphs in the bundle, hashed, evaluated, checked for batch independence,
selectable at serve time."""
import shutil

import numpy as np
import pytest

from service.domain import BundleError
from service.engine.bundle import load_bundle
from service.config import EngineConfig
from service.engine.engine import Engine
from training.quantize import quantize_bundle


@pytest.fixture(scope="module")
def tiny_bundle(tiny_corpus_bundle):
    """The committed tiny model beside its corpus: quantizing evaluates both precisions on it."""
    return tiny_corpus_bundle


@pytest.fixture(scope="module")
def quantized(tiny_bundle, tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "tiny" / "1"
    shutil.copytree(load_bundle(tiny_bundle).path, path)
    quantize_bundle(path)
    return path


def test_int8_graphs_are_in_the_manifest_with_their_metrics(quantized):
    m = load_bundle(quantized).manifest  # hashes of the new files verified
    assert {"encoder.int8", "decoder_step.int8"} <= set(m["graphs"])
    kept = m["int8"]["encoder_lstms"]["kept"]  # the faster of the encoder's two forms, timed on dev words
    assert ("Scan" in m["int8"]["quantized_ops"]["encoder"]) == (kept == "scan")
    assert set(m["int8"]["encoder_lstms"]["ms_a_word"]) == {"fp32 op", "scan"}
    assert m["int8"]["encoder_lstms"]["batch_independent"][kept] is True  # the faster form, or else the other
    assert not list(quantized.glob("*.lstm.onnx")) + list(quantized.glob("*.scan.onnx"))  # the other form removed
    assert m["int8"]["quantized_ops"]["decoder_step"]["MatMulIntegerToFloat"] >= 1
    assert m["int8"]["batch_independence"]["independent"] is True, m["int8"]["batch_independence"]
    import onnx

    for role in ("encoder.int8", "decoder_step.int8"):  # no constant left unread (onnxruntime warns of each)
        graphs = [onnx.load(quantized / m["graphs"][role]).graph]
        read, inits = set(), set()
        while graphs:
            g = graphs.pop()
            inits |= {t.name for t in g.initializer}
            for n in g.node:
                read.update(n.input)
                graphs += [a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
        assert inits <= read, sorted(inits - read)[:5]
    for split in ("dev", "test"):
        fp32, int8 = m["metrics"][split], m["int8"]["metrics"][split]
        assert int8["words"] == fp32["words"]
        assert abs(int8["wer"] - fp32["wer"]) < 0.05  # a tiny model; the shipped one is held to 0.5 points


def test_the_encoders_lstms_stay_fp32_or_run_in_a_scan_as_asked(quantized):
    import onnx

    from training.rowwise_int8 import quantize_rowwise, quantized_ops

    encoder = onnx.load(quantized / "encoder.onnx")
    lstms = sum(n.op_type == "LSTM" for n in encoder.graph.node)
    assert lstms >= 1
    kept = quantize_rowwise(encoder, one_step_lstm=False, weights="s7")  # --method rowwise-s7
    assert sum(n.op_type == "LSTM" for n in kept.graph.node) == lstms
    scanned = quantize_rowwise(encoder, one_step_lstm=False, scan_lstms=True)  # --method rowwise-u8-scan
    assert not any(n.op_type == "LSTM" for n in scanned.graph.node) and quantized_ops(scanned)["Scan"] >= 1


def test_the_fused_step_takes_its_lstms_gates_in_one_product_and_keeps_each_rows_answer(quantized):
    """The default step (training/rowwise_step.py): the embedding folded into the weights, [feed; h] at a fixed
    scale in one product, where the cell written out as is takes two; near the fp32 step, and a row's
    outputs the same alone as among others."""
    import onnx
    import onnxruntime as ort

    from service.engine import engine as engine_module
    from training.rowwise_int8 import quantize_rowwise, quantized_ops
    from training.rowwise_step import bounded_state_inputs, fused_one_step

    step, encoder = onnx.load(quantized / "decoder_step.onnx"), onnx.load(quantized / "encoder.onnx")
    assert {"feed", "h"} <= bounded_state_inputs(step, encoder)  # tanh outputs fed back, zeros / tanh at first
    written_out = quantize_rowwise(step, one_step_lstm=True, weights="s7")  # --method rowwise-s7's step
    fused = quantize_rowwise(step, one_step_lstm=True, weights="s7", write_step=fused_one_step,
                             bounded_inputs=bounded_state_inputs(step, encoder))
    assert quantized_ops(fused)["MatMulIntegerToFloat"] == quantized_ops(written_out)["MatMulIntegerToFloat"] - 1
    assert "Gather" in {n.op_type for n in fused.graph.node} and not any(  # the folded table, not the embedding
        n.op_type == "Gather" and n.input[0] == "decoder.embed.weight" for n in fused.graph.node)
    sessions = [ort.InferenceSession(m.SerializeToString(), engine_module._session_options(1),
                                     providers=["CPUExecutionProvider"]) for m in (step, written_out, fused)]
    rng = np.random.default_rng(0)
    B, S = 6, 5
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in step.graph.input}
    H, V = dims["h"][-1], len(load_bundle(quantized).manifest.tgt_vocab)
    enc_out = np.tanh(rng.normal(0, 1, (B, S, dims["enc_out"][-1]))).astype(np.float32)
    normal = lambda *shape: rng.normal(0, 1, shape).astype(np.float32)  # noqa: E731
    feeds = {"y_prev": rng.integers(4, V, B).astype(np.int64), "h": np.tanh(normal(1, B, H)), "c": normal(1, B, H),
             "feed": np.tanh(normal(B, dims["feed"][-1])), "enc_out": enc_out, "keys": normal(B, S, dims["keys"][-1]),
             "pad_mask": np.zeros((B, S), bool), "top_k": np.zeros(B, np.int64)}
    feeds = {k: v for k, v in feeds.items() if k in dims}
    ref, before, out = (s.run(None, feeds) for s in sessions)
    for r, w, o in zip(ref, before, out):  # int8's error: no larger than with the cell written out as is
        assert np.abs(o - r).mean() <= 1.2 * np.abs(w - r).mean() + 1e-4
    layered = lambda a: a.ndim == 3 and a.shape[0] == 1  # noqa: E731 - (1, B, H): h and c
    for b in range(B):  # each row alone: exactly its answer among the others
        alone = sessions[2].run(None, {k: v[:, b:b + 1] if k in ("h", "c") else v[b:b + 1] for k, v in feeds.items()})
        for a, o in zip(alone, out):
            np.testing.assert_array_equal(a[:, 0] if layered(a) else a[0], o[:, b] if layered(o) else o[b])


def test_int8_engine_mostly_agrees_with_fp32(quantized):
    bundle = load_bundle(quantized)
    fp32, int8 = Engine(bundle, EngineConfig()), Engine(bundle, EngineConfig(precision="int8"))
    words = [list(w) for w in ["attention", "knight", "phoenix", "exit", "a", "zebra", "queue", "rhythm"]]
    same = sum(a.output_ids == b.output_ids for a, b in zip(fp32.decode(words), int8.decode(words)))
    assert same >= 6
    for d in int8.decode(words):
        assert np.allclose(d.attn.sum(axis=1), 1.0, atol=1e-4)


@pytest.mark.parametrize("loop", ["python", "onnx"])
def test_an_int8_word_has_one_answer_alone_or_beside_longer_louder_words(quantized, loop):
    from service.domain import DecodeOptions
    from service.engine.beam import beam_search

    engine = Engine(load_bundle(quantized), EngineConfig(precision="int8", greedy_loop=loop))
    word, neighbours = list("knight"), [list("supercalifragilistic"), list("zzzzxxxxqqqq"), list("a")]
    alone = engine.decode([word])[0]
    for batch in ([word] + neighbours, neighbours + [word], neighbours[:1] + [word] * 3):
        d = engine.decode(batch)[batch.index(word)]
        assert d.output_ids == alone.output_ids and abs(d.log_prob - alone.log_prob) <= 1e-5
    options = DecodeOptions(beam_size=4)
    best = beam_search(engine, [word], options)[0][0]
    beside = beam_search(engine, neighbours + [word], options)[-1][0]
    assert beside.output_ids == best.output_ids and abs(beside.log_prob - best.log_prob) <= 1e-5


def test_the_dynamic_method_fails_the_batch_check_and_auto_serves_it_fp32(tiny_bundle, tmp_path):
    # onnxruntime's dynamic quantization takes one activation scale over the batch: a word's
    # score moves with its neighbours, which the check sees and --precision auto refuses
    path = tmp_path / "tiny" / "1"
    shutil.copytree(load_bundle(tiny_bundle).path, path)
    m = quantize_bundle(path, method="dynamic")
    check = m["int8"]["batch_independence"]
    assert check["independent"] is False and check["greedy"]["scores_moved"] > 0, check
    assert Engine(load_bundle(path), EngineConfig()).precision == "fp32"


def test_int8_without_quantized_graphs_is_a_clear_error(tiny_bundle):
    with pytest.raises(BundleError, match="no 'encoder.int8' graph.*make quantize"):
        Engine(load_bundle(tiny_bundle), EngineConfig(precision="int8"))


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision must be"):
        EngineConfig(precision="int4")


def test_auto_serves_int8_only_where_it_costs_at_most_a_tenth_of_a_point_on_dev(quantized, tiny_bundle, tmp_path):
    from service.engine.engine import INT8_WER_TOLERANCE, served_precision
    from tests.live import copy_bundle

    m = load_bundle(quantized).manifest
    fp32, int8 = m["metrics"]["dev"]["wer"], m["int8"]["metrics"]["dev"]["wer"]
    speed = m["int8"]["speed"]  # timed by make quantize: a lone word and a batch, each precision
    assert speed["words"] > 0 and speed["lone_fp32_ms"] > 0 and speed["batch_int8_ms"] > 0
    assert speed["threads"] == 1  # as a server worker decodes, whatever pool make quantize's own process has
    assert speed["int8_over_fp32"] == pytest.approx((speed["lone_int8_ms"] / speed["lone_fp32_ms"] * speed[
        "batch_int8_ms"] / speed["batch_fp32_ms"]) ** 0.5, rel=1e-2)
    assert Engine(load_bundle(quantized), EngineConfig()).precision == (
        "int8" if int8 - fp32 <= INT8_WER_TOLERANCE and speed["int8_over_fp32"] <= 1 else "fp32")
    assert Engine(load_bundle(tiny_bundle), EngineConfig()).precision == "fp32"  # no int8 graphs
    costly = {**m["int8"], "metrics": {**m["int8"]["metrics"], "dev": {**m["int8"]["metrics"]["dev"],
                                                                        "wer": fp32 + 0.002}}}
    free = {**m["int8"], "metrics": {**m["int8"]["metrics"], "dev": {**m["int8"]["metrics"]["dev"], "wer": fp32}},
            "speed": {**speed, "int8_over_fp32": 1.0}}
    assert served_precision({**m, "int8": costly}, "auto") == "fp32"
    assert served_precision({**m, "int8": free}, "auto") == "int8"
    one_word = {**free, "metrics": {**free["metrics"], "dev": {**free["metrics"]["dev"], "wer": 0.042}}}
    assert served_precision({**m, "metrics": {**m["metrics"], "dev": {**m["metrics"]["dev"], "wer": 0.041}},
                             "int8": one_word}, "auto") == "int8"  # 1 word of 1,000: 0.1 points, within
    assert served_precision({**m, "int8": costly}, "int8") == "int8"  # --precision decides when given
    dependent = {**free, "batch_independence": {**free["batch_independence"], "independent": False}}
    assert served_precision({**m, "int8": dependent}, "auto") == "fp32"
    unchecked = {k: v for k, v in free.items() if k != "batch_independence"}  # quantized before the check
    assert served_precision({**m, "int8": unchecked}, "auto") == "fp32"
    slower = {**free, "speed": {**speed, "int8_over_fp32": 1.2}}  # small models: per-row int8 costs time
    assert served_precision({**m, "int8": slower}, "auto") == "fp32"
    assert served_precision({**m, "int8": {**free, "speed": {**speed, "int8_over_fp32": 0.8}}}, "auto") == "int8"
    assert served_precision({**m, "int8": slower}, "int8") == "int8"
    path = copy_bundle(quantized, tmp_path / "free" / "1", int8=free)
    assert Engine(load_bundle(path), EngineConfig()).precision == "int8"
    assert Engine(load_bundle(path), EngineConfig(precision="fp32")).precision == "fp32"


@pytest.mark.parametrize("weights", ["u8", "s7"])
@pytest.mark.parametrize("bounded", [False, True])
def test_int8_products_are_the_exact_integer_sums_on_every_cpu(bounded, weights):
    """The quantized product is the exact sum of its integer products, here with every activation and weight
    at the extremes of their ranges. Stored as int8, onnxruntime's kernel for x86 CPUs without VNNI (AVX2)
    saturated its 16-bit pair sums there, so the same graph answered otherwise on those CPUs."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from service.engine import engine as engine_module
    from training.rowwise_int8 import WEIGHT_FORMS, _Graph, _shared_constants, rowwise_matmul

    rng = np.random.default_rng(0)
    K, N = 64, 64
    x = np.concatenate([np.full((1, K), 0.99), rng.uniform(-0.99, 0.99, (3, K))]).astype(np.float32)
    w = np.concatenate([np.full((K, N // 2), 0.5), rng.normal(0, 0.5, (K, N // 2))], axis=1).astype(np.float32)
    g = _Graph("t", 17, weights)
    rowwise_matmul(g, _shared_constants(g), "x", w, out="y", bounded=bounded)
    model = helper.make_model(
        helper.make_graph(g.nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, N])], initializer=g.inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), engine_module._session_options(1),
                                   providers=["CPUExecutionProvider"])  # the engine's own options
    y = session.run(None, {"x": x})[0]

    top = WEIGHT_FORMS[weights]  # u8: [-127, 127] stored + 128; s7: [-64, 64]
    w_scale = np.abs(w).max(axis=0) / top  # one scale per output column, symmetric
    w_q = np.clip(np.round(w / w_scale), -top, top).astype(np.int64)
    s = np.full((4, 1), 1 / 127) if bounded else np.abs(x).max(axis=1, keepdims=True) / 127
    x_q = (np.floor(x / s + 128.5) if not bounded else np.round(x / s + 128)).astype(np.int64) - 128  # [-127, 127]
    exact = (x_q @ w_q) * s * w_scale  # the integer sums, then the scales
    np.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-6)
    assert np.abs(y[0, :N // 2]).min() > 0.4 * K  # the saturating case: every product at its largest


def test_the_encoders_embedding_is_folded_into_its_first_layers_input_products(quantized):
    """An encoder layer whose input is the embedding lookup (reversed per source for the backward direction)
    gathers rows of a table folded at export rather than quantizing and multiplying them: two products fewer,
    the same encoder outputs within int8's error."""
    import onnx
    import onnxruntime as ort

    from service.engine import engine as engine_module
    from training.rowwise_int8 import quantize_rowwise, quantized_ops
    from training.rowwise_step import folded_input

    encoder = onnx.load(quantized / "encoder.onnx")
    plain, folded = (quantize_rowwise(encoder, one_step_lstm=False, scan_lstms=True, weights="s7", fold_input=f)
                     for f in (None, folded_input))
    assert quantized_ops(folded)["MatMulIntegerToFloat"] == quantized_ops(plain)["MatMulIntegerToFloat"] - 2
    m = load_bundle(quantized).manifest
    words = ["knight", "a", "phoenix"]
    index = {t: i for i, t in enumerate(m.src_vocab)}
    src = np.zeros((3, 7), np.int64)
    for b, w in enumerate(words):
        src[b, :len(w)] = [index[ch] for ch in w]
    feeds = {"src": src, "src_len": np.array([len(w) for w in words], np.int64)}
    outs = [dict(zip([o.name for o in s.get_outputs()], s.run(None, {k: v for k, v in feeds.items()
                                                                      if k in {i.name for i in s.get_inputs()}})))
            for s in (ort.InferenceSession(g.SerializeToString(), engine_module._session_options(1),
                                           providers=["CPUExecutionProvider"]) for g in (encoder, plain, folded))]
    ref, before, after = (o["enc_out"] for o in outs)
    assert np.abs(after - ref).mean() <= 1.2 * np.abs(before - ref).mean() + 1e-4
    assert np.abs(after - before).max() > 0  # not the same graph
