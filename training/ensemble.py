"""Several trained models decoding as one: an ensemble that exports to the same two ONNX graphs.

    python -m training.export --checkpoint runs/a/best.pt runs/b/best.pt --out models/g2p-en/2

Independently trained models make different mistakes, so averaging their next-token
distributions at every step usually beats each of them. Each member reads its own slice of tensors concatenated along the hidden
axis, which keeps the graph interface of a single model:

    enc_out              (B, S, H_1 + ... + H_N)
    keys                 (B, S, K_1 + ... + K_N)   K_i = H_i, or 2 H_i (outputs mixture, monotonic: Decoder.keys)
    h, c                 (L, B, H_1 + ... + H_N)
    feed                 (B, H_1 + ... + H_N)
    align                (B, S, (1 + V) M)   (the M members with output "monotonic"; none: no align)
    log p(y | ...)       = logsumexp_i log p_i(y | ...) - log N     (the members' mean probability)
    attn                 = the members' mean attention               (B, S)

Members of one shape (seeds of one recipe) step as one, with batched products (training/stacked.py);
the graphs' inputs and outputs are the same either way. So the engine, the ONNX Loop, beam search and
continuous batching run an ensemble bundle exactly as they run any other: the server needs nothing new. Members may differ in size,
encoder, score function and output (context, mixture or monotonic); they must share the vocabularies, have attention, and share
the decoder cell and its number of layers (their states are concatenated, not stacked).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from training.model import DecoderState, Encoded, ModelConfig, Seq2Seq
from training.stacked import StackedDecoder, StackedEncoder, stackable


@dataclass(frozen=True)
class EnsembleConfig:
    members: tuple[ModelConfig, ...]

    def __post_init__(self):
        if len(self.members) < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {len(self.members)}")
        first = self.members[0]
        for i, m in enumerate(self.members):
            if m.attention == "none":
                raise ValueError(f"ensemble member {i} has no attention: members must all have attention")
            for field in ("src_vocab_size", "tgt_vocab_size", "cell", "dec_layers"):
                if getattr(m, field) != getattr(first, field):
                    raise ValueError(f"ensemble member {i} has {field}={getattr(m, field)!r}, member 0 has "
                                     f"{getattr(first, field)!r}: members must share it")

    @property
    def src_vocab_size(self) -> int:
        return self.members[0].src_vocab_size

    # The ensemble's graphs return no encoder self-attention (members' weights are not comparable).
    self_attention_heads = 0

    def to_dict(self) -> dict:
        return {"ensemble": [m.to_dict() for m in self.members]}


def cat_states(states: list[DecoderState]) -> DecoderState:
    """The members' decoder states side by side: h, c (L, B, sum H), feed (B, sum H), align (B, S, sum 1 + V)
    over the members that have one (output monotonic)."""
    aligns = [s.align for s in states if s.align is not None]
    return DecoderState(torch.cat([s.h for s in states], dim=2),
                        torch.cat([s.c for s in states], dim=2) if states[0].c is not None else None,
                        torch.cat([s.feed for s in states], dim=1),
                        torch.cat(aligns, dim=2) if aligns else None)


class EnsembleDecoder(nn.Module):
    """The members' decoders, stepped together on their slices of the shared tensors."""

    def __init__(self, decoders: list[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(decoders)
        self.sizes = [d.generator.in_features for d in decoders]  # H_i of each member
        self.out_sizes = [d.out_size for d in decoders]  # the widths of their step outs: H_i, or V (mixture)
        self.key_sizes = [H * (2 if d.mixture else 1) for H, d in zip(self.sizes, decoders)]  # see Decoder.keys
        self.has_attention = True
        self.state_names = max((d.state_names for d in decoders), key=len)  # h, (c,) feed, (align: any monotonic member)
        self.align_sizes = [1 + d.out_size if d.monotonic else 0 for d in decoders]  # monotonic: out_size is V

    def _split(self, x: torch.Tensor | None, dim: int, sizes: list[int] | None = None) -> list:
        sizes = self.sizes if sizes is None else sizes
        return list(torch.split(x, sizes, dim=dim)) if x is not None else [None] * len(sizes)

    def step(self, y_prev, state: DecoderState, enc_out=None, keys=None, pad_mask=None, top_k=None):
        # Same contract as Decoder.step; `out` is the members' outs side by side, (B, out_size_1 + ... + out_size_N).
        hs, cs, feeds = self._split(state.h, 2), self._split(state.c, 2), self._split(state.feed, 1)
        monotonic = iter(self._split(state.align, 2, [n for n in self.align_sizes if n]))  # align: theirs alone
        aligns = [next(monotonic) if d.monotonic else None for d in self.members]  # the others keep no align
        enc_outs, keyss = self._split(enc_out, 2), self._split(keys, 2, self.key_sizes)
        states, outs, attns = [], [], []
        for i, decoder in enumerate(self.members):
            s, out, attn = decoder.step(y_prev, DecoderState(hs[i], cs[i], feeds[i], aligns[i]), enc_outs[i], keyss[i],
                                        pad_mask, top_k)
            states.append(s)
            outs.append(out)
            attns.append(attn)
        return cat_states(states), torch.cat(outs, dim=1), torch.stack(attns).mean(0)  # (B, sum H), (B, S)

    def log_probs(self, out: torch.Tensor) -> torch.Tensor:
        member = [d.log_probs(o) for d, o in zip(self.members, torch.split(out, self.out_sizes, dim=1))]  # N x (B, V)
        return torch.logsumexp(torch.stack(member), dim=0) - math.log(len(member))  # (B, V)


class Ensemble(nn.Module):
    """Quacks like Seq2Seq where export and parity look: cfg, encode, decoder, greedy."""

    def __init__(self, members: list[Seq2Seq]):
        super().__init__()
        self.cfg = EnsembleConfig(tuple(m.cfg for m in members))
        self.models = nn.ModuleList(members)
        # Members of one shape step as one (training/stacked.py); others each on their own slices.
        stacked = stackable(self.cfg.members)
        self.decoder = (StackedDecoder if stacked else EnsembleDecoder)([m.decoder for m in members])
        self.stacked_encoder = (StackedEncoder(members, self.decoder)
                                if stacked and not self.cfg.members[0].self_attention_heads else None)

    def encode(self, src, src_len) -> Encoded:
        if self.stacked_encoder is not None:
            return self.stacked_encoder(src, src_len)
        encs = [m.encode(src, src_len) for m in self.models]
        state = cat_states([e.state for e in encs])
        return Encoded(torch.cat([e.enc_out for e in encs], dim=2),  # (B, S, sum H)
                       torch.cat([e.keys for e in encs], dim=2),  # (B, S, sum H)
                       encs[0].pad_mask, state, None)

    greedy = Seq2Seq.greedy  # reads only encode() and the decoder's step/log_probs


def held_out_data(data: dict) -> dict:
    """A checkpoint's data description without how that model was trained (continued from another
    checkpoint; on a teacher's outputs, one pair per training source): corpus, filter, split and the
    dev and test counts, which fix the held-out words. distill.py refuses a targets file holding a dev
    or test source, so a distilled member holds out the same words as one trained on the references."""
    shared = {k: v for k, v in data.items() if k not in ("continued_from", "train_targets")}
    for counts in ("pairs", "words"):  # extra training sources (distill.py --unlabeled-wordfreq) hold out nothing
        if counts in shared:
            shared[counts] = {split: n for split, n in shared[counts].items() if split != "train"}
    return shared


def check_members(ckpts: list[dict], names: list) -> None:
    """Members' training checkpoints must agree on the vocabularies and the held-out data, so that the
    ensemble's held-out words are held out from every member."""
    def shared(ckpt: dict) -> dict:
        data = held_out_data(ckpt["data"])
        if "source_hints" in data:  # the same hints (by their sha256) wherever each member's copy of the file lay
            data["source_hints"] = {k: v for k, v in data["source_hints"].items() if k != "path"}
        return {"src_vocab": ckpt["src_vocab"], "tgt_vocab": ckpt["tgt_vocab"], "data": data}

    first = shared(ckpts[0])
    for name, ckpt in zip(names[1:], ckpts[1:]):
        for key, value in shared(ckpt).items():
            if value != first[key]:
                raise ValueError(f"ensemble member {name} has a different {key!r} from {names[0]}: members must "
                                 f"be trained on the same data with the same vocabularies")
