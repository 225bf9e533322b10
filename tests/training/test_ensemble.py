"""Ensembles: the members' mean distribution, exported to the usual two graphs with parity, served as is."""
import math

import grpc
import numpy as np
import pytest
import torch

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.engine.beam import beam_search
from service.engine.bundle import load_bundle
from service.config import BatcherConfig, Config, EngineConfig, ServerConfig
from service.domain import DecodeOptions
from service.engine.engine import Engine
from tests.live import serving
from training import train
from training.data import BOS_ID, Vocab
from training.ensemble import Ensemble, EnsembleConfig
from training.export import build_bundle, load_checkpoint, parity, parity_ok
from training.model import ModelConfig, Seq2Seq

MEMBERS = {  # two members unlike each other: sizes, encoders and score functions differ
    "a": ["--hidden-size", "16", "--attention", "general", "--bidirectional", "true", "--seed", "1"],
    "b": ["--hidden-size", "24", "--attention", "additive", "--bidirectional", "false", "--seed", "2"],
}


@pytest.fixture(scope="module")
def members(small_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ensemble")
    paths = []
    for name, flags in MEMBERS.items():
        train.main(["--corpus", "tsv", "--tsv", str(small_corpus), "--out", str(tmp / name), "--enc-layers", "1",
                    "--emb-dim", "8", "--batch-size", "64", "--max-epochs", "1", "--lr", "0.01", "--dropout", "0.0",
                    "--threads", "1", "--device", "cpu", *flags])
        paths.append(tmp / name / "best.pt")
    return paths


@pytest.fixture(scope="module")
def ensemble_bundle(members, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("models") / "ens"
    manifest = build_bundle(members, model_dir / "1", "ens", "1", parity_words=300,
                            save_checkpoint=saved_checkpoint(model_dir))
    return model_dir, manifest


def saved_checkpoint(model_dir):
    """Where the ensemble's checkpoint is kept: beside its model directory, not in the bundle."""
    return model_dir.parent / f"{model_dir.name}.pt"


def tiny(seed: int, hidden: int, attention: str, **kw) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(ModelConfig(src_vocab_size=12, tgt_vocab_size=9, hidden_size=hidden, emb_dim=6,
                               attention=attention, dropout=0.0, **kw)).eval()


@pytest.mark.parametrize("output_a,output_b", [("context", "context"), ("context", "mixture"),
                                               ("context", "monotonic"), ("monotonic", "context")])
def test_a_step_gives_the_members_mean_probability_and_mean_attention(output_a, output_b):
    a, b = tiny(0, 8, "dot", output=output_a), tiny(1, 12, "cosine", bidirectional=False, output=output_b)
    ens = Ensemble([a, b]).eval()
    src, src_len = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]]), torch.tensor([4, 2])
    y = torch.full((2,), BOS_ID)
    with torch.no_grad():
        enc = ens.encode(src, src_len)
        _, out, attn = ens.decoder.step(y, enc.state, enc.enc_out, enc.keys, enc.pad_mask)
        logp = ens.decoder.log_probs(out)
        probs, attns = [], []
        for m in (a, b):
            e = m.encode(src, src_len)
            _, o, at = m.decoder.step(y, e.state, e.enc_out, e.keys, e.pad_mask)
            probs.append(m.decoder.log_probs(o).exp())
            attns.append(at)
    assert enc.enc_out.shape == (2, 4, 8 + 12)
    torch.testing.assert_close(logp.exp(), (probs[0] + probs[1]) / 2)
    torch.testing.assert_close(attn, (attns[0] + attns[1]) / 2)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(2))


@pytest.mark.parametrize("output", ["context", "monotonic"])
def test_an_ensemble_of_copies_decodes_as_the_model_does(output):
    a = tiny(3, 10, "additive", output=output)  # monotonic: each member steps on its own slice of `align`
    src, src_len = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 11, 0, 0]]), torch.tensor([5, 3])
    tokens, out_len, score, attn = a.greedy(src, src_len, 7)
    e_tokens, e_len, e_score, e_attn = Ensemble([a, a]).greedy(src, src_len, 7)
    assert torch.equal(tokens, e_tokens) and torch.equal(out_len, e_len)
    torch.testing.assert_close(score, e_score)
    torch.testing.assert_close(attn, e_attn)


