"""Members of one shape stepped as one (training/stacked.py): the same step as stepping each member in
turn, exported with parity, one answer per word alone or in a batch, and a step graph of about one
member's size."""
import collections
import itertools

import numpy as np
import onnx
import pytest
import torch

from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
from training import train
from training.data import BOS_ID
from training.ensemble import Ensemble, EnsembleDecoder
from training.export import build_bundle, parity_ok
from training.model import ModelConfig, Seq2Seq
from training.stacked import StackedDecoder, stackable


def tiny(seed: int, **kw) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(ModelConfig(**{"src_vocab_size": 12, "tgt_vocab_size": 9, "hidden_size": 8, "emb_dim": 6,
                                  "dropout": 0.0, **kw})).eval()


def test_members_of_one_shape_stack_and_others_do_not():
    base = ModelConfig(src_vocab_size=12, tgt_vocab_size=9)
    assert stackable((base, ModelConfig(src_vocab_size=12, tgt_vocab_size=9, dropout=0.5)))  # dropout: training only
    assert not stackable((base, ModelConfig(src_vocab_size=12, tgt_vocab_size=9, hidden_size=128)))
    assert isinstance(Ensemble([tiny(0), tiny(1, dropout=0.3)]).decoder, StackedDecoder)
    assert isinstance(Ensemble([tiny(0), tiny(1, hidden_size=10)]).decoder, EnsembleDecoder)


@pytest.mark.parametrize("cell,output", list(itertools.product(["lstm", "gru", "rnn"], ["context", "mixture", "monotonic"])))
def test_the_stacked_encoder_and_step_are_the_members_in_turn(cell, output):
    src, src_len = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 11, 0, 0], [4, 4, 0, 0, 0]]), torch.tensor([5, 3, 2])
    cases = zip(itertools.product(["dot", "general", "additive", "cosine"], [1, 2]),
                itertools.cycle([True, False, False]), itertools.cycle([0, 0, 0, 2]))
    for (attention, layers), bidirectional, heads in cases:  # self-attention: the members' encoders in turn
        members = [tiny(seed, cell=cell, output=output, attention=attention, dec_layers=layers, enc_layers=layers,
                        bidirectional=bidirectional, self_attention_heads=heads) for seed in range(3)]
        ens = Ensemble(members).eval()
        in_turn = EnsembleDecoder([m.decoder for m in members])
        with torch.no_grad():
            enc = ens.encode(src, src_len)
            turn = Ensemble(members).eval()
            turn.stacked_encoder = None  # each member's encoder in turn, its results side by side
            for name, a, b in zip(enc._fields, enc, turn.encode(src, src_len)):
                for x, y in zip(a if name == "state" else [a], b if name == "state" else [b]):
                    assert (x is None) == (y is None), name
                    if x is not None:
                        torch.testing.assert_close(x, y, msg=name)
            stacked_state = turn_state = enc.state
            y = torch.full((3,), BOS_ID)
            for _ in range(4):  # a few steps, so the state each returns is read back
                for top_k in (None, torch.tensor([0, 1, 2])):  # soft; and per row soft, hard, top-2
                    s_state, s_log_probs, s_attn = ens.decoder.step(y, stacked_state, enc.enc_out, enc.keys,
                                                                   enc.pad_mask, top_k)
                    t_state, t_out, t_attn = in_turn.step(y, turn_state, enc.enc_out, enc.keys, enc.pad_mask, top_k)
                    torch.testing.assert_close(s_log_probs, in_turn.log_probs(t_out))
                    torch.testing.assert_close(s_attn, t_attn)
                    for name, a, b in zip(t_state._fields, s_state, t_state):
                        assert (a is None) == (b is None), name
                        if a is not None:
                            torch.testing.assert_close(a, b, msg=name)
                stacked_state, turn_state = s_state, t_state
                y = s_log_probs.argmax(-1)


