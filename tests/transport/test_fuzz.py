"""Property-based: thousands of generated Transduce requests, valid and not, against one real server.

Every reply must be a correct result or the status the request deserves (INVALID_ARGUMENT,
NOT_FOUND; RESOURCE_EXHAUSTED is always allowed) - never UNKNOWN, INTERNAL or a hang
(every call has a deadline). Requests are encoded here on the wire level, so inputs may hold
lone surrogates (invalid UTF-8 once encoded), which no protobuf library would send.
"""
import math
import re
from collections import Counter
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from attnserve.bundle.normalization import lowercases
from attnserve.v1 import attnserve_pb2 as pb
from service.engine.bundle import load_bundle
from service.config import BatcherConfig, Config, EngineConfig, ServerConfig
from service.transport.servicer import SERVICE_NAME
from tests.live import ThreadServer

MAX_INPUTS, MAX_INPUT_LEN, MAX_OUTPUT_LEN = 8, 20, 12
EXAMPLES = 1000  # about 2.8 requests each: thousands of requests, within the suite's time on 2 cores
DEADLINE_S = 20.0
OK, INVALID, NOT_FOUND, EXHAUSTED = (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT,
                                     grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED)


@dataclass
class Spec:
    inputs: list[str]
    model_name: str
    model_version: str
    request_id: str
    options: pb.DecodeOptions


# --- strategies ----------------------------------------------------------------------------------

CHARS = st.one_of(
    st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")),  # what the model knows
    st.characters(),  # any code point but surrogates
    st.characters(categories=["Cs"]),  # lone surrogates: invalid UTF-8 on the wire
    st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp"]),  # control, format and space characters
    st.sampled_from(["😀", "\u200d", "\ufeff", "\x00", "İ", "ß", "ﬃ", "\u0301"]),  # İ, ﬃ: longer in lower()
)
# Multi-code-point graphemes (skin tone, flag, combining accent) go in as pieces.
PIECES = st.one_of(CHARS, st.sampled_from(["👍🏽", "🇬🇧", "e\u0301", "👩\u200d💻"]))
TEXT = st.one_of(st.lists(PIECES, max_size=MAX_INPUT_LEN + 2).map("".join),
                 st.integers(MAX_INPUT_LEN + 1, 20_000).map(lambda n: "a" * n))  # oversized
