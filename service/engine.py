"""The onnxruntime engine: the bundle's encoder and decoder-step graphs.

Synchronous and free of any transport. Two ways in: `decode()` greedy-decodes
a whole batch to the end (request-level batching), while `encode()` and
`step()` let a scheduler add and remove rows between steps (continuous batching).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from service.bundle import Bundle


@dataclass(frozen=True)
class EngineConfig:
    intra_op_threads: int = 1  # onnxruntime intra-op threads for the whole process
    max_output_len: int = 40  # hard cap on decoder steps per sequence
    precision: str = "fp32"  # fp32 | int8 (the bundle's dynamically quantized graphs, `make quantize`)

    def __post_init__(self):
        if self.precision not in ("fp32", "int8"):
            raise ValueError(f"precision must be 'fp32' or 'int8', got {self.precision!r}")
        if self.intra_op_threads < 0:
            raise ValueError(f"intra_op_threads must be >= 0 (0 = onnxruntime default), got {self.intra_op_threads}")
        if self.max_output_len < 1:
            raise ValueError(f"max_output_len must be >= 1, got {self.max_output_len}")


MAX_BEAM_SIZE = 16


@dataclass(frozen=True)
class DecodeOptions:
    """Per-request decoding options (validated at the edge, checked again here)."""

    max_output_len: int = 0  # 0 = the engine's cap
    beam_size: int = 1  # 1 = greedy
    n_best: int = 1
    length_penalty_alpha: float = 0.0  # beam ranking: log_prob / length ** alpha

    def __post_init__(self):
        if self.max_output_len < 0:
            raise ValueError(f"max_output_len must be >= 0, got {self.max_output_len}")
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise ValueError(f"beam_size must be in 1..{MAX_BEAM_SIZE}, got {self.beam_size}")
        if not 1 <= self.n_best <= self.beam_size:
            raise ValueError(f"n_best must be in 1..beam_size ({self.beam_size}), got {self.n_best}")
        if not 0.0 <= self.length_penalty_alpha <= 4.0:  # also rejects NaN
            raise ValueError(f"length_penalty_alpha must be in [0, 4], got {self.length_penalty_alpha}")


GREEDY = DecodeOptions()


@dataclass(frozen=True)
class Decoded:
    """One decoded source. `attn` has a row per decoder step, `</s>` included when emitted."""

    src_tokens: list[str]  # the source as the model saw it (unknown symbols kept as typed)
    output_ids: list[int]  # without </s>
    output_tokens: list[str]
    score: float  # log-probability of the output, </s> included
    attn: np.ndarray  # (T, S) float32
    finished: bool  # emitted </s> before the length limit
    rank_score: float | None = None  # beam search: the length-normalised score it was ranked by


@dataclass
class Running:
    """Decoder inputs of the rows in flight, batch-aligned (one row per sequence)."""

    y_prev: np.ndarray  # (B,) int64, the previous output token
    state: dict[str, np.ndarray]  # h, c: (L, B, H); feed: (B, H)
    enc_out: np.ndarray  # (B, S, H)
    keys: np.ndarray  # (B, S, H)
    pad_mask: np.ndarray  # (B, S) True at padding

    def __len__(self) -> int:
        return len(self.y_prev)

    def select(self, rows: np.ndarray) -> "Running":
        """Keep these rows (indices), trimming source padding no remaining row needs."""
        S = int((~self.pad_mask[rows]).sum(axis=1).max()) if len(rows) else 0
        return Running(self.y_prev[rows], {n: _take_batch(n, v, rows) for n, v in self.state.items()},
                       self.enc_out[rows, :S], self.keys[rows, :S], self.pad_mask[rows, :S])

    @staticmethod
    def concat(a: "Running", b: "Running") -> "Running":
        """Rows of a then rows of b; the shorter sources are padded (pad_mask True) to the longer."""
        S = max(a.enc_out.shape[1], b.enc_out.shape[1])
        return Running(np.concatenate([a.y_prev, b.y_prev]),
                       {n: np.concatenate([a.state[n], b.state[n]], axis=1 if n in ("h", "c") else 0)
                        for n in a.state},
                       np.concatenate([_pad_time(a.enc_out, S, 0.0), _pad_time(b.enc_out, S, 0.0)]),
                       np.concatenate([_pad_time(a.keys, S, 0.0), _pad_time(b.keys, S, 0.0)]),
                       np.concatenate([_pad_time(a.pad_mask, S, True), _pad_time(b.pad_mask, S, True)]))


def _take_batch(name: str, value: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return value[:, rows] if name in ("h", "c") else value[rows]  # h, c are (L, B, H)


def _pad_time(x: np.ndarray, S: int, fill) -> np.ndarray:
    """Pad axis 1 (source time) of x to length S."""
    if x.shape[1] == S:
        return x
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, S - x.shape[1])
    return np.pad(x, pad, constant_values=fill)


class Engine:
    def __init__(self, bundle: Bundle, cfg: EngineConfig):
        m = bundle.manifest
        self.cfg = cfg
        self.name, self.version = bundle.name, bundle.version
        self.src_vocab: list[str] = m["src_vocab"]
        self.tgt_vocab: list[str] = m["tgt_vocab"]
        self._src_index = {t: i for i, t in enumerate(self.src_vocab)}
        ids = m["special_ids"]
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids["pad"], ids["bos"], ids["eos"], ids["unk"]
        self.src_tokens_kind: str = m["data"]["src_tokens"]  # chars | words
        self.tgt_joiner = "" if m["data"]["tgt_tokens"] == "chars" else " "
        self.lowercase: bool = bool(m.get("lowercase_input", False))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = cfg.intra_op_threads
        opts.inter_op_num_threads = 1
        # Two sessions take turns every step: spinning threads would fight over the cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        suffix = "" if cfg.precision == "fp32" else f".{cfg.precision}"
        self.encoder = ort.InferenceSession(str(bundle.graph_path("encoder" + suffix)), opts, providers=providers)
        self.decoder = ort.InferenceSession(str(bundle.graph_path("decoder_step" + suffix)), opts, providers=providers)
        dec_inputs = {i.name for i in self.decoder.get_inputs()}
        self.state_names = [n for n in ("h", "c", "feed") if n in dec_inputs]
        self._enc_outputs = [o.name for o in self.encoder.get_outputs()]

    def tokenize(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        return list(text) if self.src_tokens_kind == "chars" else text.split()

    def encode(self, sources: list[list[str]]) -> "Running":
        """Run the encoder over tokenized, non-empty sources; rows start at <s>."""
        B, S = len(sources), max(len(s) for s in sources)
        src = np.full((B, S), self.pad_id, dtype=np.int64)  # (B, S)
        for b, tokens in enumerate(sources):
            src[b, :len(tokens)] = [self._src_index.get(t, self.unk_id) for t in tokens]
        src_len = np.array([len(s) for s in sources], dtype=np.int64)  # (B,)
        enc = dict(zip(self._enc_outputs, self.encoder.run(None, {"src": src, "src_len": src_len})))
        return Running(y_prev=np.full((B,), self.bos_id, dtype=np.int64),
                       state={n: enc[n] for n in self.state_names},
                       enc_out=enc["enc_out"], keys=enc["keys"], pad_mask=enc["pad_mask"])

    def step(self, run: "Running") -> tuple[np.ndarray, np.ndarray, "Running"]:
        """One decoder step for every row: log_probs (B, V), attn (B, S), and the rows' next inputs
        (y_prev still to be chosen by the caller)."""
        log_probs, *next_state, attn = self.decoder.run(None, {
            "y_prev": run.y_prev, **run.state, "enc_out": run.enc_out, "keys": run.keys, "pad_mask": run.pad_mask})
        return log_probs, attn, Running(run.y_prev, dict(zip(self.state_names, next_state)),
                                        run.enc_out, run.keys, run.pad_mask)

    def decode(self, sources: list[list[str]], max_output_lens: list[int] | None = None) -> list[Decoded]:
        """Greedy-decode a batch of tokenized, non-empty sources together until all are done.

        Each row stops at </s> or at its own length limit (never above the engine's).
        """
        cap = self.cfg.max_output_len
        limits = np.array([min(n or cap, cap) for n in (max_output_lens or [cap] * len(sources))])  # (B,)
        B = len(sources)
        run = self.encode(sources)
        done = np.zeros(B, dtype=bool)
        score = np.zeros(B, dtype=np.float64)
        steps = np.zeros(B, dtype=np.int64)  # decoder steps each row took, </s> included
        steps_ids, steps_attn = [], []
        for _ in range(int(limits.max())):
            log_probs, attn, run = self.step(run)
            y = log_probs.argmax(axis=-1)  # (B,)
            score += np.where(done, 0.0, log_probs[np.arange(B), y])
            steps += ~done
            steps_ids.append(np.where(done, self.pad_id, y))
            steps_attn.append(attn)  # (B, S)
            done |= (y == self.eos_id) | (steps >= limits)
            run.y_prev = y
            if done.all():
                break
        ids = np.stack(steps_ids, axis=1)  # (B, T)
        attn = np.stack(steps_attn, axis=1)  # (B, T, S)
        return [self.result(sources[b], ids[b, :steps[b]], attn[b], float(score[b])) for b in range(B)]

    def limit(self, max_output_len: int) -> int:
        return min(max_output_len or self.cfg.max_output_len, self.cfg.max_output_len)

    def result(self, src_tokens: list[str], ids, attn: np.ndarray, score: float) -> Decoded:
        """A Decoded from one row's emitted ids (</s> last when finished) and its (>=T, >=S) attention."""
        steps = len(ids)
        out = [int(i) for i in ids if i != self.eos_id]
        finished = steps > 0 and int(ids[steps - 1]) == self.eos_id
        return Decoded(src_tokens=list(src_tokens), output_ids=out,
                       output_tokens=[self.tgt_vocab[i] for i in out], score=score,
                       attn=np.ascontiguousarray(attn[:steps, :len(src_tokens)], dtype=np.float32),
                       finished=finished)

    def join(self, tokens: list[str]) -> str:
        return self.tgt_joiner.join(tokens)
