"""Beam search against exhaustive search on a tiny real model."""
import itertools

import numpy as np
import pytest
import torch

from service.engine.beam import beam_search
from service.engine.bundle import load_bundle, write_manifest
from service.config import EngineConfig
from service.domain import DecodeOptions
from service.engine.engine import Engine
from training.data import Vocab
from training.export import export_graphs
from training.model import ModelConfig, Seq2Seq

EOS = 2
V = 5  # <pad> <s> </s> <unk> + one symbol: 4 live continuations per step, 4**2 = 16 beams keep every prefix
T = 3


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    torch.manual_seed(7)
    src_vocab = Vocab(list("abcd"))
    model = Seq2Seq(ModelConfig(src_vocab_size=len(src_vocab), tgt_vocab_size=V, hidden_size=8, emb_dim=4,
                                enc_layers=1, dropout=0.0)).eval()
    with torch.no_grad():  # a peaky output layer so hypotheses differ clearly in score
        model.decoder.generator.weight.mul_(8.0)
    path = tmp_path_factory.mktemp("beam")
    export_graphs(model, path)
    write_manifest(path, {"name": "b", "version": "1",
                          "graphs": {"encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx"},
                          "src_vocab": src_vocab.itos, "tgt_vocab": ["<pad>", "<s>", "</s>", "<unk>", "X"],
                          "special_ids": {"pad": 0, "bos": 1, "eos": EOS, "unk": 3},
                          "data": {"src_tokens": "chars", "tgt_tokens": "words"}})
    return Engine(load_bundle(path), EngineConfig(max_output_len=T))


def exhaustive(engine, tokens, alpha):
    """Score every output sequence of length <= T (ending in </s>, or cut at T) by running the graphs."""
    scored = []
    for length in range(1, T + 1):
        for seq in itertools.product(range(V), repeat=length):
            if EOS in seq[:-1] or (length < T and seq[-1] != EOS):
                continue
            run = engine.encode([tokens])
            log_prob = 0.0
            for tok in seq:
                log_probs, _, run = engine.step(run)
                log_prob += float(log_probs[0, tok])
                run.y_prev = np.array([tok])
            scored.append((log_prob / length ** alpha if alpha else log_prob, list(seq), log_prob))
    return sorted(scored, key=lambda s: -s[0])


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("word", ["a", "abcd", "dcba"])
def test_wide_beam_equals_exhaustive_search(engine, word, alpha):
    ref = exhaustive(engine, list(word), alpha)
    (hyps,) = beam_search(engine, [list(word)], DecodeOptions(beam_size=16, n_best=5, length_penalty_alpha=alpha))
    assert len(hyps) == 5
    for h, (rank, seq, log_prob) in zip(hyps, ref[:5]):
        ids = h.output_ids + ([EOS] if h.finished else [])
        assert ids == seq
        assert h.log_prob == pytest.approx(log_prob, abs=1e-4)
        assert h.score == pytest.approx(rank, abs=1e-4)


def test_each_hypothesis_has_its_own_attention(engine):
    (hyps,) = beam_search(engine, [list("abcd")], DecodeOptions(beam_size=4, n_best=4))
    for h in hyps:
        assert h.attn.shape == (len(h.output_ids) + h.finished, 4)
        assert np.allclose(h.attn.sum(axis=1), 1.0, atol=1e-5)
    # hypotheses that share no prefix have different attention histories
    assert any(not np.allclose(hyps[0].attn[-1], h.attn[-1]) for h in hyps[1:])


def test_sources_in_one_batch_do_not_interact(engine):
    words = [list("a"), list("abcd"), list("cc")]
    alone = beam_search(engine, [list("cc")], DecodeOptions(beam_size=3, n_best=3))[0]
    together = beam_search(engine, words, DecodeOptions(beam_size=3, n_best=3))[2]
    assert [h.output_ids for h in alone] == [h.output_ids for h in together]


@pytest.mark.parametrize("kw,message", [({"beam_size": 0}, "beam_size"), ({"beam_size": 17}, "beam_size"),
                                        ({"beam_size": 2, "n_best": 3}, "n_best"),
                                        ({"length_penalty_alpha": float("nan")}, "length_penalty_alpha")])
def test_bad_options_name_the_field(kw, message):
    with pytest.raises(ValueError, match=message):
        DecodeOptions(**kw)
