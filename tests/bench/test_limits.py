"""bench/limits.py: FLOPs and weight bytes read from real exported graphs match a count by hand, and the
measured ceilings are real numbers. A tiny untrained model: its shapes, not its weights, are under test."""
import itertools
import math

import pytest

from bench import limits

E, H, SRC_V, TGT_V = 6, 16, 12, 9  # emb_dim, hidden_size (the encoder's two directions 8 each), vocab sizes


def three_words() -> dict[str, list[str]]:
    """Three test-split words (split_of is a hash of the word) of lengths 3, 4, 5, the last with two
    references: mean source length 4, mean output length (2 + 3 + (2 + 4) / 2) / 3 = 8/3."""
    from training.data import split_of

    words = {}
    for n in (3, 4, 5):
        words[next(w for w in map("".join, itertools.product("abcdefgh", repeat=n)) if split_of(w) == "test")] = None
    a, b, c = words
    return {a: ["AH B"], b: ["AH B K"], c: ["AH B", "AH B K D"]}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    import torch

    from service.engine.bundle import write_manifest
    from training.export import export_graphs
    from training.model import ModelConfig, Seq2Seq
    from training.quantize import write_int8_graph

    out = tmp_path_factory.mktemp("limits")
    corpus = out / "corpus.tsv"
    corpus.write_text("".join(f"{w}\t{r}\n" for w, refs in three_words().items() for r in refs))
    torch.manual_seed(0)
    export_graphs(Seq2Seq(ModelConfig(src_vocab_size=SRC_V, tgt_vocab_size=TGT_V, hidden_size=H, emb_dim=E,
                                      enc_layers=1, attention="additive", dropout=0.0)).eval(), out)
    for role in ("encoder", "decoder_step"):  # the int8 make quantize writes
        write_int8_graph(out / f"{role}.onnx", out / f"{role}.int8.onnx", role, "rowwise", encoder=out / "encoder.onnx",
                         scan=False)
    write_manifest(out, {"name": "tiny", "version": "1", "graphs": {
        "encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx",
        "encoder.int8": "encoder.int8.onnx", "decoder_step.int8": "decoder_step.int8.onnx"},
        "data": {"corpus": "tsv", "path": str(corpus), "src_tokens": "chars", "tgt_tokens": "words"}})
    return out


