"""RNN encoder-decoder with global (Luong) attention and input feeding, and its baselines.

Read top to bottom: config -> encoder (with optional self-attention) -> attention
-> decoder -> seq2seq. Names follow the whole project: `src` (B, S) token ids,
`src_len` (B,), `enc_out` (B, S, H), `keys` (B, S, H) the per-source precomputed
attention keys ((B, S, 2H) for the outputs that read each position), `pad_mask` (B, S) True where `src` is padding, `attn` (B, S) or
(B, T, S), `self_attn` (B, heads, S, S), `top_k` (B,) the inference-time attention
mode of each row (0 soft, 1 hard, k top-k), `align` (B, S, 1 + V) the monotonic
output's alignment state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnserve.config import setting
from training import hard_attention
from training.data import BOS_ID, EOS_ID, PAD_ID
from training.hard_attention import MASKED_SCORE, keep_top_k

CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}
SCORES = ("dot", "scaled_dot", "general", "additive", "cosine")
ATTENTIONS = SCORES + ("none",)
# Without attention, where the decoder sees the source: only through its initial state
# (Sutskever et al. 2014), or also as a fixed context fed at every step (Cho et al. 2014).
CONTEXTS = ("init", "every_step")
OUTPUTS = ("context", "mixture", "monotonic")


@dataclass(frozen=True)
class ModelConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    cell: str = setting("lstm", "the recurrent cell of encoder and decoder", choices=tuple(CELLS))
    bidirectional: bool = setting(True, "a bidirectional encoder")
    enc_layers: int = setting(2, "encoder layers")
    dec_layers: int = setting(1, "decoder layers")
    emb_dim: int = setting(64, "embedding size of source and target tokens")
    hidden_size: int = setting(256, "encoder output size (both directions together) = decoder size")
    attention: str = setting("general", "the attention score; none: no attention", choices=ATTENTIONS)
    context: str = setting("init", "attention none only: where the decoder sees the source, through its initial "
                           "state only (init) or also as a fixed context fed at every step", choices=CONTEXTS)
    self_attention_heads: int = setting(0, "multi-head self-attention over the encoder states; 0 = off")
    output: str = setting(
        "context", "the output distribution: context reads one attentional vector made from the weighted sum of "
        "the source states (Luong et al. 2015); mixture mixes one distribution per source position by the "
        "attention weights, i.e. hard attention marginalized exactly (Wu et al. 2018, 0th order); monotonic mixes "
        "them too, by an alignment that only moves forward (Wu and Cotterell 2019, 1st order)", choices=OUTPUTS)
    dropout: float = setting(0.2, "dropout probability")

    def __post_init__(self):
        if self.cell not in CELLS:
            raise ValueError(f"cell must be one of {sorted(CELLS)}, got {self.cell!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        if self.output != "context" and self.attention == "none":
            raise ValueError(f"output {self.output!r} mixes over the attention weights: it needs attention, got 'none'")
        if self.context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {self.context!r}")
        if self.context != "init" and self.attention != "none":
            raise ValueError(f"context {self.context!r} is for attention 'none' (an attention model's context "
                             f"is its attention), got attention {self.attention!r}")
        for name in ("src_vocab_size", "tgt_vocab_size", "enc_layers", "dec_layers", "emb_dim", "hidden_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.bidirectional and self.hidden_size % 2:
            raise ValueError(f"hidden_size must be even for a bidirectional encoder, got {self.hidden_size}")
        if self.self_attention_heads and self.attention == "none":
            raise ValueError(f"self_attention_heads needs attention: without it the decoder reads only the summary, "
                             f"taken before self-attention; got {self.self_attention_heads} with attention 'none'")
        if self.self_attention_heads < 0 or (self.self_attention_heads
                                             and self.hidden_size % self.self_attention_heads):
            raise ValueError(f"self_attention_heads must be >= 0 and divide hidden_size ({self.hidden_size}), "
                             f"got {self.self_attention_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return asdict(self)


class DecoderState(NamedTuple):
    h: torch.Tensor  # (L, B, H) decoder RNN hidden state
    c: Optional[torch.Tensor]  # (L, B, H) LSTM cell state; None for rnn/gru
    feed: Optional[torch.Tensor]  # (B, H) what the next step reads beside its input token; see Decoder
    align: Optional[torch.Tensor] = None  # (B, S, 1 + V) output "monotonic" only; see hard_attention.monotonic


class Encoded(NamedTuple):
    """Everything per source that the decoder steps read, computed once."""

    enc_out: torch.Tensor  # (B, S, H)
    keys: Optional[torch.Tensor]  # (B, S, H); None without attention
    pad_mask: torch.Tensor  # (B, S) True at padding
    state: DecoderState  # the decoder's initial state
    self_attn: Optional[torch.Tensor]  # (B, heads, S, S); None without self-attention


def reverse_padded(x: torch.Tensor, src_len: torch.Tensor, index: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Reverse each sequence within its own length, leaving padding in place.

    Used instead of pack_padded_sequence, which does not export to ONNX: the
    backward RNN then starts at each sequence's last real token, never at padding.
    The permutation is its own inverse. `index`: reversal_index's, where several tensors share it.
    """
    index = reversal_index(src_len, x.size(1)) if index is None else index  # (B, S)
    return x.gather(1, index[:, :, None].expand_as(x))


