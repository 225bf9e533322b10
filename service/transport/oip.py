"""The model as the Open Inference Protocol (KServe v2 / Triton) sees it, for both of its bindings:
the gRPC one (kserve.py) and the HTTP/REST one (http.py). Each binding parses its own wire format
into plain Python values; what is checked and what comes back is decided here, once.

  input   TEXT              BYTES [B]              UTF-8 words
  outputs OUTPUT            BYTES [B]              the output text (e.g. space-separated phonemes)
          SCORE             FP32  [B]              log-probability of each output
          ATTENTION         FP32  [B, T, S]        attention weights, zero-padded to the longest T and S
          OUTPUT_LENGTH     INT32 [B]              T of each item: its real attention rows (decoder steps)
          INPUT_LENGTH      INT32 [B]              S of each item: its real attention columns (source tokens)
  parameters  max_output_len (int, 0 = the server's limit), return_attention (bool),
              beam_size (int), n_best (int), length_penalty_alpha (float),
              attention_mode ("soft", "hard", "topk"), top_k (int), bypass_lexicon (bool),
              allow_unknown_symbols (bool)

Scoring (the native Score RPC over this protocol): a request with a second input TARGET (BYTES [B],
one candidate output per TEXT element, in the model's symbols) gets the model's teacher-forced
answer for each pair: OUTPUT is the candidate, SCORE its log-probability, ATTENTION its alignment,
and TOKEN_LOG_PROBS FP32 [B, T] the log-probability of each of its tokens (</s> last, zero-padded).

Running text (the native TransduceText over this protocol): a request with the parameter `text`
true takes each TEXT element as running text (at most max_text_len characters, not max_input_len),
read in the model's language into tokens whose words are each answered as a word is. Its outputs:
OUTPUT BYTES [B] the pronunciation, words by `word_separator` (default " | " where phonemes are
joined by spaces, else " "), punctuation in place as written; SCORE FP32 [B] the words' summed
log-probability; SPOKEN BYTES [B] the text as read ("In ten sixty-six, three kings ..."); TOKENS
BYTES [B] one JSON document per text: its tokens with kind, span, words, pronunciations, origins,
alternatives and the attention on the text's characters. `alphabet` ("model", "arpabet", "ipa")
asks for IPA from an ARPAbet model.

A request that sets `n_best` gets every hypothesis: OUTPUT, SCORE and OUTPUT_LENGTH become
[B, N], ATTENTION [B, N, T, S], and HYPOTHESIS_COUNT INT32 [B] says how many of the N are real
(beam search may finish fewer); missing hypotheses are "" with SCORE -inf and length 0.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

from service.answering.reading import TextAnswer
from service.answering.text import WORD
from service.config import ServerConfig
from service.domain import BadRequest, Decoded, DecodeOptions
from service.engine.bundle import Bundle
from service.transport.convert import check_text_options, has_attention

INPUT = "TEXT"
# name -> (datatype, shape); -1 marks a dimension that varies per request.
OUTPUTS = {
    "OUTPUT": ("BYTES", [-1]),
    "SCORE": ("FP32", [-1]),
    "ATTENTION": ("FP32", [-1, -1, -1]),
    "OUTPUT_LENGTH": ("INT32", [-1]),
    "INPUT_LENGTH": ("INT32", [-1]),
}
TARGET = "TARGET"  # optional second input: score these outputs
N_BEST_OUTPUTS = {"HYPOTHESIS_COUNT": ("INT32", [-1])}  # only for a request that sets n_best
SCORE_OUTPUTS = {"TOKEN_LOG_PROBS": ("FP32", [-1, -1])}  # only for a request with TARGET
TEXT_OUTPUTS = {"OUTPUT": ("BYTES", [-1]), "SCORE": ("FP32", [-1]), "SPOKEN": ("BYTES", [-1]),
                "TOKENS": ("BYTES", [-1])}  # a request with the parameter text: true
_LENGTH_PREFIX = struct.Struct("<I")  # BYTES raw format: a 4-byte little-endian length before each element
# parameter -> the Python type each binding must hand over (bool is not an int here)
PARAMETERS = {"max_output_len": int, "return_attention": bool, "beam_size": int, "n_best": int,
              "length_penalty_alpha": float, "attention_mode": str, "top_k": int, "bypass_lexicon": bool,
              "allow_unknown_symbols": bool, "text": bool, "word_separator": str, "alphabet": str}


@dataclass(frozen=True)
class InferCall:
    texts: list[str]
    outputs: list[str]  # in the order they go into the response
    options: DecodeOptions
    per_hypothesis: bool  # the request set n_best: [B, N, ...] outputs
    targets: list[str] | None = None  # TARGET: score these instead of decoding
    text: bool = False  # the parameter text: each TEXT element is running text
    alphabet: str = ""
    separator: str | None = None
    return_attention: bool = True


def outputs_of(bundle: Bundle) -> dict:
    """The model's outputs for its metadata: a model without attention has no ATTENTION."""
    return {n: v for n, v in OUTPUTS.items() if n != "ATTENTION" or has_attention(bundle.manifest)}


