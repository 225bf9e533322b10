"""The edge of the native API: attnserve.v1 protobuf messages <-> domain values, and request validation.

The Open Inference Protocol's edge is oip.py (both its bindings: kserve.py for gRPC, http.py for
REST). Beside these two, only the servicers touch generated protobuf code.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from attnserve.bundle import Manifest
from attnserve.v1 import attnserve_pb2 as pb
from service.answering.alphabet import ALPHABETS
from service.answering.reading import TextAnswer, WordAnswer
from service.config import ServerConfig
from service.domain import BadRequest, Decoded, DecodeOptions, UnknownModel

EOS_LABEL = "</s>"
ATTENTION_MODE_OF = {pb.ATTENTION_MODE_SOFT: "soft", pb.ATTENTION_MODE_HARD: "hard", pb.ATTENTION_MODE_TOP_K: "topk"}
ORIGIN_OF = {"MODEL": pb.ORIGIN_MODEL, "LEXICON": pb.ORIGIN_LEXICON, "OVERRIDE": pb.ORIGIN_OVERRIDE,
             "RULE": pb.ORIGIN_RULE}


@dataclass(frozen=True)
class TransduceCall:
    texts: list[str]
    options: DecodeOptions
    return_attention: bool
    request_id: str = ""
    model_name: str = ""  # "" = the server's default model
    model_version: str = ""


def parse_transduce(raw: bytes, limits: ServerConfig) -> TransduceCall:
    """Parse and validate a serialized TransduceRequest (which model serves it is the caller's to find).

    The servicer receives raw bytes so that invalid UTF-8 in `inputs` becomes a
    clear INVALID_ARGUMENT here instead of an opaque deserialization failure.
    """
    try:
        req = pb.TransduceRequest.FromString(raw)
    except DecodeError:
        raise BadRequest("malformed TransduceRequest (not a valid message, or inputs not valid UTF-8)") from None
    if not req.inputs:
        raise BadRequest("inputs is empty: send at least one input")
    if len(req.inputs) > limits.max_inputs_per_request:
        raise BadRequest(f"inputs has {len(req.inputs)} entries; at most {limits.max_inputs_per_request} per request")
    for i, text in enumerate(req.inputs):
        if not text.strip():
            raise BadRequest(f"inputs[{i}] is empty")
        if len(text) > limits.max_input_len:
            raise BadRequest(f"inputs[{i}] has {len(text)} characters; the limit is {limits.max_input_len}")
    opts = req.options
    try:
        options = DecodeOptions(max_output_len=opts.max_output_len, beam_size=max(1, opts.beam_size),
                                n_best=max(1, opts.n_best),
                                length_penalty_alpha=opts.length_penalty_alpha
                                if opts.HasField("length_penalty_alpha") else 0.0,
                                attention_mode=ATTENTION_MODE_OF.get(opts.attention_mode, str(opts.attention_mode)),
                                top_k=opts.top_k, bypass_lexicon=opts.bypass_lexicon,
                                allow_unknown=opts.allow_unknown_symbols)
    except ValueError as e:
        raise BadRequest(f"options.{e}") from None
    return TransduceCall(texts=list(req.inputs), options=options, request_id=req.request_id,
                         return_attention=opts.return_attention if opts.HasField("return_attention") else True,
                         model_name=req.model_name, model_version=req.model_version)


def check_version(requested: str, name: str, served: str) -> None:
    """A request may name the served version of its model, or none."""
    if requested and requested != served:
        raise UnknownModel(f"model_version {requested!r} of {name!r} is not served here (serving version {served!r})")


# Responses are filled in place (add(), then the fields): a message handed to its parent's constructor
# is copied whole, at every level it nests.
def _fill_hyp(out: pb.Result, d: Decoded, tokens: list[str], text: str, score: float, return_attention: bool) -> None:
    """One hypothesis, its output given as `tokens` and `text` (the model's own symbols, or a word's
    in the alphabet its text call asked for)."""
    out.output_tokens.extend(tokens)
    out.output_text, out.log_prob, out.finished = text, d.log_prob, d.finished
    out.score, out.origin = score, ORIGIN_OF[d.origin]
    if d.token_log_probs:
        out.token_log_probs.extend(d.token_log_probs)
    if d.unknown_positions:
        out.unknown_positions.extend(d.unknown_positions)
    if return_attention and d.attn is not None:  # a model without attention has none to return
        T, S = d.attn.shape
        out.attention.CopyFrom(pb.Attention(rows=T, cols=S, weights=d.attn.ravel().tolist(), source_labels=d.src_tokens,
                                            target_labels=tokens + ([EOS_LABEL] if d.finished else [])))


def _fill_result(out: pb.Result, hyps: list[Decoded], joiner: str, return_attention: bool) -> None:
    """The best hypothesis, with the others (beam search n_best) as its alternatives."""
    d = hyps[0]
    _fill_hyp(out, d, d.output_tokens, joiner.join(d.output_tokens), d.log_prob if d.score is None else d.score,
              return_attention)
    for h in hyps[1:]:
        _fill_result(out.alternatives.add(), [h], joiner, return_attention)


def to_result(hyps: list[Decoded], joiner: str, return_attention: bool) -> pb.Result:
    out = pb.Result()
    _fill_result(out, hyps, joiner, return_attention)
    return out


def to_response(results: list[list[Decoded]], call: TransduceCall, joiner: str, name: str, version: str):
    response = pb.TransduceResponse(model_name=name, model_version=version, request_id=call.request_id)
    for hyps in results:
        _fill_result(response.results.add(), hyps, joiner, call.return_attention)
    return response


@dataclass(frozen=True)
class TextCall:
    texts: list[str]
    options: DecodeOptions
    return_attention: bool
    alphabet: str = ""
    separator: str | None = None  # None: the default for the alphabet
    request_id: str = ""
    model_name: str = ""
    model_version: str = ""


MAX_SEPARATOR_LEN = 16
KIND_OF = {"word": pb.TOKEN_KIND_WORD, "number": pb.TOKEN_KIND_NUMBER, "abbreviation": pb.TOKEN_KIND_ABBREVIATION,
           "punctuation": pb.TOKEN_KIND_PUNCTUATION, "symbol": pb.TOKEN_KIND_SYMBOL}


def check_text_args(texts: list[str], alphabet: str, separator: str | None, limits: ServerConfig,
                    what: str = "texts") -> None:
    """What every text call is checked for, on both APIs: the count, each text's length
    (max_text_len), the alphabet and the separator."""
    if not texts:
        raise BadRequest(f"{what} is empty: send at least one text")
    if len(texts) > limits.max_inputs_per_request:
        raise BadRequest(f"{what} has {len(texts)} entries; at most {limits.max_inputs_per_request} per request")
    for i, text in enumerate(texts):
        if not text.strip():
            raise BadRequest(f"{what}[{i}] is empty")
        if len(text) > limits.max_text_len:
            raise BadRequest(f"{what}[{i}] has {len(text)} characters; the limit is max_text_len "
                             f"({limits.max_text_len})")
    check_text_options(alphabet, separator)


def check_text_options(alphabet: str, separator: str | None) -> None:
    if alphabet not in ALPHABETS:
        raise BadRequest(f"alphabet {alphabet!r} is not one of {[a for a in ALPHABETS if a]}")
    if separator is not None and len(separator) > MAX_SEPARATOR_LEN:
        raise BadRequest(f"word_separator has {len(separator)} characters; at most {MAX_SEPARATOR_LEN}")


def parse_text(req: pb.TransduceTextRequest, limits: ServerConfig) -> TextCall:
    opts = req.options
    separator = opts.word_separator if opts.HasField("word_separator") else None
    check_text_args(list(req.texts), opts.alphabet, separator, limits)
    try:
        options = DecodeOptions(max_output_len=opts.max_output_len, beam_size=max(1, opts.beam_size),
                                bypass_lexicon=opts.bypass_lexicon, allow_unknown=opts.allow_unknown_symbols)
    except ValueError as e:
        raise BadRequest(f"options.{e}") from None
    return TextCall(texts=list(req.texts), options=options, alphabet=opts.alphabet, separator=separator,
                    return_attention=opts.return_attention if opts.HasField("return_attention") else True,
                    request_id=req.request_id, model_name=req.model_name, model_version=req.model_version)


def _fill_text_word(word: pb.TextWord, w: WordAnswer, text: str, return_attention: bool) -> None:
    word.text, word.start, word.end, word.choice = w.word.text, w.word.start, w.word.end, w.choice
    if w.alternatives:
        word.alternatives.extend(w.alternatives)
    d = w.hyp
    _fill_hyp(word.result, d, w.tokens, w.text, d.log_prob, return_attention)
    if return_attention and d.attn is not None and w.char_attn is not None:
        word.char_attention.CopyFrom(pb.Attention(
            rows=d.attn.shape[0], cols=w.char_attn.shape[1], weights=w.char_attn.ravel().tolist(),
            source_labels=list(text[w.word.start:w.word.end]),
            target_labels=w.tokens + ([EOS_LABEL] if d.finished else [])))


def _fill_text_result(out: pb.TextResult, answer: TextAnswer, return_attention: bool) -> None:
    complete = True
    for t in answer.tokens:
        token = out.tokens.add()
        token.text, token.kind, token.start, token.end = t.token.text, KIND_OF[t.token.kind], t.token.start, t.token.end
        if t.words:
            token.spoken = t.token.spoken
            for w in t.words:
                _fill_text_word(token.words.add(), w, answer.text, return_attention)
        if t.token.unread:
            token.unread.extend(t.token.unread)
            complete = False
    out.spoken, out.pronunciation, out.log_prob, out.complete = answer.spoken, answer.pronunciation, answer.log_prob, complete


def to_text_response(answers: list[TextAnswer], call: TextCall, name: str, version: str) -> pb.TransduceTextResponse:
    response = pb.TransduceTextResponse(model_name=name, model_version=version, request_id=call.request_id)
    for a in answers:
        _fill_text_result(response.results.add(), a, call.return_attention)
    return response


@dataclass(frozen=True)
class ScoreCall:
    pairs: list[tuple[str, str]]  # (source, candidate), items flattened in order
    counts: list[int]  # candidates per item, to regroup the results
    return_attention: bool
    model_name: str = ""
    model_version: str = ""


def parse_score(req: pb.ScoreRequest, limits: ServerConfig) -> ScoreCall:
    if not req.items:
        raise BadRequest("items is empty: send at least one source with its candidates")
    pairs, counts = [], []
    for i, item in enumerate(req.items):
        if not item.source.strip():
            raise BadRequest(f"items[{i}].source is empty")
        if len(item.source) > limits.max_input_len:
            raise BadRequest(f"items[{i}].source has {len(item.source)} characters; the limit is {limits.max_input_len}")
        if not item.candidates:
            raise BadRequest(f"items[{i}].candidates is empty")
        pairs += [(item.source, c) for c in item.candidates]
        counts.append(len(item.candidates))
    if len(pairs) > limits.max_inputs_per_request:
        raise BadRequest(f"{len(pairs)} candidates in all; at most {limits.max_inputs_per_request} per request")
    return ScoreCall(pairs=pairs, counts=counts, model_name=req.model_name, model_version=req.model_version,
                     return_attention=req.return_attention if req.HasField("return_attention") else True)


def to_score_response(scored: list[Decoded], call: ScoreCall, joiner: str, name: str, version: str):
    response, start = pb.ScoreResponse(model_name=name, model_version=version), 0
    for n in call.counts:
        item = response.results.add()
        for d in scored[start:start + n]:
            _fill_result(item.candidates.add(), [d], joiner, call.return_attention)
        start += n
    return response


def request_id_of(raw: bytes) -> str:
    """The request_id of a serialized request, or "" when it does not parse."""
    try:
        return pb.TransduceRequest.FromString(raw).request_id
    except DecodeError:
        return ""


def to_error_response(code_name: str, message: str, request_id: str) -> pb.TransduceResponse:
    return pb.TransduceResponse(request_id=request_id, error=pb.Error(code=code_name, message=message))


def to_model_info(manifest: Manifest, precision: str = "") -> pb.ModelInfo:
    metrics = {}
    for split, values in manifest.metrics.items():
        if isinstance(values, dict):
            metrics.update({f"{split}_{k}": float(v) for k, v in values.items() if isinstance(v, (int, float))})
    rest = {k: v for k, v in manifest.to_dict().items() if k not in ("src_vocab", "tgt_vocab")}
    return pb.ModelInfo(name=manifest.name, version=manifest.version,
                        source_vocab=manifest.src_vocab, target_vocab=manifest.tgt_vocab,
                        config_json=json.dumps(manifest.extra.get("model_config", {})), metrics=metrics,
                        manifest_json=json.dumps(rest), has_attention=manifest.has_attention,
                        attention_modes=list(manifest.attention_modes), precision=precision)


def has_attention(manifest: Manifest) -> bool:
    """Whether the bundle's model has attention (older bundles: attnserve/bundle/migrate.py)."""
    return manifest.has_attention


def attention_modes(manifest: Manifest) -> list[str]:
    """The DecodeOptions.attention_mode values the bundle takes."""
    return list(manifest.attention_modes)


def to_model_list(statuses, versions_of, default: str) -> pb.ListModelsResponse:
    """statuses: the repository's ModelStatus list; versions_of(name): its version directories."""
    return pb.ListModelsResponse(models=[
        pb.ModelStatus(name=st.name, versions=versions_of(st.name), served_version=st.version, state=st.state,
                       reason=st.reason, is_default=st.name == default) for st in statuses])
