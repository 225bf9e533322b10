"""RNN encoder-decoder with global (Luong) attention and input feeding.

Read top to bottom: config -> encoder -> attention -> decoder -> seq2seq.
Names follow the whole project: `src` (B, S) token ids, `src_len` (B,),
`enc_out` (B, S, H), `keys` (B, S, H) the per-source precomputed attention keys,
`pad_mask` (B, S) True where `src` is padding, `attn` (B, S) or (B, T, S).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from training.data import BOS_ID, EOS_ID, PAD_ID

CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}
SCORES = ("dot", "general", "additive", "cosine")
# Padding scores: large and finite, so a row of all padding can never make NaN.
MASKED_SCORE = -1e9


@dataclass(frozen=True)
class ModelConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    cell: str = "lstm"  # rnn | gru | lstm
    bidirectional: bool = True
    enc_layers: int = 2
    dec_layers: int = 1
    emb_dim: int = 64
    hidden_size: int = 256  # encoder output size (both directions together) = decoder size
    attention: str = "general"  # dot | general | additive | cosine
    dropout: float = 0.2

    def __post_init__(self):
        if self.cell not in CELLS:
            raise ValueError(f"cell must be one of {sorted(CELLS)}, got {self.cell!r}")
        if self.attention not in SCORES:
            raise ValueError(f"attention must be one of {SCORES}, got {self.attention!r}")
        for name in ("src_vocab_size", "tgt_vocab_size", "enc_layers", "dec_layers", "emb_dim", "hidden_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.bidirectional and self.hidden_size % 2:
            raise ValueError(f"hidden_size must be even for a bidirectional encoder, got {self.hidden_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return asdict(self)


class DecoderState(NamedTuple):
    h: torch.Tensor  # (L, B, H) decoder RNN hidden state
    c: Optional[torch.Tensor]  # (L, B, H) LSTM cell state; None for rnn/gru
    feed: torch.Tensor  # (B, H) attentional hidden of the previous step (input feeding)


def reverse_padded(x: torch.Tensor, src_len: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence within its own length, leaving padding in place.

    Used instead of pack_padded_sequence, which does not export to ONNX: the
    backward RNN then starts at each sequence's last real token, never at padding.
    The permutation is its own inverse.
    """
    S = x.size(1)
    t = torch.arange(S, device=x.device)[None, :]  # (1, S)
    length = src_len[:, None]  # (B, 1)
    index = torch.where(t < length, length - 1 - t, t)  # (B, S)
    return x.gather(1, index[:, :, None].expand(-1, -1, x.size(2)))