def check_texts(items: list[bytes] | list[str], limits: ServerConfig, text: bool = False) -> list[str]:
    if not items:
        raise BadRequest(f"{INPUT} is empty: send at least one input")
    if len(items) > limits.max_inputs_per_request:
        raise BadRequest(f"{INPUT} has {len(items)} elements; at most {limits.max_inputs_per_request} per request")
    texts, text_call = [], text
    for i, item in enumerate(items):
        try:
            text = item if isinstance(item, str) else item.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"{INPUT}[{i}] is not valid UTF-8") from None
        if not text.strip():
            raise BadRequest(f"{INPUT}[{i}] is empty")
        if text_call and len(text) > limits.max_text_len:
            raise BadRequest(f"{INPUT}[{i}] has {len(text)} characters; the limit is max_text_len "
                             f"({limits.max_text_len})")
        if not text_call and len(text) > limits.max_input_len:
            raise BadRequest(f"{INPUT}[{i}] has {len(text)} characters; the limit is {limits.max_input_len}")
        texts.append(text)
    return texts


def _options(params: dict) -> DecodeOptions:
    for key, value in params.items():
        want = PARAMETERS.get(key)
        if want is None:
            continue  # Triton's own parameters (sequence_id, priority, ...) and the binary extension's
        if want is float and type(value) is int:
            value = params[key] = float(value)
        if type(value) is not want:
            raise BadRequest(f"parameter {key} must be a {want.__name__}, got {type(value).__name__}")
    beam_size = params.get("beam_size", params.get("n_best", 1))
    try:
        return DecodeOptions(max_output_len=params.get("max_output_len", 0), beam_size=beam_size,
                             n_best=params.get("n_best", 1),
                             length_penalty_alpha=params.get("length_penalty_alpha", 0.0),
                             attention_mode=params.get("attention_mode", "soft"), top_k=params.get("top_k", 0),
                             bypass_lexicon=params.get("bypass_lexicon", False),
                             allow_unknown=params.get("allow_unknown_symbols", False))
    except ValueError as e:
        raise BadRequest(f"parameter {e}") from None


def check_inputs(tensors: dict[str, list], limits: ServerConfig, params: dict | None = None,
                 ) -> tuple[list[str], list[str] | None]:
    """TEXT, and TARGET when given (one per TEXT element): the binding has decoded each tensor's
    elements; here their names, counts and contents are checked (a text call's: max_text_len)."""
    if set(tensors) not in ({INPUT}, {INPUT, TARGET}):
        raise BadRequest(f"inputs must be {INPUT}, or {INPUT} and {TARGET}; got {sorted(tensors)}")
    texts = check_texts(tensors[INPUT], limits, text=(params or {}).get("text") is True)
    if TARGET not in tensors:
        return texts, None
    targets = tensors[TARGET]
    if len(targets) != len(texts):
        raise BadRequest(f"{TARGET} has {len(targets)} elements; {INPUT} has {len(texts)}: one candidate each")
    try:
        targets = [t if isinstance(t, str) else t.decode("utf-8") for t in targets]
    except UnicodeDecodeError:
        raise BadRequest(f"{TARGET} holds bytes that are not valid UTF-8") from None
    return texts, targets


