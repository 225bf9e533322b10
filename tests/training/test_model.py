"""The PyTorch model: masking, attention normalisation and every score function."""
import itertools
import math

import pytest
import torch

from training import hard_attention
from training.model import ModelConfig, Seq2Seq, keep_top_k, reverse_padded


def tiny(cell="lstm", attention="general", bidirectional=True, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=12, tgt_vocab_size=9, cell=cell, attention=attention,
                      bidirectional=bidirectional, hidden_size=16, emb_dim=8, enc_layers=2, dropout=0.0, **kw)
    return Seq2Seq(cfg).eval()


def test_reverse_padded_reverses_within_each_length():
    x = torch.arange(8.0).view(2, 4, 1)
    out = reverse_padded(x, torch.tensor([4, 2]))
    assert out[0, :, 0].tolist() == [3, 2, 1, 0]
    assert out[1, :, 0].tolist() == [5, 4, 6, 7]  # padding stays in place
    assert torch.equal(reverse_padded(out, torch.tensor([4, 2])), x)


@pytest.mark.parametrize("attention", ["dot", "scaled_dot", "general", "additive", "cosine"])
@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_attention_ignores_padding_and_rows_sum_to_one(cell, attention):
    model = tiny(cell, attention)
    src = torch.tensor([[4, 5, 6, 7], [4, 5, 0, 0]])
    src_len = torch.tensor([4, 2])
    tokens, out_len, score, attn = model.greedy(src, src_len, max_len=6)
    assert not torch.isnan(attn).any() and torch.isfinite(score).all()
    assert torch.allclose(attn.sum(-1), torch.ones(attn.shape[:2]), atol=1e-5)
    assert attn[1, :, 2:].abs().max() == 0  # padding gets exactly zero weight


@pytest.mark.parametrize("kw", [{}, {"self_attention_heads": 4}, {"attention": "none", "context": "every_step"},
                                {"output": "mixture"}, {"output": "monotonic"}])
def test_padding_does_not_change_a_sequence_result(kw):
    """A word decodes the same alone and beside a longer word (bidirectional encoder and self-attention included)."""
    model = tiny(**kw)
    alone = model.greedy(torch.tensor([[4, 5]]), torch.tensor([2]), max_len=6)
    padded = model.greedy(torch.tensor([[4, 5, 0, 0], [6, 7, 8, 9]]), torch.tensor([2, 4]), max_len=6)
    n = int(alone[1][0])
    assert alone[0][0, :n].tolist() == padded[0][0, :n].tolist()
    assert torch.allclose(alone[2][0], padded[2][0], atol=1e-5)  # the score
    if alone[3] is not None:
        assert torch.allclose(alone[3][0, :n, :2], padded[3][0, :n, :2], atol=1e-5)


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="attention must be one of"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, attention="bogus")
    with pytest.raises(ValueError, match="hidden_size must be even"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, hidden_size=15)
    with pytest.raises(ValueError, match="context 'every_step' is for attention 'none'.*'general'"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, context="every_step")
    with pytest.raises(ValueError, match="context must be one of.*'always'"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, attention="none", context="always")
    with pytest.raises(ValueError, match="divide hidden_size .*got 3"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, self_attention_heads=3)
    with pytest.raises(ValueError, match="self_attention_heads needs attention"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, attention="none", self_attention_heads=2)
    with pytest.raises(ValueError, match="output must be one of.*'hard'"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, output="hard")
    with pytest.raises(ValueError, match="output 'mixture' .*needs attention"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, attention="none", output="mixture")
    with pytest.raises(ValueError, match="output 'monotonic' .*needs attention"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, attention="none", output="monotonic")


def test_scaled_dot_is_dot_over_sqrt_h():
    dot, scaled = tiny(attention="dot"), tiny(attention="scaled_dot")
    src, src_len = torch.tensor([[4, 5, 6]]), torch.tensor([3])
    assert torch.allclose(scaled.encode(src, src_len).keys, dot.encode(src, src_len).keys / 4.0)  # sqrt(16)


@pytest.mark.parametrize("context", ["init", "every_step"])
def test_models_without_attention_have_no_attention_matrix(context):
    model = tiny(attention="none", context=context)
    assert model.decoder.attention is None
    assert model.decoder.state_names == ["h", "c"] + (["feed"] if context == "every_step" else [])
    tokens, out_len, score, attn = model.greedy(torch.tensor([[4, 5, 6]]), torch.tensor([3]), max_len=5)
    assert attn is None and torch.isfinite(score).all()


def test_keep_top_k_soft_hard_and_top_k_per_row():
    attn = torch.tensor([[0.1, 0.6, 0.3, 0.0], [0.1, 0.6, 0.3, 0.0], [0.1, 0.6, 0.3, 0.0], [0.4, 0.4, 0.2, 0.0]])
    out = keep_top_k(attn, torch.tensor([0, 1, 2, 1]))
    assert torch.equal(out[0], attn[0])  # soft: unchanged, bit for bit
    assert out[1].tolist() == [0.0, 1.0, 0.0, 0.0]  # hard: one-hot on the argmax
    assert torch.allclose(out[2], torch.tensor([0.0, 2 / 3, 1 / 3, 0.0]))  # top-2, renormalised
    assert torch.allclose(out[3], torch.tensor([0.5, 0.5, 0.0, 0.0]))  # a tie at the top shares it
    assert keep_top_k(attn[:1], torch.tensor([9]))[0].tolist() == pytest.approx(attn[0].tolist())  # k > S: all


