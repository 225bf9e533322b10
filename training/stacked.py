"""An ensemble of members of one shape run as one: every weight gains a leading member axis.

training/ensemble.py's EnsembleDecoder steps its N members in turn, so the step graph has N times a
member's nodes, and on a CPU a small model's step costs about what its nodes cost to dispatch. When
the members share one shape (the same ModelConfig but for dropout: seeds of one recipe), the same
arithmetic is one batched product per weight,

    gates = [x; h] W + b      [x; h] (N, B, E + 2H), W (N, E + 2H, G H)  ->  (N, B, G H)

and the step graph has one member's nodes, whatever N. The encoder shares all but each member's RNN
layers. The graphs' inputs and outputs stay EnsembleDecoder's (the members' slices side by side on
the hidden axis), so the engine and its bundles are unchanged. Inference only: no dropout.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn as nn

from training import hard_attention
from training.hard_attention import MASKED_SCORE
from training.model import DecoderState, Encoded, GlobalAttention, ModelConfig, reverse_padded, reversal_index


def stackable(configs: tuple[ModelConfig, ...]) -> bool:
    """Whether members of these configs can be stepped as one: the same shape, dropout aside."""
    shape = [{k: v for k, v in c.to_dict().items() if k != "dropout"} for c in configs]
    return all(s == shape[0] for s in shape)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear per member: x (N, ..., in), weight (N, out, in), bias (N, out) -> (N, ..., out)."""
    N, out, n_in = weight.shape
    middle = (1,) * (x.dim() - 3)  # so that the weight broadcasts over the axes between N and the last
    y = x @ weight.transpose(1, 2).reshape(N, *middle, n_in, out)
    return y if bias is None else y + bias.reshape(N, *middle, 1, out)


def by_member(x: torch.Tensor | None, n: int, width: int, lead=None) -> torch.Tensor | None:
    """The members' slices of the last axis on a new leading axis: (B, N W) -> (N, B, W), (lead, *, N W)
    -> (N, lead, *, W). Shapes written out, -1 for the one axis the graph would otherwise compute from
    the input's shape (at every step, in the decoder's)."""
    if x is None:
        return None
    if x.dim() == 2:
        return x.reshape(-1, n, width).transpose(0, 1)
    return x.reshape(lead, -1, n, width).permute(2, 0, 1, 3)


def side_by_side(x: torch.Tensor | None, width: int, lead=None) -> torch.Tensor | None:
    """The inverse of by_member: (N, B, W) -> (B, N W), (N, lead, *, W) -> (lead, *, N W)."""
    if x is None:
        return None
    if x.dim() == 3:
        return x.transpose(0, 1).reshape(-1, x.size(0) * width)
    return x.permute(1, 2, 0, 3).reshape(lead, -1, x.size(0) * width)