def check_call(texts: list[str], params: dict, requested: list[str], bundle: Bundle,
               targets: list[str] | None = None) -> InferCall:
    """Validate a call's parameters and requested outputs against the model (its inputs were
    checked by check_inputs, its model and version found by the binding)."""
    options = _options(dict(params))
    if params.get("text") is True:
        return _text_call(texts, params, requested, bundle, targets, options)
    per_hypothesis = "n_best" in params and targets is None
    attention = has_attention(bundle.manifest)
    return_attention = params.get("return_attention", True) and attention
    known = OUTPUTS | (N_BEST_OUTPUTS if per_hypothesis else {}) | (SCORE_OUTPUTS if targets is not None else {})
    outputs = requested or [n for n in known if return_attention or n != "ATTENTION"]
    for name in outputs:
        if name not in known:
            raise BadRequest(f"unknown output {name!r}; the model has {list(known)}")
    if "ATTENTION" in outputs and not attention:
        raise BadRequest(f"output ATTENTION was requested but model {bundle.name!r} has no attention")
    if "ATTENTION" in outputs and not return_attention:
        raise BadRequest("output ATTENTION was requested but parameter return_attention is false")
    if options.attention_mode != "soft" and not attention:
        raise BadRequest(f"parameter attention_mode {options.attention_mode!r}: model {bundle.name!r} has no attention")
    return InferCall(texts=texts, outputs=outputs, options=options, per_hypothesis=per_hypothesis, targets=targets)


def _text_call(texts: list[str], params: dict, requested: list[str], bundle: Bundle, targets, options) -> InferCall:
    if targets is not None:
        raise BadRequest(f"parameter text: running text is read, not scored; send no {TARGET}")
    if "n_best" in params:
        raise BadRequest("parameter n_best is for words; a text's words get one pronunciation each")
    outputs = requested or list(TEXT_OUTPUTS)
    for name in outputs:
        if name not in TEXT_OUTPUTS:
            raise BadRequest(f"unknown output {name!r} for text: true; the model has {list(TEXT_OUTPUTS)}")
    separator = params.get("word_separator")
    check_text_options(params.get("alphabet", ""), separator)
    return InferCall(texts=texts, outputs=outputs, options=options, per_hypothesis=False, text=True,
                     alphabet=params.get("alphabet", ""), separator=separator,
                     return_attention=params.get("return_attention", True) and has_attention(bundle.manifest))


def unread_words(answer: TextAnswer) -> str | None:
    """A text none of whose words the model reads: those words, space-separated (what the served
    models are asked to read instead); None when the model reads a word of it, or it has none."""
    words = [t for t in answer.tokens if t.token.kind == WORD]
    if not words or any(t.words for t in words):
        return None
    return " ".join(t.token.text for t in words)


def readers_of(answers: list[TextAnswer], repository) -> list[list[str] | None]:
    """For each text none of whose words the model reads, the served models that read them all
    (repository.readers); None for the others."""
    return [None if (words := unread_words(a)) is None else repository.readers(words) for a in answers]


def text_json(answer: TextAnswer, return_attention: bool, readers: list[str] | None = None) -> dict:
    """One text's TOKENS element: its tokens, their words and the words' attention on the text;
    `readers` where the model reads none of its words: the served models that read them."""
    def word(w):
        out = {"text": w.word.text, "start": w.word.start, "end": w.word.end, "pronunciation": w.text,
               "tokens": w.tokens, "origin": w.hyp.origin, "log_prob": w.hyp.log_prob,
               "alternatives": list(w.alternatives), "choice": w.choice}
        if return_attention and w.char_attn is not None:
            out["char_attention"] = {"rows": w.char_attn.shape[0], "cols": w.char_attn.shape[1],
                                     "weights": w.char_attn.ravel().tolist()}
        return out
    out = {"spoken": answer.spoken, "pronunciation": answer.pronunciation, "tokens": [
        {"text": t.token.text, "kind": t.token.kind, "start": t.token.start, "end": t.token.end,
         "spoken": t.token.spoken if t.words else "", "unread": list(t.token.unread),
         "words": [word(w) for w in t.words]} for t in answer.tokens]}
    if readers is not None:
        out["readers"] = readers
    return out


def text_output_array(name: str, answers: list[TextAnswer], return_attention: bool,
                      readers: list[list[str] | None] | None = None):
    B = len(answers)
    if name == "SCORE":
        return [B], np.array([a.log_prob for a in answers], dtype="<f4")
    if name == "OUTPUT":
        return [B], [a.pronunciation.encode("utf-8") for a in answers]
    if name == "SPOKEN":
        return [B], [a.spoken.encode("utf-8") for a in answers]
    readers = readers or [None] * B
    return [B], [json.dumps(text_json(a, return_attention, r), ensure_ascii=False).encode("utf-8")
                 for a, r in zip(answers, readers)]


