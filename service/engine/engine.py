"""The onnxruntime engine: the bundle's encoder and decoder-step graphs.

Synchronous and free of any transport. Two ways in: `decode()` greedy-decodes
a whole batch to the end (request-level batching), by default in one call to an
ONNX Loop built around the decoder step (service/engine/loop_graph.py), while `encode()`
and `step()` let a scheduler add and remove rows between steps (continuous batching).

What a bundle can do is read from its graphs, not assumed: a model without attention
has no `attn` output (its Decoded.attn is None), and hard / top-k attention at
inference is the decoder-step graph's `top_k` input, one value per row (0 soft, 1 hard,
k top-k renormalised). One graph with a per-row input, rather than one exported graph
per mode, keeps rows of different modes in one continuous batch, and the export's
parity check runs through the very graph that serves every mode.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from attnserve.bundle import Manifest, as_manifest, hints, prosody
from attnserve.bundle.normalization import normalizer
from service.config import EngineConfig
from service.domain import Decoded
from service.engine.bundle import Bundle
from service.engine import strategy
from service.engine import length_groups
from service.engine.loop_graph import STATE_NAMES, build_greedy_loop, run_loop, soft_only

log = logging.getLogger(__name__)


@dataclass
class Running:
    """Decoder inputs of the rows in flight, batch-aligned (one row per sequence).

    enc_out and keys are None for a model without attention (its steps never read the
    source); pad_mask is always there, as each row's source length.
    """

    y_prev: np.ndarray  # (B,) int64, the previous output token
    state: dict[str, np.ndarray]  # h, c: (L, B, H); feed: (B, H); align: (B, S, 1 + V)
    enc_out: np.ndarray | None  # (B, S, H)
    keys: np.ndarray | None  # (B, S, H), or (B, S, 2H) (training/model.py Decoder.keys)
    pad_mask: np.ndarray  # (B, S) True at padding
    top_k: np.ndarray | None = None  # (B,) int64, each row's attention mode (0 soft, 1 hard, k top-k)
    self_attn: np.ndarray | None = None  # (B, heads, S, S), kept for the results

    def __len__(self) -> int:
        return len(self.y_prev)

    def select(self, rows: np.ndarray, trim: bool = True) -> "Running":
        """Keep these rows (indices), trimming source padding no remaining row needs, to whole blocks
        (padded_source_len; unless not trim: then each row's attention runs over as many source
        positions as before, to the last bit)."""
        S = (padded_source_len(int((~self.pad_mask[rows]).sum(axis=1).max())) if len(rows) and trim
             else self.pad_mask.shape[1])
        return Running(self.y_prev[rows], {n: _take_batch(n, v, rows, S) for n, v in self.state.items()},
                       _rows(self.enc_out, rows, S), _rows(self.keys, rows, S), self.pad_mask[rows, :S],
                       _rows(self.top_k, rows), _rows(self.self_attn, rows, S, axes=(2, 3)))

    @staticmethod
    def concat(a: "Running", b: "Running") -> "Running":
        """Rows of a then rows of b; the shorter sources are padded (pad_mask True) to the longer."""
        S = max(a.pad_mask.shape[1], b.pad_mask.shape[1])
        return Running(np.concatenate([a.y_prev, b.y_prev]),
                       {n: _cat(a.state[n], b.state[n], S) if n in SOURCE_STATES
                        else np.concatenate([a.state[n], b.state[n]], axis=1 if n in ("h", "c") else 0)
                        for n in a.state},
                       _cat(a.enc_out, b.enc_out, S, 0.0), _cat(a.keys, b.keys, S, 0.0),
                       _cat(a.pad_mask, b.pad_mask, S, True), _cat(a.top_k, b.top_k),
                       _cat(a.self_attn, b.self_attn, S, 0.0, axes=(2, 3)))


# States with a source-time axis (axis 1), trimmed and padded with the source; the step masks their padding.
SOURCE_STATES = ("align",)

# The decoder sees source time padded to a multiple of this. Why: attention's sums over source
# positions (the softmax's denominator, the context's product) are onnxruntime kernels whose order of
# additions follows the length they are given, so a word alone (no padding) and the same word padded
# beside a longer one could differ in a last bit, and an int8 rounding boundary can grow that into a
# moved score. Padded positions add exact zeros; given whole blocks (8 floats, an AVX2 vector) the
# kernels sum a row alike at every padded length. tests/engine/test_source_blocks.py holds a word's
# answers alone and beside longer words, to the last bit; docs/models.md says what it cost.
SOURCE_BLOCK = 8


def padded_source_len(S: int) -> int:
    """The source-time length the decoder is given for sources of at most S symbols."""
    return -(-S // SOURCE_BLOCK) * SOURCE_BLOCK


def _take_batch(name: str, value: np.ndarray, rows: np.ndarray, S: int) -> np.ndarray:
    if name in SOURCE_STATES:
        return _rows(value, rows, S)
    return value[:, rows] if name in ("h", "c") else value[rows]  # h, c are (L, B, H)


def _rows(x: np.ndarray | None, rows: np.ndarray, S: int | None = None, axes=(1,)) -> np.ndarray | None:
    """x[rows], its source-time axes cut to S (None: no time axis; x None stays None)."""
    if x is None:
        return None
    x = x[rows]
    if S is not None:
        x = x[tuple(slice(None, S) if i in axes else slice(None) for i in range(x.ndim))]
    return x


def _cat(a: np.ndarray | None, b: np.ndarray | None, S: int | None = None, fill=0, axes=(1,)):
    """Rows of a then b, their source-time axes padded to S."""
    if a is None:
        return None
    if S is not None:
        a, b = _pad_time(a, S, fill, axes), _pad_time(b, S, fill, axes)
    return np.concatenate([a, b])


def _pad_time(x: np.ndarray, S: int, fill, axes=(1,)) -> np.ndarray:
    """Pad the source-time axes of x to length S."""
    pad = [(0, S - x.shape[i]) if i in axes else (0, 0) for i in range(x.ndim)]
    if not any(p[1] for p in pad):
        return x
    return np.pad(x, pad, constant_values=fill)


_process_pool_threads: int | None = None  # the size of the process's intra-op pool, once created


def _session_options(threads: int) -> ort.SessionOptions:
    """Options for every session of every engine: one intra-op thread pool and one memory arena for
    the whole process.

    Invariant: every session of the process runs its operators on the one global pool (never a pool
    of its own), so a process has `threads` intra-op threads however many sessions it holds. Why:
    with onnxruntime's default each session (encoder, decoder step, Loop; twice during a hot reload)
    has its own pool whose threads spin after each call, and sessions that take turns every step then
    compete for the same cores with spinning threads that do no work. onnxruntime cannot resize the
    pool once made, so the first engine of a process sets its size (the server has one).

    Each session also has its own arena by default, grown to the largest working memory that
    session has needed and kept: a process serving many small models held several times their
    weights in arenas that are never used at the same time (the decoders take turns on the cores).
    One arena registered with the environment serves every session instead (`session.use_env_allocators`);
    where a buffer lives does not change what is computed in it.
    """
    global _process_pool_threads
    if _process_pool_threads is None:
        ort.set_global_thread_pool_sizes(threads, 1)  # intra-op, inter-op (sequential graphs: 1)
        # Arena settings left at onnxruntime's defaults (-1; 0: no cap).
        ort.create_and_register_allocator(
            ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT),
            ort.OrtArenaCfg(0, -1, -1, -1))
        _process_pool_threads = threads
    elif threads != _process_pool_threads:
        log.warning("intra_op_threads=%d ignored: this process's onnxruntime thread pool already has %d "
                    "(0 = one per physical core)", threads, _process_pool_threads)
    opts = ort.SessionOptions()
    opts.use_per_session_threads = False
    opts.add_session_config_entry("session.use_env_allocators", "1")
    return opts


INT8_WER_TOLERANCE = 0.001  # 0.1 points of dev WER: int8 costs nothing within it


def served_precision(manifest: Manifest | Mapping, requested: str) -> str:
    """The precision a bundle is served in: the one asked for, or for "auto" int8 when `make quantize`
    measured that its dev WER is within INT8_WER_TOLERANCE of fp32's (a choice made on dev, so
    that test figures stay untouched by it), that its answers do not depend on the batch (a word
    alone and among others: same output, same score), and, where it timed them, that int8 is no slower
    than fp32 over a lone word and a full batch (the geometric mean of the two ratios: per-row int8
    adds nodes to every step, and on small models a lone word is slower in int8), else fp32. Read from
    the manifest, so every process serves one precision."""
    if requested != "auto":
        return requested
    manifest = as_manifest(manifest)  # a manifest's JSON object, as experiments hold it, reads the same
    fp32_wer, int8_wer = manifest.dev_wer, manifest.int8_dev_wer
    has_int8 = "encoder.int8" in manifest.graphs
    # rounded: one word of 1,000 more is 0.1 points, which 0.042 - 0.041 in floating point exceeds
    free = fp32_wer is not None and int8_wer is not None and round(int8_wer - fp32_wer, 9) <= INT8_WER_TOLERANCE
    slower = manifest.int8_over_fp32 > 1.0
    return "int8" if has_int8 and free and manifest.int8_batch_independent and not slower else "fp32"


class Engine:
    def __init__(self, bundle: Bundle, cfg: EngineConfig):
        m = bundle.manifest
        self.cfg = cfg
        self.name, self.version = bundle.name, bundle.version
        self.src_vocab: list[str] = list(m.src_vocab)
        self.tgt_vocab: list[str] = list(m.tgt_vocab)
        self._src_index = {t: i for i, t in enumerate(self.src_vocab)}
        self._tgt_index = {t: i for i, t in enumerate(self.tgt_vocab)}
        ids = m.special_ids
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids.pad, ids.bos, ids.eos, ids.unk
        self.src_tokenization: str = m.src_tokenization  # chars | words
        self.tgt_joiner = "" if m.tgt_tokenization == "chars" else " "
        # How sources are normalized before tokenizing (attnserve/bundle/normalization.py).
        self.normalization: str = m.source_normalization
        self._normalize = normalizer(self.normalization)
        self._specials = {self.pad_id, self.bos_id, self.eos_id, self.unk_id}
        self.hints = hints.load(m, bundle.path)  # read after each word's own symbols: encode
        # the source symbols a word may have: a symbol only hints bring (their separator) is not one
        self.alphabet = {t for i, t in enumerate(self.src_vocab) if i not in self._specials} - set(
            m.source_hints.hint_only_symbols if m.source_hints else ())
        opts = _session_options(cfg.intra_op_threads)
        providers = ["CPUExecutionProvider"]
        self.precision = served_precision(m, cfg.precision)
        suffix = "" if self.precision == "fp32" else f".{self.precision}"
        self.encoder = ort.InferenceSession(str(bundle.graph_path("encoder" + suffix)), opts, providers=providers)
        self.decoder = ort.InferenceSession(str(bundle.graph_path("decoder_step" + suffix)), opts, providers=providers)
        self.encode_costs = length_groups.DEFAULT  # warm_up() times this encoder for its own
        self.greedy_loop = None
        if cfg.greedy_loop == "onnx":
            # Around the step without its top-k work where the graph allows (soft rows, the default, then do
            # none of it); hard and top-k rows take the step loop, _step_greedy, apart (see _loops).
            step = onnx.load(bundle.graph_path("decoder_step" + suffix))
            loop = build_greedy_loop(soft_only(step) or step, self.eos_id, self.pad_id)
            self.greedy_loop = ort.InferenceSession(loop.SerializeToString(), opts, providers=providers)
        self._loop_inputs = [i.name for i in self.greedy_loop.get_inputs()] if self.greedy_loop else []
        self._loop_outputs = [o.name for o in self.greedy_loop.get_outputs()] if self.greedy_loop else []
        self._dec_inputs = {i.name for i in self.decoder.get_inputs()}
        self._dec_outputs = [o.name for o in self.decoder.get_outputs()]
        self._enc_outputs = [o.name for o in self.encoder.get_outputs()]
        self.state_names = [n for n in STATE_NAMES if n in self._dec_inputs]
        # What this bundle's graphs can do, read from the graphs themselves (bundles from before
        # these variants have attention but no `top_k` input: soft attention only).
        self.has_attention = "attn" in self._dec_outputs
        self.attention_modes: tuple[str, ...] = (
            ("soft", "hard", "topk") if "top_k" in self._dec_inputs else ("soft",) if self.has_attention else ())
        self.prosody = prosody.load(m, bundle.path)  # applied after decoding: decoding.py settle

    def normalize(self, text: str) -> str:
        return self._normalize(text)

    def tokenize(self, text: str) -> list[str]:
        text = self.normalize(text).strip()  # "knight\n" is knight
        return list(text) if self.src_tokenization == "chars" else text.split()

    def unknown_symbols(self, tokens: list[str]) -> list[tuple[int, str]]:
        """(position, symbol) of each source token outside the model's alphabet."""
        return [(i, t) for i, t in enumerate(tokens) if t not in self.alphabet]

    def tokenize_target(self, text: str) -> list[str]:
        return list(text) if self.tgt_joiner == "" else text.split()

    def target_ids(self, tokens: list[str]) -> list[int]:
        """A given output's ids; ValueError naming a symbol the model cannot emit."""
        ids = []
        for i, t in enumerate(tokens):
            j = self._tgt_index.get(t)
            if j is None or j in self._specials:
                raise ValueError(f"symbol {t!r} at position {i} is not in the model's output vocabulary")
            ids.append(j)
        return ids

    def source_ids(self, tokens: list[str]) -> list[int]:
        """The ids the encoder reads for a word's tokens: a symbol outside the alphabet is unknown, and a bundle
        with hints reads the word's hint after it (hints.py); the attention a result keeps covers the word."""
        ids = [self._src_index[t] if t in self.alphabet else self.unk_id for t in tokens]
        if self.hints is None:
            return ids
        return ids + [self._src_index.get(t, self.unk_id) for t in self.hints.after(tokens)]

    def encode(self, sources: list[list[str]], top_k: list[int] | None = None) -> "Running":
        """Run the encoder over tokenized, non-empty sources; rows start at <s>.

        top_k: each row's attention mode (DecodeOptions.attention_top_k), default soft.
        """
        ids = [self.source_ids(tokens) for tokens in sources]
        B = len(ids)
        if top_k is not None and any(top_k) and "top_k" not in self._dec_inputs:
            raise ValueError(f"model {self.name!r} version {self.version!r} has no hard/top-k attention "
                             f"(modes available: {list(self.attention_modes)})")
        groups = length_groups.groups([len(s) for s in ids], self.encode_costs)
        enc = length_groups.assemble([(rows, self._run_encoder([ids[r] for r in rows])) for rows in groups], B,
                                     padded_source_len(max(len(s) for s in ids)))
        return Running(y_prev=np.full((B,), self.bos_id, dtype=np.int64),
                       state={n: enc[n] for n in self.state_names},
                       enc_out=enc.get("enc_out"), keys=enc.get("keys"), pad_mask=enc["pad_mask"],
                       top_k=np.array(top_k if top_k is not None else [0] * B, dtype=np.int64),
                       self_attn=enc.get("self_attn"))

    def _run_encoder(self, ids: list[list[int]]) -> dict[str, np.ndarray]:
        """One encoder call over these sources' ids, padded to the longest: its outputs by name."""
        B, S = len(ids), max(len(s) for s in ids)
        src = np.full((B, S), self.pad_id, dtype=np.int64)  # (B, S)
        for b, row in enumerate(ids):
            src[b, :len(row)] = row
        src_len = np.array([len(s) for s in ids], dtype=np.int64)  # (B,)
        return dict(zip(self._enc_outputs, self.encoder.run(None, {"src": src, "src_len": src_len})))

    def step(self, run: "Running") -> tuple[np.ndarray, np.ndarray | None, "Running"]:
        """One decoder step for every row: log_probs (B, V), attn (B, S) or None without attention,
        and the rows' next inputs (y_prev still to be chosen by the caller)."""
        inputs = {"y_prev": run.y_prev, **run.state, "enc_out": run.enc_out, "keys": run.keys,
                  "pad_mask": run.pad_mask, "top_k": run.top_k}
        out = dict(zip(self._dec_outputs, self.decoder.run(None, {
            n: v for n, v in inputs.items() if n in self._dec_inputs})))
        return out["log_probs"], out.get("attn"), Running(
            run.y_prev, {n: out[f"{n}_next"] for n in self.state_names}, run.enc_out, run.keys, run.pad_mask,
            run.top_k, run.self_attn)

    def decode(self, sources: list[list[str]], max_output_lens: list[int] | None = None,
               top_k: list[int] | None = None) -> list[Decoded]:
        """Greedy-decode a batch of tokenized, non-empty sources together until all are done.

        Each row stops at </s> or at its own length limit (never above the engine's), and
        attends in its own mode (top_k, see encode()).
        """
        cap = self.cfg.max_output_len
        limits = np.array([min(n or cap, cap) for n in (max_output_lens or [cap] * len(sources))])  # (B,)
        run = self.encode(sources, top_k)
        results: list[Decoded | None] = [None] * len(sources)
        for rows, loop in self._loops(run):
            part = run if len(rows) == len(run) else run.select(rows)
            for b, d in zip(rows, loop([sources[b] for b in rows], part, limits[rows])):
                results[b] = d
        return results

    def _loops(self, run: Running) -> list[tuple[np.ndarray, Callable]]:
        """(rows, the loop that decodes them). A Loop built around soft_only(step) serves soft rows only: the
        others take the step loop, apart, so that a row goes the same way whatever its neighbours' modes
        (one answer per input, to the last bit of its score)."""
        every = np.arange(len(run))
        if self.greedy_loop is None:
            return [(every, self._step_greedy)]
        if "top_k" in self._loop_inputs:
            return [(every, self._loop_greedy)]
        soft = run.top_k == 0
        return [(rows, loop) for rows, loop in ((every[soft], self._loop_greedy), (every[~soft], self._step_greedy))
                if len(rows)]

    def _loop_greedy(self, sources: list[list[str]], run: Running, limits: np.ndarray) -> list[Decoded]:
        """All steps in one call to the ONNX Loop graph, the accelerator of _step_greedy: the same ids, steps
        and attention, but each row's log_prob added up in float32 (the Loop's own Add) where the step path
        adds in float64, so the two may differ in its last bits. tests/engine/test_decoding_parity.py holds the
        Loop to the core run in float32, bit for bit."""
        ids, steps, log_prob, attn = run_loop(self.greedy_loop, self._loop_inputs, self._loop_outputs, run, limits,
                                             self.pad_id)
        return [self.result(tokens, ids[j, :steps[j]], None if attn is None else attn[j], float(log_prob[j]),
                            None if run.self_attn is None else run.self_attn[j]) for j, tokens in enumerate(sources)]

    def _step_greedy(self, sources: list[list[str]], run: Running, limits: np.ndarray,
                     log_prob_dtype: Callable = float) -> list[Decoded]:
        """One decoder-graph call per step, through the decoding core (strategy.py)."""
        hyps = strategy.greedy(self.step, run, limits, self.eos_id, log_prob_dtype)
        return [self.result(tokens, h.ids, h.attention(len(tokens)), float(h.log_prob),
                            None if run.self_attn is None else run.self_attn[j])
                for j, (tokens, h) in enumerate(zip(sources, hyps))]

    def warm_up(self, sources: list[list[str]]) -> None:
        """Run every session once, since the first run of each is the slow one: the encoder and
        the greedy path through decode(), and the decoder-step graph (continuous batching, beam
        search) through one step even when decode() uses the ONNX Loop."""
        self.decode(sources)
        self.step(self.encode(sources))
        ids = [i for s in sources for i in self.source_ids(s)] or [self.unk_id]
        self.encode_costs = length_groups.measure(
            lambda rows, length: self._run_encoder([[ids[k % len(ids)] for k in range(length)]] * rows))

    def limit(self, max_output_len: int) -> int:
        return min(max_output_len or self.cfg.max_output_len, self.cfg.max_output_len)

    def result(self, src_tokens: list[str], ids, attn: np.ndarray | None, log_prob: float,
               self_attn: np.ndarray | None = None) -> Decoded:
        """A Decoded from one row's emitted ids (</s> last when finished), their log_prob, its (>=T, >=S)
        attention (None without attention) and its (heads, >=S, >=S) self-attention (None without).
        Decoded.log_prob is that log_prob (docs/glossary.md)."""
        steps, S = len(ids), len(src_tokens)
        out = [int(i) for i in ids if i != self.eos_id]
        finished = steps > 0 and int(ids[steps - 1]) == self.eos_id
        return Decoded(src_tokens=list(src_tokens), output_ids=out,
                       output_tokens=[self.tgt_vocab[i] for i in out], log_prob=log_prob,
                       attn=None if attn is None else np.ascontiguousarray(attn[:steps, :S], dtype=np.float32),
                       finished=finished,
                       self_attn=None if self_attn is None else np.ascontiguousarray(self_attn[:, :S, :S]))