def reversal_index(src_len: torch.Tensor, S) -> torch.Tensor:
    """(B, S): where each position of a sequence reversed within its length reads from."""
    t = torch.arange(S, device=src_len.device)[None, :]  # (1, S)
    length = src_len[:, None]  # (B, 1)
    return torch.where(t < length, length - 1 - t, t)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017), post-norm:

        q, k, v = x W_q, x W_k, x W_v             split into `heads` heads of size d = H / heads
        self_attn = softmax(q k^T / sqrt(d))      over the unpadded keys, (B, heads, S, S)
        out = LayerNorm(x + dropout(concat(self_attn v) W_o))

    The RNN already orders the states; this lets each see every other one directly.
    """

    def __init__(self, hidden_size: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.head_dim = heads, hidden_size // heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor):
        B, S, H = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=2)  # (B, S, H) each
        q, k, v = (t.reshape(B, S, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (B, h, S, d)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, h, S, S)
        scores = scores.masked_fill(pad_mask[:, None, None, :], MASKED_SCORE)
        self_attn = torch.softmax(scores, dim=-1)  # (B, h, S, S)
        y = (self_attn @ v).transpose(1, 2).reshape(B, S, H)  # (B, S, H)
        return self.norm(x + self.dropout(self.proj(y))), self_attn


class Encoder(nn.Module):
    """Embedding, a stack of (bi)directional RNN layers one layer at a time, optional self-attention."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        rnn = CELLS[cfg.cell]
        dir_size = cfg.hidden_size // 2 if cfg.bidirectional else cfg.hidden_size
        sizes = [cfg.emb_dim] + [cfg.hidden_size] * (cfg.enc_layers - 1)
        self.embed = nn.Embedding(cfg.src_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.fwd = nn.ModuleList(rnn(n, dir_size, batch_first=True) for n in sizes)
        self.bwd = nn.ModuleList(rnn(n, dir_size, batch_first=True) for n in sizes) if cfg.bidirectional else None
        self.self_attention = (SelfAttention(cfg.hidden_size, cfg.self_attention_heads, cfg.dropout)
                               if cfg.self_attention_heads else None)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, pad_mask: torch.Tensor):
        x = self.dropout(self.embed(src))  # (B, S, E)
        for i, fwd in enumerate(self.fwd):
            if i > 0:
                x = self.dropout(x)
            out, _ = fwd(x)  # (B, S, H/dirs)
            if self.bwd is not None:
                back, _ = self.bwd[i](reverse_padded(x, src_len))
                out = torch.cat([out, reverse_padded(back, src_len)], dim=-1)  # (B, S, H)
            x = out
        # Summary for the decoder's initial state: the forward RNN at the last real
        # token (and the backward RNN at the first, where it finished). Taken before
        # self-attention, which mixes positions and so blurs "where it finished".
        last = (src_len - 1)[:, None, None].expand(-1, 1, x.size(2))  # (B, 1, H)
        summary = x.gather(1, last).squeeze(1)  # (B, H)
        if self.bwd is not None:
            half = x.size(2) // 2
            summary = torch.cat([summary[:, :half], x[:, 0, half:]], dim=-1)  # (B, H)
        if self.self_attention is None:
            return x, summary, None
        enc_out, self_attn = self.self_attention(x, pad_mask)  # (B, S, H), (B, h, S, S)
        return enc_out, summary, self_attn