@pytest.fixture(scope="module")
def stacked_bundles(small_corpus, tmp_path_factory):
    """Two members of the low recipe's shape (monotonic output), one at another dropout; the three of them
    with the first twice; and the first alone."""
    tmp = tmp_path_factory.mktemp("stacked")
    paths = []
    for seed, dropout in ((1, "0.0"), (2, "0.3")):
        train.main(["--corpus", "tsv", "--tsv", str(small_corpus), "--out", str(tmp / f"s{seed}"), "--hidden-size",
                    "16", "--enc-layers", "1", "--emb-dim", "8", "--batch-size", "64", "--max-epochs", "1",
                    "--lr", "0.01", "--dropout", dropout, "--output", "monotonic", "--threads", "1", "--device",
                    "cpu", "--seed", str(seed)])
        paths.append(tmp / f"s{seed}" / "best.pt")
    ensemble = build_bundle(paths, tmp / "ens" / "1", "ens", "1", parity_words=300)
    build_bundle(paths + paths[:1], tmp / "ens3" / "1", "ens3", "1", parity_words=10)
    build_bundle(paths[0], tmp / "one" / "1", "one", "1", parity_words=10)
    return tmp, ensemble


def computing_nodes(path) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node if n.op_type != "Constant")


def test_a_stacked_ensemble_exports_with_parity_and_a_step_that_does_not_grow_with_its_members(stacked_bundles):
    tmp, ensemble = stacked_bundles
    assert parity_ok(ensemble["parity"]) and ensemble["parity"]["words"] > 50
    one_manifest = load_bundle(tmp / "one").manifest
    assert ensemble["parameters"] == 2 * one_manifest["parameters"]  # the members', not their repacked copies too
    two, three, one = (computing_nodes(tmp / name / "1" / "decoder_step.onnx") for name in ("ens", "ens3", "one"))
    assert two == three  # the same graph, with larger weights
    assert two["MatMul"] <= one["MatMul"] + 2  # batched products (the cell's two among them), not a set per member


def test_a_stacked_ensemble_gives_a_word_one_answer_alone_or_in_a_batch(stacked_bundles):
    tmp, _ = stacked_bundles
    engine = Engine(load_bundle(tmp / "ens"), EngineConfig(max_output_len=16))
    words = [list(w) for w in ("knight", "phoenix", "exit", "a", "onomatopoeia", "rhythm", "queue", "x")]
    batched = engine.decode(words)
    for word, together in zip(words, batched):
        alone = engine.decode([word])[0]
        assert alone.output_ids == together.output_ids, word
        assert abs(alone.log_prob - together.log_prob) <= 1e-4, word
        np.testing.assert_allclose(alone.attn, together.attn, atol=1e-5)


def test_a_stacked_ensembles_int8_step_takes_each_members_product_on_its_own_weights(stacked_bundles, tmp_path):
    """Per-row int8 of a stacked step: one product per member on a 2-D weight (a batched 3-D weight is read
    whole at every call), and still one answer per word alone or in a batch."""
    import shutil

    from training.quantize import quantize_bundle

    tmp, _ = stacked_bundles
    path = tmp_path / "ens3" / "1"
    shutil.copytree(tmp / "ens3" / "1", path)
    manifest = quantize_bundle(path)
    step = onnx.load(path / manifest["graphs"]["decoder_step.int8"])
    weights = {t.name: list(t.dims) for t in step.graph.initializer}
    products = [n for n in step.graph.node if n.op_type == "MatMulIntegerToFloat"]
    assert len(products) >= 3 and all(len(weights[n.input[1]]) == 2 for n in products)
    assert not any(n.op_type == "MatMul" and len(weights.get(n.input[1], ())) == 3 and weights[n.input[1]][-1] >= 64
                   for n in step.graph.node)  # narrower products stay fp32 (rowwise_int8.MIN_COLUMNS)
    assert manifest["int8"]["batch_independence"]["independent"] is True
    fp32, int8 = (Engine(load_bundle(path), EngineConfig(max_output_len=16, precision=p)) for p in ("fp32", "int8"))
    words = [list(w) for w in ("knight", "phoenix", "exit", "a", "onomatopoeia", "rhythm", "queue", "x")]
    assert sum(a.output_ids == b.output_ids for a, b in zip(fp32.decode(words), int8.decode(words))) >= 6