# By hand, per row of the batch (h = H/2 per encoder direction; S = 4 source letters):
ENC_PER_CHAR = 2 * (2 * (E + H // 2) * 4 * (H // 2)) + 2 * H * H  # biLSTM 2 directions + keys W_k: 1792 + 512
ENC_PER_SOURCE = 2 * H * H  # the decoder's initial state, decoder.init: 512
STEP_FIXED = (2 * ((E + H) + H) * 4 * H  # LSTM on [embed; feed]: 4864
              + 2 * H * H + 2 * 2 * H * H + 2 * H * TGT_V)  # W_q, linear_out over [context; query], generator
STEP_PER_S = 2 * H + 2 * H  # v . tanh(keys + q) and attn @ enc_out, at each source position: 64
S, L = 4.0, 8 / 3
# Decoder weights: embed, LSTM W and R, LSTM bias (8H), W_q + bias, v, linear_out, generator + bias.
DEC_MATRICES = [4 * H * (E + H), 4 * H * H, H * H, H, 2 * H * H, H * TGT_V]
DEC_FP32_ONLY = [TGT_V * E, 8 * H, H, TGT_V]  # embedding and biases
# int8 (training/rowwise_int8.py, rowwise_step.py): the LSTM's W for feed and R stacked (4H = 64 columns) in
# int8 with an fp32 scale per column, the embedding folded into W's embedding columns (an fp32 (TGT_V, 4H)
# table), its two biases summed; products of fewer than 64 columns (every other one here) stay fp32.
INT8_MATRICES = [4 * H * (H + H)]
INT8_FP32 = [4 * H, TGT_V * 4 * H, 4 * H, H * H, H, H, 2 * H * H, H * TGT_V, TGT_V]  # scales, table, bias, the rest
INT8_CONSTANTS = 64  # at most: the scalars of the quantization (1/127, a zero point, axes)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_graph_costs_match_a_count_by_hand(bundle, precision):
    c = limits.graph_costs(bundle, precision)
    assert (c["test_words"], c["mean_source_len"], c["steps_per_word"]) == (3, S, pytest.approx(L + 1))
    assert c["encoder_flops_per_char"] == ENC_PER_CHAR == 2304
    assert c["encoder_flops_per_source"] == ENC_PER_SOURCE
    assert c["decoder_step_flops"] == STEP_FIXED + STEP_PER_S * S == 6688 + 256
    assert c["flops_per_word"] == pytest.approx(ENC_PER_CHAR * S + ENC_PER_SOURCE + (STEP_FIXED + STEP_PER_S * S) * (L + 1))
    if precision == "fp32":
        weights = sum(DEC_MATRICES) * 4 + sum(DEC_FP32_ONLY) * 4
        assert c["decoder_weight_bytes_per_step"] == weights == 14268
    else:
        weights = sum(INT8_MATRICES) + sum(INT8_FP32) * 4
        assert weights == 2048 + 6628
        assert weights <= c["decoder_weight_bytes_per_step"] <= weights + INT8_CONSTANTS
    lstm = [(E + H, 4 * H), (H, 4 * H)] if precision == "fp32" else [(H + H, 4 * H)]  # [feed; h] in one product
    assert sorted(map(tuple, c["decoder_shapes"])) == sorted(lstm + [(H, H), (H, 1), (2 * H, H), (H, TGT_V)])


def test_ceilings_are_measured_numbers():
    shapes = [(128, 256), (256, 64)]
    r = limits.ceilings(shapes, threads=(1,), point_s=0.02, llc_bytes=1 << 20)  # a small "cache": few copies
    assert r["copies"]["fp32"] == {"llc": 2, "dram": 11} and r["copies"]["int8"] == {"llc": 10, "dram": 43}
    points = [r["onnxruntime"]["fp32"]["threads=1"], r["onnxruntime"]["int8"]["threads=1"],
              r["numpy"]["fp32"]["threads=1"]]
    for p in points:
        assert set(p) == {"gemm_gflops", "matvec_gbs_llc", "matvec_gbs_dram"}
        assert all(math.isfinite(v) and v > 0 for v in p.values()), p


def test_measure_divides_the_engine_by_costs_and_ceilings(bundle, monkeypatch):
    ceiling = {"gemm_gflops": 100.0, "matvec_gbs_llc": 50.0, "matvec_gbs_dram": 20.0}
    monkeypatch.setattr(limits, "ceilings", lambda shapes, threads, precisions, point_s: {
        "llc_bytes": 1 << 25, "shapes": shapes,
        "onnxruntime": {p: {f"threads={t}": ceiling for t in threads} for p in precisions}})
    engine = {"fp32/greedy-loop=onnx/batch=64": 1000.0, "fp32/greedy-loop=python/batch=1": 200.0}
    r = limits.measure(bundle, engine, engine_threads=1)
    assert list(r["precisions"]) == ["fp32"]
    fp32 = r["precisions"]["fp32"]
    c = fp32["costs"]
    assert fp32["batch64"]["fraction_of_gemm"] == pytest.approx(1000 * c["flops_per_word"] / 1e9 / 100)
    assert fp32["batch1"]["key"] == "fp32/greedy-loop=python/batch=1"
    gbs = 200 * (L + 1) * 14268 / 1e9
    assert fp32["batch1"]["fraction_of_matvec_dram"] == pytest.approx(gbs / 20)
    text = "\n".join(limits.lines(r))
    assert f"{gbs:.1f} GB/s" in text and "threads=1" in text