UINT32 = st.one_of(st.integers(0, 20), st.sampled_from([16, 17, 1000, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
ALPHA = st.one_of(st.none(), st.floats(0, 4), st.floats(allow_nan=True, allow_infinity=True, width=32))


@st.composite
def options(draw) -> pb.DecodeOptions:
    o = pb.DecodeOptions(max_output_len=draw(UINT32), beam_size=draw(st.one_of(st.integers(0, 4), UINT32)),
                         n_best=draw(st.one_of(st.integers(0, 3), UINT32)))
    if (ra := draw(st.one_of(st.none(), st.booleans()))) is not None:
        o.return_attention = ra
    if (alpha := draw(ALPHA)) is not None:
        o.length_penalty_alpha = alpha
    return o


ANY_SPEC = st.builds(
    Spec,
    inputs=st.lists(TEXT, max_size=MAX_INPUTS + 2),
    model_name=st.one_of(st.just(""), st.just("tiny"), st.text(CHARS, max_size=8)),
    model_version=st.one_of(st.just(""), st.just("1"), st.text(CHARS, max_size=4)),
    request_id=st.text(CHARS, max_size=8),
    options=options(),
)


@st.composite
def valid_options(draw) -> pb.DecodeOptions:
    beam = draw(st.sampled_from([0, 1, 1, 2, 3, 16]))
    o = pb.DecodeOptions(max_output_len=draw(st.integers(0, 2 * MAX_OUTPUT_LEN)), beam_size=beam,
                         n_best=draw(st.integers(0, max(1, beam))))
    if (ra := draw(st.one_of(st.none(), st.booleans()))) is not None:
        o.return_attention = ra
    if (alpha := draw(st.one_of(st.none(), st.floats(0, 4)))) is not None:
        o.length_penalty_alpha = alpha
    return o


# Requests that should succeed: a good share of the examples must reach the model, not just
# the validation.
# The model's alphabet (a symbol outside it is refused), with spaces and hyphens between words.
VALID_TEXT = st.text(st.one_of(st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")),
                               st.sampled_from(["'", " ", "-", "\t"])),
                     min_size=1, max_size=MAX_INPUT_LEN).filter(str.strip)
VALID_SPEC = st.builds(Spec, inputs=st.lists(VALID_TEXT, min_size=1, max_size=MAX_INPUTS),
                       model_name=st.sampled_from(["", "tiny"]), model_version=st.sampled_from(["", "1"]),
                       request_id=st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
                       options=valid_options())
SPECS = st.one_of(VALID_SPEC, ANY_SPEC)


# --- wire encoding and the oracle ----------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode(spec: Spec) -> bytes:
    """TransduceRequest wire bytes; strings keep lone surrogates (encoded as the invalid UTF-8 they are)."""
    s = lambda text: text.encode("utf-8", "surrogatepass")  # noqa: E731
    out = b"".join(_field(1, s(t)) for t in spec.inputs) + _field(2, spec.options.SerializeToString())
    for number, text in ((3, spec.model_name), (4, spec.model_version), (5, spec.request_id)):
        if text:
            out += _field(number, s(text))
    return out


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


ALPHABET: set[str] = set()  # the tiny model's source symbols, set by the test from its manifest


def words_of(text: str) -> list[str]:
    """The words the server answers an input as: several when spaces or hyphens (outside the
    alphabet) separate them (service/answering/compound.py), else the stripped input."""
    stripped = text.strip()
    seps = set("".join(re.findall(r"[\s\-]+", stripped)))
    if not seps or seps & ALPHABET:
        return [stripped]
    return [w for w in re.split(r"[\s\-]+", stripped) if w]


def deserved(spec: Spec) -> set[grpc.StatusCode]:
    """The statuses the request may get: one of its faults, or OK when it has none."""
    if any(has_surrogate(t) for t in [*spec.inputs, spec.model_name, spec.model_version, spec.request_id]):
        return {INVALID}  # the message as a whole is not valid protobuf (strings must be UTF-8)
    faults = set()
    if spec.model_name not in ("", "tiny") or spec.model_version not in ("", "1"):
        faults.add(NOT_FOUND)
    o = spec.options
    beam, n_best = max(1, o.beam_size), max(1, o.n_best)
    alpha = o.length_penalty_alpha if o.HasField("length_penalty_alpha") else 0.0  # float32 as the server sees it
    if (not spec.inputs or len(spec.inputs) > MAX_INPUTS
            or any(not t.strip() or len(t) > MAX_INPUT_LEN for t in spec.inputs)
            or not 1 <= beam <= 16 or not 1 <= n_best <= beam or not 0.0 <= alpha <= 4.0
            or any(c not in ALPHABET for t in spec.inputs for w in words_of(t) for c in w)  # outside the alphabet
            or any(not words_of(t) for t in spec.inputs)):  # separators and nothing else
        faults.add(INVALID)
    return faults or {OK}


def check_response(reply: pb.TransduceResponse, inputs: list[str], o: pb.DecodeOptions, request_id: str,
                   lowercase: bool, tgt_vocab: set[str]) -> None:
    assert reply.model_name == "tiny" and reply.model_version == "1" and reply.request_id == request_id
    assert len(reply.results) == len(inputs)
    n_best = max(1, o.n_best)
    limit = min(o.max_output_len or MAX_OUTPUT_LEN, MAX_OUTPUT_LEN)
    for text, r in zip(inputs, reply.results):
        hyps = [r, *r.alternatives]
        words = words_of(text)
        compound = words != [text.strip()]
        assert len(hyps) == (1 if compound else n_best)  # several words: one joined answer
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert len(h.output_tokens) <= limit * len(words) and set(h.output_tokens) <= tgt_vocab  # per word
            assert math.isfinite(h.log_prob) and h.log_prob <= 1e-6
            if not (o.return_attention if o.HasField("return_attention") else True):
                assert not h.HasField("attention")
                continue
            a = h.attention
            assert "".join(a.source_labels) == (text.lower() if lowercase else text).strip()
            assert a.cols == len(a.source_labels)
            assert a.rows == len(a.target_labels) == len(h.output_tokens) + (1 if h.finished else 0)
            m = np.array(a.weights, dtype=np.float64).reshape(a.rows, a.cols)
            assert np.isfinite(m).all() and np.allclose(m.sum(axis=1), 1.0, atol=1e-4)


# --- the test ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(tiny_bundle):
    cfg = Config(model_dir=tiny_bundle,
                 server=ServerConfig(host="127.0.0.1", port=0, metrics_port=-1, max_inputs_per_request=MAX_INPUTS,
                                     max_input_len=MAX_INPUT_LEN),
                 batcher=BatcherConfig(max_batch_size=32), engine=EngineConfig(max_output_len=MAX_OUTPUT_LEN))
    with ThreadServer(cfg) as server, grpc.insecure_channel(server.address) as channel:
        yield channel


def test_generated_requests_get_a_result_or_a_proper_status(live, tiny_bundle, capsys):
    manifest = load_bundle(tiny_bundle).manifest
    lowercase, tgt_vocab = lowercases(manifest.source_normalization), set(manifest.tgt_vocab)
    ALPHABET.update(t for i, t in enumerate(manifest["src_vocab"]) if i not in manifest["special_ids"].values())
    raw_transduce = live.unary_unary(f"/{SERVICE_NAME}/Transduce")  # bytes in, bytes out
    outcomes: Counter = Counter()

    def code_and_reply(future) -> tuple[grpc.StatusCode, bytes | None]:
        try:
            return OK, future.result()
        except grpc.RpcError as e:
            return e.code(), None

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(specs=st.lists(SPECS, min_size=1, max_size=3), noise=st.binary(max_size=120))
    def one_round(specs, noise):
        # The round's requests go out together, so they share the server's batches.
        calls = [(spec, raw_transduce.future(encode(spec), timeout=DEADLINE_S)) for spec in specs]
        noisy = raw_transduce.future(noise, timeout=DEADLINE_S)
        for spec, future in calls:
            code, raw = code_and_reply(future)
            outcomes[code.name] += 1
            allowed = deserved(spec) | {EXHAUSTED}
            assert code in allowed, f"{code.name} for {spec!r}; expected one of {sorted(c.name for c in allowed)}"
            if code == OK:
                check_response(pb.TransduceResponse.FromString(raw), spec.inputs, spec.options, spec.request_id,
                               lowercase, tgt_vocab)
        code, raw = code_and_reply(noisy)
        outcomes[code.name] += 1
        assert code in {OK, INVALID, NOT_FOUND, EXHAUSTED}, f"{code.name} for random bytes {noise!r}"
        if code == OK:  # the bytes happened to be a valid request
            req = pb.TransduceRequest.FromString(noise)
            check_response(pb.TransduceResponse.FromString(raw), list(req.inputs), req.options, req.request_id,
                           lowercase, tgt_vocab)

    one_round()
    tried = sum(outcomes.values())
    with capsys.disabled():
        print(f"\nhypothesis: {tried} Transduce requests tried: {dict(outcomes)}")
    assert tried >= 1000 and outcomes["OK"] > 0 and outcomes["INVALID_ARGUMENT"] > 0