@pytest.mark.parametrize("kw,field", [(dict(dec_layers=2), "dec_layers"), (dict(cell="gru"), "cell"),
                                      (dict(tgt_vocab_size=10), "tgt_vocab_size")])
def test_members_that_cannot_share_a_state_are_refused_by_name(kw, field):
    base = dict(src_vocab_size=12, tgt_vocab_size=9)
    with pytest.raises(ValueError, match=field):
        EnsembleConfig((ModelConfig(**base), ModelConfig(**{**base, **kw})))
    with pytest.raises(ValueError, match="attention"):
        EnsembleConfig((ModelConfig(**base), ModelConfig(**base, attention="none")))
    with pytest.raises(ValueError, match="at least 2"):
        EnsembleConfig((ModelConfig(**base),))


def test_a_soft_and_a_monotonic_member_export_and_decode_as_one(members, small_corpus, tmp_path):
    # Only the monotonic member keeps an alignment state: `align` is its slice alone.
    train.main(["--corpus", "tsv", "--tsv", str(small_corpus), "--out", str(tmp_path / "mono"), "--enc-layers", "1",
                "--emb-dim", "8", "--batch-size", "64", "--max-epochs", "1", "--lr", "0.01", "--dropout", "0.0",
                "--threads", "1", "--device", "cpu", "--hidden-size", "16", "--output", "monotonic", "--seed", "3"])
    manifest = build_bundle([members[0], tmp_path / "mono" / "best.pt"], tmp_path / "m" / "1", "m", "1",
                            parity_words=200, save_checkpoint=tmp_path / "m.pt")
    assert parity_ok(manifest["parity"]) and manifest["parity"]["onnx_loop"]["words"] > 50
    assert [c["output"] for c in manifest["model_config"]["ensemble"]] == ["context", "monotonic"]
    model, _ = load_checkpoint(tmp_path / "m.pt")
    src, src_len = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]]), torch.tensor([4, 2])
    with torch.no_grad():
        enc = model.encode(src, src_len)
    V = manifest["model_config"]["ensemble"][1]["tgt_vocab_size"]
    assert enc.state.align.shape == (2, 4, 1 + V)


def test_members_trained_on_other_data_are_refused(members, tmp_path):
    other = torch.load(members[1], weights_only=False)
    other["data"] = {**other["data"], "split": "some other split"}
    torch.save(other, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="'data'"):
        build_bundle([members[0], tmp_path / "other.pt"], tmp_path / "m" / "1", "m", "1", parity_words=10)


def test_a_member_trained_on_a_teachers_outputs_is_accepted(members, tmp_path):
    # Same sources and split, other training targets (training/distill.py): its held-out words are still held out.
    student = torch.load(members[1], weights_only=False)
    student["data"] = {**student["data"], "train_targets": {"path": "t.tsv", "sha256": "0" * 64, "pairs": 1},
                       "pairs": {**student["data"]["pairs"], "train": 1}}
    torch.save(student, tmp_path / "student.pt")
    manifest = build_bundle([tmp_path / "student.pt", members[0]], tmp_path / "m" / "1", "m", "1", parity_words=10)
    assert parity_ok(manifest["parity"])
    # The ensemble's data is what its members share, not how its first member was trained.
    assert "train_targets" not in manifest["data"] and "train" not in manifest["data"]["pairs"]


def test_the_ensemble_bundle_passes_parity_and_describes_its_members(ensemble_bundle):
    _, manifest = ensemble_bundle
    assert parity_ok(manifest["parity"])
    assert manifest["parity"]["words"] == manifest["parity"]["onnx_loop"]["words"] > 50  # every dev word
    configs = manifest["model_config"]["ensemble"]
    assert [c["hidden_size"] for c in configs] == [16, 24]
    assert len(manifest["training"]["members"]) == 2
    assert manifest["has_attention"] and manifest["attention_modes"] == ["soft", "hard", "topk"]


def test_the_saved_checkpoint_rebuilds_the_ensemble(ensemble_bundle):
    model_dir, _ = ensemble_bundle
    assert not (model_dir / "1" / "checkpoint.pt").exists()  # a bundle is what serving reads, no weights
    model, ckpt = load_checkpoint(saved_checkpoint(model_dir))
    assert isinstance(model, Ensemble) and len(ckpt["members"]) == 2
    engine = Engine(load_bundle(model_dir), EngineConfig(max_output_len=12))
    same = parity(model, engine, [tuple("knight"), tuple("exit")], Vocab(ckpt["src_vocab"]), max_len=12)
    assert same["output_mismatches"] == 0


