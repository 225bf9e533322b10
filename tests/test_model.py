"""The PyTorch model: masking, attention normalisation and every score function."""
import pytest
import torch

from training.model import ModelConfig, Seq2Seq, reverse_padded


def tiny(cell="lstm", attention="general", bidirectional=True):
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=12, tgt_vocab_size=9, cell=cell, attention=attention,
                      bidirectional=bidirectional, hidden_size=16, emb_dim=8, enc_layers=2, dropout=0.0)
    return Seq2Seq(cfg).eval()


def test_reverse_padded_reverses_within_each_length():
    x = torch.arange(8.0).view(2, 4, 1)
    out = reverse_padded(x, torch.tensor([4, 2]))
    assert out[0, :, 0].tolist() == [3, 2, 1, 0]
    assert out[1, :, 0].tolist() == [5, 4, 6, 7]  # padding stays in place
    assert torch.equal(reverse_padded(out, torch.tensor([4, 2])), x)


@pytest.mark.parametrize("attention", ["dot", "general", "additive", "cosine"])
@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_attention_ignores_padding_and_rows_sum_to_one(cell, attention):
    model = tiny(cell, attention)
    src = torch.tensor([[4, 5, 6, 7], [4, 5, 0, 0]])
    src_len = torch.tensor([4, 2])
    tokens, out_len, score, attn = model.greedy(src, src_len, max_len=6)
    assert not torch.isnan(attn).any() and torch.isfinite(score).all()
    assert torch.allclose(attn.sum(-1), torch.ones(attn.shape[:2]), atol=1e-5)
    assert attn[1, :, 2:].abs().max() == 0  # padding gets exactly zero weight


def test_padding_does_not_change_a_sequence_result():
    """A word decodes the same alone and beside a longer word (bidirectional encoder included)."""
    model = tiny()
    alone = model.greedy(torch.tensor([[4, 5]]), torch.tensor([2]), max_len=6)
    padded = model.greedy(torch.tensor([[4, 5, 0, 0], [6, 7, 8, 9]]), torch.tensor([2, 4]), max_len=6)
    n = int(alone[1][0])
    assert alone[0][0, :n].tolist() == padded[0][0, :n].tolist()
    assert torch.allclose(alone[3][0, :n, :2], padded[3][0, :n, :2], atol=1e-5)


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="attention must be one of"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, attention="bogus")
    with pytest.raises(ValueError, match="hidden_size must be even"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, hidden_size=15)