def test_mixture_output_mixes_one_distribution_per_source_position():
    """output "mixture": p(y) = sum_j attn_j p(y | h_j); hard attention (top_k 1) is the argmax position's
    own distribution, and teacher forcing returns log-probabilities, as a cross-entropy reads them."""
    model = tiny(output="mixture")
    d = model.decoder
    src, src_len = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]]), torch.tensor([4, 2])
    y = torch.full((2,), 1)
    with torch.no_grad():
        enc = model.encode(src, src_len)
        _, log_probs, attn = d.step(y, enc.state, enc.enc_out, enc.keys, enc.pad_mask)
        query = d.rnn(torch.cat([d.embed(y), enc.state.feed], -1)[:, None], (enc.state.h, enc.state.c))[0][:, 0]
        S = enc.enc_out.size(1)
        per_position = torch.softmax(d.generator(torch.tanh(d.attention.linear_out(
            torch.cat([enc.enc_out, query[:, None].expand(-1, S, -1)], -1)))), -1)  # (B, S, V)
        torch.testing.assert_close(log_probs.exp(), (attn[:, :, None] * per_position).sum(1))
        assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2), atol=1e-5)
        _, hard, one_hot = d.step(y, enc.state, enc.enc_out, enc.keys, enc.pad_mask, torch.tensor([1, 1]))
        j = attn.argmax(-1)
        torch.testing.assert_close(hard.exp(), per_position[torch.arange(2), j])
        assert one_hot.max(-1).values.tolist() == [1.0, 1.0]
        tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
        assert torch.allclose(model(src, src_len, tgt_in).exp().sum(-1), torch.ones(2, 3), atol=1e-5)


def test_monotonic_output_sums_exactly_over_the_alignments_that_never_move_back(monkeypatch):
    """output "monotonic": teacher forcing's log p(y) equals the sum, path by path, over every alignment
    a_1 <= ... <= a_T (from position 0) of prod_t T_t(a_{t-1} -> a_t) p_t(y_t | a_t), the moves
    T_t(i -> j) = softmax over j >= i of the step's scores; a padded source changes nothing."""
    model = tiny(output="monotonic")
    att = model.decoder.attention
    scores, per_position = [], []  # each step's (B, S) scores and (B, S, V) log p(y | position)
    score_fn, mix_fn = att.scores, hard_attention.mix
    att.scores = lambda *a: scores.append(score_fn(*a)) or scores[-1]
    monkeypatch.setattr(hard_attention, "mix", lambda *a: (lambda r: per_position.append(r[2]) or r)(mix_fn(*a)))
    src, src_len = torch.tensor([[4, 5, 6, 0, 0], [6, 7, 8, 9, 10]]), torch.tensor([3, 5])
    tgt_in, tgt_out = torch.tensor([[1, 4, 5, 6, 7], [1, 4, 4, 4, 4]]), torch.tensor([[4, 5, 6, 7, 2], [4, 4, 4, 4, 2]])
    with torch.no_grad():
        log_probs = model(src, src_len, tgt_in)  # (B, T, V)
    T = tgt_in.size(1)
    for b in range(2):
        S = int(src_len[b])
        paths = []
        for path in itertools.combinations_with_replacement(range(S), T):  # every non-decreasing sequence
            lp, i = torch.tensor(0.0), 0
            for t, j in enumerate(path):
                s = scores[t][b, :S]
                lp = lp + s[j] - torch.logsumexp(s[i:], 0) + per_position[t][b, j, tgt_out[b, t]]
                i = j
            paths.append(lp)
        total = log_probs[b].gather(1, tgt_out[b][:, None]).sum()
        torch.testing.assert_close(total, torch.logsumexp(torch.stack(paths), 0))
        assert len(paths) == math.comb(S + T - 1, T)
    with torch.no_grad():  # the first row alone: its padding in the batch above changed nothing
        alone = model(src[:1, :3], src_len[:1], tgt_in[:1])
    torch.testing.assert_close(alone[0], log_probs[0])


def test_monotonic_hard_attention_never_moves_back():
    """At inference, hard attention (top_k 1) commits to one position a step; the next step moves from it."""
    model = tiny(output="monotonic")
    src, src_len = torch.tensor([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0]]), torch.tensor([6, 3])
    _, out_len, _, attn = model.greedy(src, src_len, max_len=12, top_k=torch.tensor([1, 1]))
    for b in range(2):
        where = attn[b, :int(out_len[b])].argmax(-1).tolist()
        assert where == sorted(where) and attn[b, :int(out_len[b])].max(-1).values.tolist() == [1.0] * len(where)
        assert max(where) < int(src_len[b])