@pytest.mark.parametrize("loop", ["onnx", "python"])
def test_the_engine_runs_the_ensemble_greedy_and_beam(ensemble_bundle, loop):
    model_dir, _ = ensemble_bundle
    engine = Engine(load_bundle(model_dir), EngineConfig(max_output_len=12, greedy_loop=loop))
    words = [list("knight"), list("phoenix"), list("exit")]
    greedy = engine.decode(words)
    beams = beam_search(engine, words, DecodeOptions(beam_size=4, n_best=4))
    for g, hyps in zip(greedy, beams):
        assert g.attn.shape == (g.steps, len(g.src_tokens))
        np.testing.assert_allclose(g.attn.sum(-1), 1.0, atol=1e-5)
        assert hyps[0].log_prob >= g.log_prob - 1e-4  # beam search never finds worse than greedy here
        assert all(math.isfinite(h.log_prob) for h in hyps)


async def test_the_server_serves_an_ensemble_bundle(ensemble_bundle):
    model_dir, _ = ensemble_bundle
    cfg = Config(model_dir=model_dir, server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1),
                 batcher=BatcherConfig(mode="continuous"))
    async with serving(cfg) as server, grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pbg.TransducerStub(channel)
        info = await stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        reply = await stub.Transduce(pb.TransduceRequest(inputs=["knight", "exit"], options=pb.DecodeOptions(
            return_attention=True, beam_size=2, n_best=2)), timeout=20)
    assert info.has_attention and '"ensemble"' in info.config_json
    assert [len(r.alternatives) for r in reply.results] == [1, 1]  # n_best 2: the best, one alternative
    for r, word in zip(reply.results, ["knight", "exit"]):
        assert r.output_tokens and r.attention.cols == len(word)
        assert len(r.attention.weights) == r.attention.rows * len(word)


def test_training_does_not_continue_from_an_ensemble(small_corpus, ensemble_bundle, tmp_path):
    model_dir, _ = ensemble_bundle
    with pytest.raises(SystemExit, match="ensemble"):
        train.main(["--corpus", "tsv", "--tsv", str(small_corpus), "--out", str(tmp_path / "run"), "--device", "cpu",
                    "--init-from", str(saved_checkpoint(model_dir))])


def test_an_ensemble_bundle_re_exports_from_its_saved_checkpoint(ensemble_bundle, tmp_path):
    model_dir, manifest = ensemble_bundle
    again = build_bundle(saved_checkpoint(model_dir), tmp_path / "ens" / "2", "ens", "2", parity_words=50)
    assert parity_ok(again["parity"])
    assert again["model_config"] == manifest["model_config"]
    assert again["metrics"]["test"] == manifest["metrics"]["test"]


def test_held_out_data_ignores_how_many_training_sources_a_member_had():
    from training.ensemble import held_out_data

    data = {"corpus": "cmudict", "pairs": {"train": 10, "dev": 2, "test": 3}, "words": {"train": 9, "dev": 2, "test": 3}}
    more = {**data, "pairs": {"train": 14, "dev": 2, "test": 3}, "words": {"train": 13, "dev": 2, "test": 3},
            "train_targets": {"pairs": 14}}
    assert held_out_data(data) == held_out_data(more)
    assert held_out_data(data) != held_out_data({**data, "words": {"train": 9, "dev": 3, "test": 3}})


def test_members_read_the_same_hints_wherever_each_ones_copy_of_the_file_lay():
    from training.ensemble import check_members

    data = {"corpus": "tsv", "source_hints": {"path": "runs/q/seed1/hints.tsv", "sha256": "ab", "separator": "|",
                                              "words": 2}}
    moved = {**data, "source_hints": {**data["source_hints"], "path": "runs/q/seed2/hints.tsv"}}
    other = {**moved, "source_hints": {**moved["source_hints"], "sha256": "cd"}}
    ckpt = {"src_vocab": ["a"], "tgt_vocab": ["A"]}
    check_members([{**ckpt, "data": data}, {**ckpt, "data": moved}], ["seed1", "seed2"])
    with pytest.raises(ValueError, match="different 'data'"):
        check_members([{**ckpt, "data": data}, {**ckpt, "data": other}], ["seed1", "seed2"])
    assert data["source_hints"]["path"] == "runs/q/seed1/hints.tsv"  # the export still finds the file