class GlobalAttention(nn.Module):
    """Luong et al. (2015) global attention; additive is Bahdanau et al. (2015).

        dot:        score(h_t, h_s) = h_t . h_s
        scaled_dot: score(h_t, h_s) = h_t . h_s / sqrt(H)     (Vaswani et al. 2017)
        general:    score(h_t, h_s) = h_t . (W_a h_s)
        additive:   score(h_t, h_s) = v . tanh(W_q h_t + W_k h_s)
        cosine:     score(h_t, h_s) = scale * cos(h_t, h_s)   (learned scale)
        attn = softmax(score) over unmasked source positions
               (at inference, optionally cut to its top_k weights: see keep_top_k)
        attn_h = tanh(W_c [context; h_t])

    The parts that depend only on the source (W_a h_s, W_k h_s, h_s / |h_s|,
    h_s / sqrt(H)) are computed once per source by `keys()`, not at every decoder step.
    """

    def __init__(self, hidden_size: int, score: str):
        super().__init__()
        self.score = score
        self.hidden_size = hidden_size
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

    def keys(self, enc_out: torch.Tensor, each_position: bool = False) -> torch.Tensor:
        keys = self._score_keys(enc_out)  # (B, S, H)
        if not each_position:
            return keys
        # The outputs that read each position (hard_attention.py) make attn_h_j = tanh(W_src h_j + W_query h_t)
        # at every step: W_src h_j depends on the source alone, so it is made here, once, beside the keys.
        w_src = self.linear_out.weight[..., :self.hidden_size]  # (H, H)
        return torch.cat([keys, self._project(enc_out, w_src)], dim=-1)  # (B, S, 2H)

    def _score_keys(self, enc_out: torch.Tensor) -> torch.Tensor:
        if self.score == "general":
            return self.W_a(enc_out)  # (B, S, H)
        if self.score == "additive":
            return self.W_k(enc_out)  # (B, S, H)
        if self.score == "cosine":
            return F.normalize(enc_out, dim=-1)  # (B, S, H)
        if self.score == "scaled_dot":
            # Dot products of H-dim vectors grow like sqrt(H): scaling keeps the softmax from saturating.
            return enc_out / math.sqrt(self.hidden_size)  # (B, S, H)
        return enc_out  # dot

    def scores(self, query, keys, pad_mask):
        # query (B, H), keys (B, S, H), pad_mask (B, S) True at padding -> (B, S), padding at MASKED_SCORE
        # (here and in forward: also with a leading member axis N, for training/stacked.py)
        if self.score == "additive":
            scores = self.v(torch.tanh(keys + self.W_q(query)[..., None, :])).squeeze(-1)  # (B, S)
        elif self.score == "cosine":
            q = F.normalize(query, dim=-1)
            scores = self.log_scale.exp() * (keys @ q[..., None]).squeeze(-1)  # (B, S)
        else:
            scores = (keys @ query[..., None]).squeeze(-1)  # (B, S)
        return scores.masked_fill(pad_mask, MASKED_SCORE)

    def forward(self, query, enc_out, keys, pad_mask, top_k=None):
        # query (B, H), enc_out/keys (B, S, H), pad_mask (B, S) True at padding, top_k (B,) or None (soft)
        attn = torch.softmax(self.scores(query, keys, pad_mask), dim=-1)  # (B, S)
        if top_k is not None:
            attn = keep_top_k(attn, top_k)
        context = (attn[..., None, :] @ enc_out).squeeze(-2)  # (B, H)
        attn_h = torch.tanh(self.linear_out(torch.cat([context, query], dim=-1)))  # (B, H)
        return attn_h, attn

    def attn_h_each(self, w_src_h, query):
        # attn_h_j = tanh(W_c [h_j; h_t]) at every source position j (hard_attention.mix), as
        # W_src h_j + W_query h_t, W_src h_j (B, S, H) made by keys(): no (B, S, 2H) copy of the query. -> (B, S, H)
        w_query = self.linear_out.weight[..., self.hidden_size:]  # (H, H)
        return torch.tanh(w_src_h + self._project(query, w_query)[..., None, :])

    @staticmethod
    def _project(x, weight):
        # x W^T with a slice of linear_out's weight (training/stacked.py: the members' own, per member)
        return F.linear(x, weight)