def output_of(call: InferCall, name: str, answers, joiner: str, readers: list[list[str] | None] | None = None):
    """One output tensor of the call as (shape, values), a text call's or a word call's (readers:
    readers_of, for a text call's TOKENS)."""
    if call.text:
        return text_output_array(name, answers, call.return_attention, readers)
    return output_array(name, answers, joiner, call.per_hypothesis)


def output_array(name: str, hyps: list[list[Decoded]], joiner: str, per_hypothesis: bool):
    """One output tensor as (shape, values): a numpy array, or for BYTES a flat list of bytes in
    row-major order. `hyps` holds each input's hypotheses, best first."""
    B = len(hyps)
    N = max(len(h) for h in hyps) if per_hypothesis else 1
    grid = [[h[n] if n < len(h) else None for n in range(N)] for h in hyps]  # (B, N); None = missing
    lead = [B, N] if per_hypothesis else [B]
    if name == "INPUT_LENGTH":
        return [B], np.array([len(h[0].src_tokens) for h in hyps], dtype="<i4")
    if name == "HYPOTHESIS_COUNT":
        return [B], np.array([len(h) for h in hyps], dtype="<i4")
    if name == "TOKEN_LOG_PROBS":
        T = max(len(h[0].token_log_probs or ()) for h in hyps)
        out = np.zeros((B, T), dtype="<f4")
        for b, h in enumerate(hyps):
            out[b, :len(h[0].token_log_probs or ())] = h[0].token_log_probs or ()
        return [B, T], out
    if name == "OUTPUT":
        return lead, [joiner.join(d.output_tokens).encode("utf-8") if d else b"" for row in grid for d in row]
    if name == "SCORE":
        return lead, np.array([[d.log_prob if d else -np.inf for d in row] for row in grid], dtype="<f4").reshape(lead)
    if name == "OUTPUT_LENGTH":
        return lead, np.array([[d.steps if d else 0 for d in row] for row in grid], dtype="<i4").reshape(lead)
    # ATTENTION: one dense tensor needs one T and S, so shorter items are zero-padded;
    # OUTPUT_LENGTH and INPUT_LENGTH tell a client where each item's real matrix ends.
    found = [d for row in grid for d in row if d is not None]
    T, S = max(d.attn.shape[0] for d in found), max(d.attn.shape[1] for d in found)
    attn = np.zeros((B, N, T, S), dtype="<f4")
    for b, row in enumerate(grid):
        for n, d in enumerate(row):
            if d is not None:
                attn[b, n, :d.attn.shape[0], :d.attn.shape[1]] = d.attn
    return lead + [T, S], attn.reshape(lead + [T, S])


def split_bytes_tensor(raw: bytes, count: int) -> list[bytes]:
    """Split a raw BYTES tensor into its `count` elements (each length-prefixed)."""
    items, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise BadRequest(f"raw contents for {INPUT} end inside a length prefix")
        (n,), offset = _LENGTH_PREFIX.unpack_from(raw, offset), offset + 4
        if offset + n > len(raw):
            raise BadRequest(f"raw contents for {INPUT}: element {len(items)} claims {n} bytes, "
                             f"only {len(raw) - offset} left")
        items.append(raw[offset:offset + n])
        offset += n
    if len(items) != count:
        raise BadRequest(f"raw contents for {INPUT} hold {len(items)} elements; shape says {count}")
    return items


def join_bytes_tensor(items: list[bytes]) -> bytes:
    return b"".join(_LENGTH_PREFIX.pack(len(t)) + t for t in items)


def raw_of(values) -> bytes:
    """An output's values (oip.output_array) in the protocol's raw little-endian row-major form."""
    return join_bytes_tensor(values) if isinstance(values, list) else values.tobytes()


def datatype_of(name: str) -> str:
    return (OUTPUTS | N_BEST_OUTPUTS | SCORE_OUTPUTS | TEXT_OUTPUTS)[name][0]


async def run(answerer, call: InferCall, deadline_s: float | None):
    """The call's answers, each input's hypotheses: decoded, or its TARGET scored; a text call's
    TextAnswers."""
    if call.text:
        return await answerer.transduce_text(call.texts, call.options, deadline_s, call.alphabet, call.separator,
                                             call.return_attention)
    if call.targets is None:
        return await answerer.transduce(call.texts, call.options, deadline_s)
    scored = await answerer.score(list(zip(call.texts, call.targets)), call.options, deadline_s)
    return [[d] for d in scored]
