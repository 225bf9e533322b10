"""Export: parity with PyTorch, really dynamic axes, every variant, and the bundle hash check."""
import json
import shutil

import numpy as np
import pytest
import torch

from service.domain import BundleError
from service.engine.bundle import load_bundle
from service.config import EngineConfig
from service.engine.engine import Engine
from training.data import Vocab
from training.export import export_graphs, load_checkpoint, parity
from training.model import ModelConfig, Seq2Seq


def test_tiny_bundle_passes_parity_on_1000_dev_words(trained_bundle):
    manifest = load_bundle(trained_bundle).manifest
    par = manifest["parity"]
    assert par["words"] >= 1000
    assert par["output_mismatches"] == 0
    assert par["max_attn_abs_diff"] <= 1e-4
    assert set(manifest["metrics"]) >= {"dev", "test"}
    for key in ("src_vocab", "tgt_vocab", "special_ids", "model_config", "data", "opset", "versions", "files"):
        assert key in manifest, key


def test_the_committed_tiny_bundle_is_what_make_tiny_makes(trained_bundle, tiny_corpus):
    """tests/fixtures/make_tiny.py is the committed bundle's one source: the model trained here by its
    recipe has the committed one's configuration and corpus, and the committed one is in commit form."""
    import hashlib

    from tests.fixtures import make_tiny

    committed, fresh = load_bundle(make_tiny.FIXTURE).manifest, load_bundle(trained_bundle).manifest
    for key in ("model_config", "train_config", "src_vocab", "tgt_vocab", "special_ids", "graphs", "parameters"):
        assert committed[key] == fresh[key], key
    sha256 = hashlib.sha256(tiny_corpus.read_bytes()).hexdigest()
    assert committed["data"] == {**fresh["data"], "path": make_tiny.CORPUS_NAME, "sha256": sha256}
    assert set(committed["files"]) == {"encoder.onnx", "decoder_step.onnx"} and committed["created_unix"] == 0


@pytest.mark.parametrize("batch,length", [(1, 1), (2, 13), (37, 4), (5, 30)])
def test_axes_are_dynamic_at_sizes_unlike_the_export_example(tiny_checkpoint, trained_bundle, batch, length):
    model, ckpt = load_checkpoint(tiny_checkpoint)
    engine = Engine(load_bundle(trained_bundle), EngineConfig(max_output_len=12))
    rng = np.random.default_rng(batch * 100 + length)
    letters = ckpt["src_vocab"][4:]
    words = [list(rng.choice(letters, size=rng.integers(1, length + 1))) for _ in range(batch)]
    words[0] = list(rng.choice(letters, size=length))  # the longest row sets S
    result = parity(model, engine, [tuple(w) for w in words], Vocab(ckpt["src_vocab"]), max_len=12)
    assert result["output_mismatches"] == 0
    assert result["max_attn_abs_diff"] <= 1e-4


@pytest.mark.parametrize("cell,attention,bidirectional", [
    ("lstm", "dot", True), ("gru", "general", True), ("rnn", "additive", False), ("gru", "cosine", False),
    ("lstm", "additive", False)])
def test_every_variant_exports_with_parity(tmp_path, cell, attention, bidirectional):
    torch.manual_seed(0)
    src_vocab = Vocab(list("abcdefghij"))
    cfg = ModelConfig(src_vocab_size=len(src_vocab), tgt_vocab_size=11, cell=cell, attention=attention,
                      bidirectional=bidirectional, hidden_size=16, emb_dim=8, enc_layers=2, dec_layers=2,
                      dropout=0.0)
    model = Seq2Seq(cfg).eval()
    export_graphs(model, tmp_path)
    from service.engine.bundle import write_manifest

    write_manifest(tmp_path, {
        "name": "v", "version": "1", "graphs": {"encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx"},
        "src_vocab": src_vocab.itos, "tgt_vocab": [str(i) for i in range(11)],
        "special_ids": {"pad": 0, "bos": 1, "eos": 2, "unk": 3},
        "data": {"src_tokens": "chars", "tgt_tokens": "words"}})
    engine = Engine(load_bundle(tmp_path), EngineConfig(max_output_len=8))
    rng = np.random.default_rng(0)
    words = {tuple(rng.choice(list("abcdefghij"), size=rng.integers(1, 9))) for _ in range(60)}
    result = parity(model, engine, sorted(words), src_vocab, max_len=8)
    assert result == {"words": len(words), "output_mismatches": 0, "max_attn_abs_diff": result["max_attn_abs_diff"]}
    assert result["max_attn_abs_diff"] <= 1e-4


def test_bundle_with_a_modified_file_is_refused(tiny_bundle, tmp_path):
    copy = tmp_path / "tiny" / "1"
    shutil.copytree(load_bundle(tiny_bundle).path, copy)
    data = bytearray((copy / "decoder_step.onnx").read_bytes())
    data[-1] ^= 0xFF
    (copy / "decoder_step.onnx").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="sha256 mismatch for 'decoder_step.onnx'"):
        load_bundle(copy)


def test_bundle_with_a_missing_file_or_manifest_is_refused(tiny_bundle, tmp_path):
    copy = tmp_path / "m" / "1"
    shutil.copytree(load_bundle(tiny_bundle).path, copy)
    (copy / "encoder.onnx").unlink()
    with pytest.raises(BundleError, match="'encoder.onnx' listed in the manifest is missing"):
        load_bundle(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(BundleError, match="no manifest.json"):
        load_bundle(copy)


def test_latest_version_is_served_by_default(tiny_bundle, tmp_path):
    root = tmp_path / "tiny"
    shutil.copytree(load_bundle(tiny_bundle).path, root / "2")
    shutil.copytree(load_bundle(tiny_bundle).path, root / "10")
    m = json.loads((root / "10" / "manifest.json").read_text())
    assert load_bundle(root).path.name == "10" and m["version"] == "1"


def test_a_gru_decoder_without_attention_exports_with_its_input_projection_folded_into_a_table(tmp_path):
    """g2p-en's architecture: the step graph has no GRU op, only the table lookup and h's product,
    and its log-probabilities and states equal nn.GRU's."""
    import onnx

    from training.export import DecoderStepGraph, FoldedGRUStep
    from training.model import DecoderState

    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=13, tgt_vocab_size=11, cell="gru", attention="none", context="init",
                      bidirectional=False, hidden_size=16, emb_dim=8, enc_layers=1, dec_layers=1, dropout=0.0)
    model = Seq2Seq(cfg).eval()
    assert FoldedGRUStep.applies(model)
    y, h = torch.randint(0, 11, (5,)), torch.randn(1, 5, 16)  # (B,), (1, B, H)
    with torch.no_grad():
        folded = FoldedGRUStep(model.decoder)(y, h)
        state, out, _ = model.decoder.step(y, DecoderState(h, None, None))
        plain = DecoderStepGraph(model)(y, h)
    assert torch.allclose(folded[0], model.decoder.log_probs(out), atol=1e-5)
    assert torch.allclose(folded[1], state.h, atol=1e-6) and torch.allclose(folded[0], plain[0], atol=1e-5)
    export_graphs(model, tmp_path)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "decoder_step.onnx")).graph.node}
    assert "GRU" not in ops and "Gather" in ops
    for other in (dict(attention="general", context="init"), dict(attention="none", context="every_step"),
                  dict(attention="none", context="init", cell="lstm"), dict(attention="none", dec_layers=2)):
        assert not FoldedGRUStep.applies(Seq2Seq(ModelConfig(**{**cfg.to_dict(), **other})))
