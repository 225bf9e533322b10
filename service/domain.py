"""The domain: what every layer of the server speaks, and every error a call can end with.

Imports nothing of the service (and nothing outside the standard library), so that every layer
may import it: transport turns these values into protobuf and JSON and these errors into status
codes (service/transport/servicer.py STATUS_OF), the layers below raise them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the domain itself needs no numpy
    import numpy as np

MAX_BEAM_SIZE = 16
ATTENTION_MODES = ("soft", "hard", "topk")
MAX_TOP_K = 64

# Where an answer came from: decoded by the model, a given pronunciation forced through it, or (running
# text) a rule of the language's text rules, which the model does not score.
MODEL, LEXICON, OVERRIDE, RULE = "MODEL", "LEXICON", "OVERRIDE", "RULE"


@dataclass(frozen=True)
class DecodeOptions:
    """Per-request decoding options (validated at the edge, checked again here)."""

    max_output_len: int = 0  # 0 = the engine's cap
    beam_size: int = 1  # 1 = greedy
    n_best: int = 1
    length_penalty_alpha: float = 0.0  # beam ranking: log_prob / length ** alpha
    # Attention at inference, for a model trained with soft attention: soft (as trained), hard
    # (one-hot on the argmax) or topk (the top_k largest weights, renormalised). See Engine.
    attention_mode: str = "soft"
    top_k: int = 0  # attention_mode "topk" only
    bypass_lexicon: bool = False  # decode with the model even where the lexicon has the input
    allow_unknown: bool = False  # decode symbols outside the alphabet as <unk> (flagged) instead of refusing

    def __post_init__(self):
        if self.max_output_len < 0:
            raise ValueError(f"max_output_len must be >= 0, got {self.max_output_len}")
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise ValueError(f"beam_size must be in 1..{MAX_BEAM_SIZE}, got {self.beam_size}")
        if not 1 <= self.n_best <= self.beam_size:
            raise ValueError(f"n_best must be in 1..beam_size ({self.beam_size}), got {self.n_best}")
        if not 0.0 <= self.length_penalty_alpha <= 4.0:  # also rejects NaN
            raise ValueError(f"length_penalty_alpha must be in [0, 4], got {self.length_penalty_alpha}")
        if self.attention_mode not in ATTENTION_MODES:
            raise ValueError(f"attention_mode must be one of {ATTENTION_MODES}, got {self.attention_mode!r}")
        if self.attention_mode == "topk" and not 1 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be in 1..{MAX_TOP_K} for attention_mode 'topk', got {self.top_k}")
        if self.attention_mode != "topk" and self.top_k:
            raise ValueError(f"top_k is for attention_mode 'topk' only, got {self.top_k} "
                             f"with attention_mode {self.attention_mode!r}")

    def __hash__(self) -> int:
        """Hashed once: options are part of the response cache's key, hashed for every word of a call."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def attention_top_k(self) -> int:
        """The decoder graph's `top_k` input for this mode: 0 soft, 1 hard, k top-k."""
        return {"soft": 0, "hard": 1}.get(self.attention_mode, self.top_k)


GREEDY = DecodeOptions()


@dataclass(frozen=True)
class Decoded:
    """One decoded source. `attn` has a row per decoder step, `</s>` included when emitted."""

    src_tokens: list[str]  # the source as the model saw it (unknown symbols kept as typed)
    output_ids: list[int]  # without </s>
    output_tokens: list[str]
    log_prob: float  # log-probability of the output, </s> included
    attn: np.ndarray | None  # (T, S) float32; None for a model without attention
    finished: bool  # emitted </s> before the length limit
    # What beam search ranked it by: log_prob / length ** alpha. None where nothing ranked it (greedy,
    # forced): its score is then its log_prob, as on the wire (Result.score).
    score: float | None = None
    self_attn: np.ndarray | None = None  # (heads, S, S) the encoder's self-attention, when the model has it
    token_log_probs: list[float] | None = None  # teacher forcing: log p of each output token, </s> last
    origin: str = MODEL  # MODEL (decoded), LEXICON or OVERRIDE (a given pronunciation, forced through)
    unknown_positions: tuple[int, ...] = ()  # source positions outside the alphabet (allow_unknown)

    @property
    def steps(self) -> int:
        """Decoder steps taken: the outputs, and </s> when emitted (= attention rows)."""
        return len(self.output_ids) + int(self.finished)


@dataclass(frozen=True)
class Source:
    """What the answering stage hands the scheduler for one input: its tokens as the model reads them,
    and a given output (ids, without </s>) to force through the model, or None to decode it. The
    scheduler answers each with its hypotheses, best first (a list of Decoded)."""

    src_tokens: list[str]
    target_ids: list[int] | None = None


# The errors. Each maps to one status code at the edge; anything else a call raises is INTERNAL.

class BadRequest(ValueError):
    """A request the edge refuses as sent (INVALID_ARGUMENT); the message names the offending field."""


class InvalidInput(ValueError):
    """An input the model cannot take, e.g. empty after tokenization (INVALID_ARGUMENT)."""


class OutsideAlphabet(InvalidInput):
    """An input with symbols outside the model's alphabet; `text` is that input, so the layer that
    knows the other served models can name those that read it."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


class UnknownModel(LookupError):
    """No model (or model version) of that name is served here (NOT_FOUND)."""


class NotReady(RuntimeError):
    """The model is not loaded yet, or the server is shutting down (UNAVAILABLE)."""


class Overloaded(RuntimeError):
    """The call cannot be answered in time or the queue is full; retry later (RESOURCE_EXHAUSTED)."""


class DeadlineExpired(TimeoutError):
    """The caller's deadline passed while its source waited in the queue (DEADLINE_EXCEEDED)."""


class BundleError(Exception):
    """The bundle is missing, malformed or does not match its manifest (FAILED_PRECONDITION).

    `reason` says what is wrong without naming where on the server (what a client may be told);
    the message adds the path (what the log says).
    """

    def __init__(self, where: Path | str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.reason = reason


class VersionNotFound(BundleError):
    """A version asked for (pinned or by the admin RPC) has no directory (NOT_FOUND)."""


class LexiconError(ValueError):
    """A lexicon or overrides file that cannot be used; names the file and line."""