class StackedLinear(nn.Module):
    """N members' nn.Linear(in, out) as one: weight (N, out, in), bias (N, out) or None."""

    def __init__(self, linears: list[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([m.weight for m in linears]))
        self.bias = nn.Parameter(torch.stack([m.bias for m in linears])) if linears[0].bias is not None else None

    def forward(self, x):
        return linear(x, self.weight, self.bias)


class StackedAttention(GlobalAttention):
    """The members' GlobalAttentions as one: GlobalAttention's methods read a leading member axis as
    they read any other, with these stacked weights and their products per member (_project)."""

    def __init__(self, members: list[GlobalAttention]):
        nn.Module.__init__(self)
        first = members[0]
        self.score, self.hidden_size = first.score, first.hidden_size
        if self.score == "general":
            self.W_a = StackedLinear([m.W_a for m in members])
        elif self.score == "additive":
            self.W_k = StackedLinear([m.W_k for m in members])
            self.W_q = StackedLinear([m.W_q for m in members])
            self.v = StackedLinear([m.v for m in members])
        elif self.score == "cosine":
            self.log_scale = nn.Parameter(torch.stack([m.log_scale for m in members]).reshape(-1, 1, 1))  # (N, 1, 1)
        self.linear_out = StackedLinear([m.linear_out for m in members])

    @staticmethod
    def _project(x, weight):
        # x (N, ..., in), weight (N, out, in): GlobalAttention's keys() and attn_h_each(), per member
        return linear(x, weight)


class StackedCell(nn.Module):
    """One layer of the members' RNN cells (torch's gate order: LSTM i, f, g, o; GRU r, z, n). An LSTM's
    or plain RNN's input and hidden products are one, on [x; h]; a GRU's stay two (r scales only W_hn h)."""

    def __init__(self, rnns: list[nn.RNNBase], layer: int):
        super().__init__()
        self.kind = "lstm" if isinstance(rnns[0], nn.LSTM) else "gru" if isinstance(rnns[0], nn.GRU) else "rnn"
        self.H = rnns[0].hidden_size  # a Python int: the gates' slices are constants in the graph

        def weights(r: nn.RNNBase, which: str) -> SimpleNamespace:  # one layer's, as an nn.Linear holds them
            return SimpleNamespace(weight=getattr(r, f"weight_{which}_l{layer}"),
                                   bias=getattr(r, f"bias_{which}_l{layer}"))

        if self.kind == "gru":
            self.ih = StackedLinear([weights(r, "ih") for r in rnns])
            self.hh = StackedLinear([weights(r, "hh") for r in rnns])
        else:
            pairs = [(weights(r, "ih"), weights(r, "hh")) for r in rnns]
            self.both = StackedLinear([SimpleNamespace(weight=torch.cat([i.weight, h.weight], dim=1),
                                                       bias=i.bias + h.bias) for i, h in pairs])

    def forward(self, x, h, c):
        # x (N, B, in), h and c (N, B, H) -> the next h and c (None but for an LSTM)
        if self.kind == "gru":
            gi, gh = self.ih(x), self.hh(h)  # (N, B, 3H)
            (i_r, i_z, i_n), (h_r, h_z, h_n) = gi.split(self.H, dim=-1), gh.split(self.H, dim=-1)
            r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            return (1 - z) * n + z * h, None
        gates = self.both(torch.cat([x, h], dim=-1))  # (N, B, G H)
        if self.kind == "lstm":
            i, f, g, o = gates.split(self.H, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c
        return torch.tanh(gates), None


class StackedDecoder(nn.Module):
    """The members' decoders (attention, same shape) stepped as one; EnsembleDecoder's contract,
    except that `out` is already the ensemble's log-probabilities."""

    def __init__(self, decoders: list[nn.Module]):
        super().__init__()
        first = decoders[0]
        self.n, self.H = len(decoders), first.generator.in_features
        self.layers = first.rnn.num_layers
        self.has_attention, self.monotonic, self.mixture = True, first.monotonic, first.mixture
        self.state_names = first.state_names  # h, (c,) feed, (align)
        self.embed = nn.Parameter(torch.stack([d.embed.weight for d in decoders]))  # (N, V, E)
        self.cells = nn.ModuleList(StackedCell([d.rnn for d in decoders], k) for k in range(self.layers))
        self.attention = StackedAttention([d.attention for d in decoders])
        self.generator = StackedLinear([d.generator for d in decoders])

    def step(self, y_prev, state: DecoderState, enc_out=None, keys=None, pad_mask=None, top_k=None):
        N, L, B, H, V = self.n, self.layers, y_prev.size(0), self.H, self.generator.weight.size(1)
        h, c = by_member(state.h, N, H, L), by_member(state.c, N, H, L)  # (N, L, B, H)
        feed, align = by_member(state.feed, N, H), by_member(state.align, N, 1 + V, B)  # (N, B, H), (N, B, S, 1 + V)
        keys = by_member(keys, N, 2 * H if self.mixture else H, B)  # (N, B, S, H or 2H): see Decoder.keys
        x = torch.cat([torch.index_select(self.embed, 1, y_prev), feed], dim=-1)  # (N, B, E + H)
        hs, cs = [], []
        for k, cell in enumerate(self.cells):
            x, c_k = cell(x, h[:, k], c[:, k] if c is not None else None)  # (N, B, H)
            hs.append(x)
            cs.append(c_k)
        query = x
        align_next = None
        if self.monotonic:
            log_p, feed, attn, align_next = hard_attention.monotonic(
                self.attention, query, keys, pad_mask, top_k, self.generator, nn.Identity(), y_prev, align)
        elif self.mixture:
            log_p, feed, attn = hard_attention.mixture(self.attention, query, keys, pad_mask, top_k,
                                                       self.generator, nn.Identity())
        else:
            enc_out = by_member(enc_out, N, H, B)  # (N, B, S, H): only the context output reads it
            feed, attn = self.attention(query, enc_out, keys, pad_mask, top_k)  # (N, B, H), (N, B, S)
            log_p = torch.log_softmax(self.generator(feed), dim=-1)  # (N, B, V)
        log_probs = torch.logsumexp(log_p, dim=0) - math.log(self.n)  # (B, V) the members' mean probability
        state = DecoderState(side_by_side(torch.stack(hs, dim=1), H, L),  # (L, B, N H)
                             side_by_side(torch.stack(cs, dim=1), H, L) if c is not None else None,
                             side_by_side(feed, H), side_by_side(align_next, 1 + V, B))
        return state, log_probs, attn.mean(0)  # (B, V), (B, S)

    def log_probs(self, out: torch.Tensor) -> torch.Tensor:
        return out  # (B, V): step() already averaged the members


class StackedEncoder(nn.Module):
    """The members' encoders (one shape, no self-attention) and their decoders' initial states, for
    members stepped by `decoder`. ONNX has no RNN with a member axis, so each member's RNN layers stay
    its own ops; the rest is done once for all: each source reversed within its length, the summary,
    the initial state, the keys. Returns the Encoded of EnsembleDecoder's layout."""

    def __init__(self, models: list[nn.Module], decoder: StackedDecoder):
        super().__init__()
        encoders = [m.encoder for m in models]
        self.embeds = nn.ModuleList(e.embed for e in encoders)
        layers = range(len(encoders[0].fwd))
        self.fwd = nn.ModuleList(nn.ModuleList(e.fwd[k] for e in encoders) for k in layers)  # [layer][member]
        self.bwd = (nn.ModuleList(nn.ModuleList(e.bwd[k] for e in encoders) for k in layers)
                    if encoders[0].bwd is not None else None)
        self.init = StackedLinear([m.decoder.init for m in models])
        self.decoder = decoder

    def forward(self, src, src_len) -> Encoded:
        S, d = src.size(1), self.decoder
        N, L, H, V = d.n, d.layers, d.H, d.generator.weight.size(1)
        pad_mask = torch.arange(S, device=src.device)[None, :] >= src_len[:, None]  # (B, S)
        index = reversal_index(src_len, S)  # (B, S)
        xs = [embed(src) for embed in self.embeds]  # N x (B, S, E)
        # One zero initial state for every RNN, rather than one each that the graph makes from its input's shape
        zeros = xs[0].new_zeros((1, src.size(0), self.fwd[0][0].hidden_size))  # (1, B, H / dirs)
        h0 = (zeros, zeros) if isinstance(self.fwd[0][0], nn.LSTM) else zeros
        for k, fwds in enumerate(self.fwd):
            outs = [fwd(x, h0)[0] for fwd, x in zip(fwds, xs)]  # N x (B, S, H / dirs)
            if self.bwd is not None:
                backs = [bwd(reverse_padded(x, src_len, index), h0)[0] for bwd, x in zip(self.bwd[k], xs)]
                outs = [torch.cat([o, reverse_padded(b, src_len, index)], dim=-1) for o, b in zip(outs, backs)]
            xs = outs
        enc_out = torch.stack(xs)  # (N, B, S, H)
        # The summary, as Encoder.forward takes it: the forward RNN at the last real token, the backward at the first.
        last = (src_len - 1)[None, :, None, None].expand(N, -1, 1, H)  # (N, B, 1, H)
        summary = enc_out.gather(2, last).squeeze(2)  # (N, B, H)
        if self.bwd is not None:
            summary = torch.cat([summary[..., :H // 2], enc_out[:, :, 0, H // 2:]], dim=-1)
        h = torch.tanh(self.init(summary))  # (N, B, L H): Decoder.init_state, per member
        h = h.reshape(N, -1, L, H).permute(2, 1, 0, 3).reshape(L, -1, N * H)  # (L, B, N H)
        c = torch.zeros_like(h) if d.cells[0].kind == "lstm" else None
        feed = torch.zeros_like(h[0])  # (B, N H)
        align = None
        if d.monotonic:  # Decoder.init_state's: at the first source position, log-probabilities 0; every member's
            first = torch.arange(S, device=src.device) == 0  # (S,)
            last_attn = torch.zeros_like(pad_mask, dtype=h.dtype).masked_fill(~first, MASKED_SCORE)  # (B, S)
            align = torch.cat([last_attn[:, :, None], torch.zeros_like(last_attn)[:, :, None].expand(-1, -1, V)],
                              dim=2).repeat(1, 1, N)  # (B, S, N (1 + V))
        keys = d.attention.keys(enc_out, each_position=d.mixture)  # (N, B, S, H or 2H)
        B = src.size(0)
        return Encoded(side_by_side(enc_out, H, B), side_by_side(keys, keys.size(-1), B), pad_mask,
                       DecoderState(h, c, feed, align), None)