class Encoder(nn.Module):
    """Embedding and a stack of (bi)directional RNN layers, one layer at a time."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        rnn = CELLS[cfg.cell]
        dir_size = cfg.hidden_size // 2 if cfg.bidirectional else cfg.hidden_size
        sizes = [cfg.emb_dim] + [cfg.hidden_size] * (cfg.enc_layers - 1)
        self.embed = nn.Embedding(cfg.src_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.fwd = nn.ModuleList(rnn(n, dir_size, batch_first=True) for n in sizes)
        self.bwd = nn.ModuleList(rnn(n, dir_size, batch_first=True) for n in sizes) if cfg.bidirectional else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, src: torch.Tensor, src_len: torch.Tensor):
        x = self.dropout(self.embed(src))  # (B, S, E)
        for i, fwd in enumerate(self.fwd):
            if i > 0:
                x = self.dropout(x)
            out, _ = fwd(x)  # (B, S, H/dirs)
            if self.bwd is not None:
                back, _ = self.bwd[i](reverse_padded(x, src_len))
                out = torch.cat([out, reverse_padded(back, src_len)], dim=-1)  # (B, S, H)
            x = out
        enc_out = x  # (B, S, H)
        # Summary for the decoder's initial state: the forward RNN at the last real
        # token (and the backward RNN at the first, where it finished).
        last = (src_len - 1)[:, None, None].expand(-1, 1, enc_out.size(2))  # (B, 1, H)
        summary = enc_out.gather(1, last).squeeze(1)  # (B, H)
        if self.bwd is not None:
            half = enc_out.size(2) // 2
            summary = torch.cat([summary[:, :half], enc_out[:, 0, half:]], dim=-1)  # (B, H)
        return enc_out, summary


class GlobalAttention(nn.Module):
    """Luong et al. (2015) global attention; additive is Bahdanau et al. (2015).

        dot:      score(h_t, h_s) = h_t . h_s
        general:  score(h_t, h_s) = h_t . (W_a h_s)
        additive: score(h_t, h_s) = v . tanh(W_q h_t + W_k h_s)
        cosine:   score(h_t, h_s) = scale * cos(h_t, h_s)     (learned scale)
        attn = softmax(score) over unmasked source positions
        attn_h = tanh(W_c [context; h_t])

    The parts that depend only on the source (W_a h_s, W_k h_s, h_s / |h_s|) are
    computed once per source by `keys()`, not at every decoder step.
    """

    def __init__(self, hidden_size: int, score: str):
        super().__init__()
        self.score = score
        if score == "general":
            self.W_a = nn.Linear(hidden_size, hidden_size, bias=False)
        elif score == "additive":
            self.W_k = nn.Linear(hidden_size, hidden_size, bias=False)
            self.W_q = nn.Linear(hidden_size, hidden_size)
            self.v = nn.Linear(hidden_size, 1, bias=False)
        elif score == "cosine":
            # cos lies in [-1, 1]: without a temperature the softmax stays nearly flat.
            self.log_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.linear_out = nn.Linear(2 * hidden_size, hidden_size, bias=False)

    def keys(self, enc_out: torch.Tensor) -> torch.Tensor:
        if self.score == "general":
            return self.W_a(enc_out)  # (B, S, H)
        if self.score == "additive":
            return self.W_k(enc_out)  # (B, S, H)
        if self.score == "cosine":
            return F.normalize(enc_out, dim=-1)  # (B, S, H)
        return enc_out  # dot

    def forward(self, query, enc_out, keys, pad_mask):
        # query (B, H), enc_out/keys (B, S, H), pad_mask (B, S) True at padding
        if self.score == "additive":
            scores = self.v(torch.tanh(keys + self.W_q(query)[:, None, :])).squeeze(2)  # (B, S)
        elif self.score == "cosine":
            q = F.normalize(query, dim=-1)
            scores = self.log_scale.exp() * torch.bmm(keys, q[:, :, None]).squeeze(2)  # (B, S)
        else:
            scores = torch.bmm(keys, query[:, :, None]).squeeze(2)  # (B, S)
        scores = scores.masked_fill(pad_mask, MASKED_SCORE)
        attn = torch.softmax(scores, dim=-1)  # (B, S)
        context = torch.bmm(attn[:, None, :], enc_out).squeeze(1)  # (B, H)
        attn_h = torch.tanh(self.linear_out(torch.cat([context, query], dim=-1)))  # (B, H)
        return attn_h, attn


class Decoder(nn.Module):
    """One step: [embed(y_prev); feed] -> RNN -> attention -> attn_h (the next feed)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H = cfg.hidden_size
        self.embed = nn.Embedding(cfg.tgt_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.rnn = CELLS[cfg.cell](cfg.emb_dim + H, H, num_layers=cfg.dec_layers, batch_first=True,
                                   dropout=cfg.dropout if cfg.dec_layers > 1 else 0.0)
        self.init = nn.Linear(H, cfg.dec_layers * H)
        self.attention = GlobalAttention(H, cfg.attention)
        self.dropout = nn.Dropout(cfg.dropout)
        self.generator = nn.Linear(H, cfg.tgt_vocab_size)
        self.is_lstm = cfg.cell == "lstm"

    def init_state(self, summary: torch.Tensor) -> DecoderState:
        B, H = summary.shape
        h = torch.tanh(self.init(summary)).view(B, -1, H).transpose(0, 1).contiguous()  # (L, B, H)
        c = torch.zeros_like(h) if self.is_lstm else None
        return DecoderState(h, c, torch.zeros_like(summary))

    def step(self, y_prev, state: DecoderState, enc_out, keys, pad_mask):
        # y_prev (B,) token ids of the previous output
        x = torch.cat([self.dropout(self.embed(y_prev)), state.feed], dim=-1)[:, None, :]  # (B, 1, E+H)
        if self.is_lstm:
            out, (h, c) = self.rnn(x, (state.h, state.c))
        else:
            (out, h), c = self.rnn(x, state.h), None
        attn_h, attn = self.attention(out[:, 0], enc_out, keys, pad_mask)  # (B, H), (B, S)
        return DecoderState(h, c, attn_h), attn

    def log_probs(self, feed: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.generator(self.dropout(feed)), dim=-1)  # (B, V)


class Seq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def encode(self, src, src_len):
        S = src.size(1)
        pad_mask = torch.arange(S, device=src.device)[None, :] >= src_len[:, None]  # (B, S)
        enc_out, summary = self.encoder(src, src_len)
        keys = self.decoder.attention.keys(enc_out)
        return enc_out, keys, pad_mask, self.decoder.init_state(summary)

    def forward(self, src, src_len, tgt_in):
        """Teacher forcing: logits (B, T, V) for tgt_in (B, T), which starts with <s>."""
        enc_out, keys, pad_mask, state = self.encode(src, src_len)
        feeds = []
        for t in range(tgt_in.size(1)):
            state, _ = self.decoder.step(tgt_in[:, t], state, enc_out, keys, pad_mask)
            feeds.append(state.feed)
        feeds = self.decoder.dropout(torch.stack(feeds, dim=1))  # (B, T, H)
        return self.decoder.generator(feeds)  # (B, T, V)

    @torch.no_grad()
    def greedy(self, src, src_len, max_len: int):
        """Greedy decoding, the PyTorch reference for the ONNX engine.

        Returns tokens (B, T) padded with PAD after </s>, out_len (B,) counting
        </s>, score (B,) the summed log-probability, attn (B, T, S).
        """
        B = src.size(0)
        enc_out, keys, pad_mask, state = self.encode(src, src_len)
        y = torch.full((B,), BOS_ID, dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        score = torch.zeros(B)
        out_len = torch.zeros(B, dtype=torch.long)
        tokens, attns = [], []
        for _ in range(max_len):
            state, attn = self.decoder.step(y, state, enc_out, keys, pad_mask)
            logp, y = self.decoder.log_probs(state.feed).max(dim=-1)  # (B,), (B,)
            score += torch.where(done, 0.0, logp)
            out_len += ~done
            tokens.append(torch.where(done, PAD_ID, y))
            attns.append(attn)
            done |= y == EOS_ID
            if bool(done.all()):
                break
        tokens = torch.stack(tokens, dim=1)  # (B, T)
        return tokens, out_len, score, torch.stack(attns, dim=1)  # attn (B, T, S)