class Decoder(nn.Module):
    """One step: [embed(y_prev); feed] -> RNN -> `out` (B, H), which the generator reads (outputs
    "mixture" and "monotonic": `out` is already the log-probabilities (B, V), see hard_attention.py).

    What `feed` is, by variant:
        attention            the previous step's attentional hidden attn_h (input feeding, Luong et al. 2015)
        none, every_step     the encoder summary, the same at every step (Cho et al. 2014)
        none, init           nothing: the summary only sets the initial state (Sutskever et al. 2014)
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H = cfg.hidden_size
        self.has_attention = cfg.attention != "none"
        self.feeds = self.has_attention or cfg.context == "every_step"
        self.embed = nn.Embedding(cfg.tgt_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.rnn = CELLS[cfg.cell](cfg.emb_dim + (H if self.feeds else 0), H, num_layers=cfg.dec_layers,
                                   batch_first=True, dropout=cfg.dropout if cfg.dec_layers > 1 else 0.0)
        self.init = nn.Linear(H, cfg.dec_layers * H)
        self.attention = GlobalAttention(H, cfg.attention) if self.has_attention else None
        if not self.has_attention and self.feeds:
            # Cho et al. read the context at the output too: like attn_h, with a context that never moves.
            self.linear_out = nn.Linear(2 * H, H, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.generator = nn.Linear(H, cfg.tgt_vocab_size)
        self.is_lstm = cfg.cell == "lstm"
        self.monotonic = cfg.output == "monotonic"
        self.mixture = cfg.output in ("mixture", "monotonic")  # `out` is already the log-probabilities
        self.out_size = cfg.tgt_vocab_size if self.mixture else H  # the width of step()'s `out`

    @property
    def state_names(self) -> list[str]:
        """The DecoderState fields this variant has, as the ONNX graphs name them."""
        return (["h"] + (["c"] if self.is_lstm else []) + (["feed"] if self.feeds else [])
                + (["align"] if self.monotonic else []))

    def keys(self, enc_out: torch.Tensor) -> torch.Tensor:
        """What the steps read of each source position besides enc_out, made once per source: (B, S, H),
        and for the outputs that read each position (B, S, 2H) (see GlobalAttention.keys)."""
        return self.attention.keys(enc_out, each_position=self.mixture)

    def init_state(self, summary: torch.Tensor, pad_mask: torch.Tensor) -> DecoderState:
        B, H = summary.shape
        h = torch.tanh(self.init(summary)).view(B, -1, H).transpose(0, 1).contiguous()  # (L, B, H)
        c = torch.zeros_like(h) if self.is_lstm else None
        feed = torch.zeros_like(summary) if self.has_attention else summary if self.feeds else None  # (B, H)
        if not self.monotonic:
            return DecoderState(h, c, feed)
        # Before the first output the alignment is at the first source position.
        first = torch.arange(pad_mask.size(1), device=summary.device) == 0  # (S,)
        last_attn = torch.zeros_like(pad_mask, dtype=summary.dtype).masked_fill(~first, MASKED_SCORE)  # (B, S)
        align = torch.cat([last_attn[:, :, None], summary.new_zeros(B, pad_mask.size(1), self.out_size)], dim=2)
        return DecoderState(h, c, feed, align)  # align (B, S, 1 + V)

    def step(self, y_prev, state: DecoderState, enc_out=None, keys=None, pad_mask=None, top_k=None):
        # y_prev (B,) token ids of the previous output; returns the next state, out (B, H), attn (B, S) or None
        x = self.dropout(self.embed(y_prev))  # (B, E)
        if self.feeds:
            x = torch.cat([x, state.feed], dim=-1)  # (B, E+H)
        if self.is_lstm:
            rnn_out, (h, c) = self.rnn(x[:, None, :], (state.h, state.c))
        else:
            (rnn_out, h), c = self.rnn(x[:, None, :], state.h), None
        query = rnn_out[:, 0]  # (B, H) the top layer
        if self.monotonic:
            log_probs, feed, attn, align = hard_attention.monotonic(
                self.attention, query, keys, pad_mask, top_k, self.generator, self.dropout, y_prev, state.align)
            return DecoderState(h, c, feed, align), log_probs, attn  # (B, V), (B, S)
        if self.mixture:
            log_probs, feed, attn = hard_attention.mixture(self.attention, query, keys, pad_mask, top_k,
                                                           self.generator, self.dropout)  # (B, V), (B, H), (B, S)
            return DecoderState(h, c, feed), log_probs, attn
        if self.attention is not None:
            out, attn = self.attention(query, enc_out, keys, pad_mask, top_k)  # (B, H), (B, S)
            return DecoderState(h, c, out), out, attn
        if self.feeds:  # every_step
            out = torch.tanh(self.linear_out(torch.cat([state.feed, query], dim=-1)))  # (B, H)
            return DecoderState(h, c, state.feed), out, None
        return DecoderState(h, c, None), query, None

    def log_probs(self, out: torch.Tensor) -> torch.Tensor:
        if self.mixture:
            return out  # (B, V) already
        return torch.log_softmax(self.generator(self.dropout(out)), dim=-1)  # (B, V)


class Seq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def encode(self, src, src_len) -> Encoded:
        S = src.size(1)
        pad_mask = torch.arange(S, device=src.device)[None, :] >= src_len[:, None]  # (B, S)
        enc_out, summary, self_attn = self.encoder(src, src_len, pad_mask)
        keys = self.decoder.keys(enc_out) if self.decoder.attention is not None else None
        return Encoded(enc_out, keys, pad_mask, self.decoder.init_state(summary, pad_mask), self_attn)

    def forward(self, src, src_len, tgt_in):
        """Teacher forcing: logits (B, T, V) for tgt_in (B, T), which starts with <s> (output "mixture":
        log-probabilities, which are their own log_softmax, so a cross-entropy reads them alike)."""
        enc = self.encode(src, src_len)
        state, outs = enc.state, []
        for t in range(tgt_in.size(1)):
            state, out, _ = self.decoder.step(tgt_in[:, t], state, enc.enc_out, enc.keys, enc.pad_mask)
            outs.append(out)
        if self.decoder.mixture:
            return torch.stack(outs, dim=1)  # (B, T, V)
        outs = self.decoder.dropout(torch.stack(outs, dim=1))  # (B, T, H)
        return self.decoder.generator(outs)  # (B, T, V)

    @torch.no_grad()
    def greedy(self, src, src_len, max_len: int, top_k: Optional[torch.Tensor] = None):
        """Greedy decoding, the PyTorch reference for the ONNX engine.

        Returns tokens (B, T) padded with PAD after </s>, out_len (B,) counting
        </s>, score (B,) the summed log-probability, attn (B, T, S) or None without
        attention. top_k (B,): per-row attention mode, see keep_top_k (None = soft).
        """
        B = src.size(0)
        enc = self.encode(src, src_len)
        state = enc.state
        y = torch.full((B,), BOS_ID, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        score = torch.zeros(B, device=src.device)
        out_len = torch.zeros(B, dtype=torch.long, device=src.device)
        tokens, attns = [], []
        for _ in range(max_len):
            state, out, attn = self.decoder.step(y, state, enc.enc_out, enc.keys, enc.pad_mask, top_k)
            logp, y = self.decoder.log_probs(out).max(dim=-1)  # (B,), (B,)
            score += torch.where(done, 0.0, logp)
            out_len += ~done
            tokens.append(torch.where(done, PAD_ID, y))
            attns.append(attn)
            done |= y == EOS_ID
            if bool(done.all()):
                break
        tokens = torch.stack(tokens, dim=1)  # (B, T)
        attn = torch.stack(attns, dim=1) if self.decoder.has_attention else None  # (B, T, S)
        return tokens, out_len, score, attn
