"""phonemizer's `phonemize()` answered by a running attnserve server: a TTS pipeline switches by one import.

    # from phonemizer import phonemize
    # from phonemizer.separator import Separator
    from service.client.phonemize import Separator, phonemize

    phonemize(["Hello, world!", "It costs $5.50."], language="en-us", preserve_punctuation=True, strip=True)
    # ['həloʊ, wɝld!', 'ɪt kɑsts faɪv dɑlɚz fɪfti sɛnts.']

The call shape is phonemizer 3.4's with its espeak backend: str in -> str out (one line per line), list in
-> list out, empty lines dropped unless `preserve_empty_lines`, each word's phones joined by
`separator.phone` and the words by `separator.word`, `strip`, `prepend_text`, `preserve_punctuation` with
`punctuation_marks`, `with_stress`, `tie`, `words_mismatch`. What is read is the server's: its running-text
call (TransduceText) reads numbers, currency and abbreviations as words, and each word it returns is one
word of the output. Needs only grpcio and protobuf (the base install), never phonemizer itself.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import unicodedata
from typing import Pattern, Union

import grpc

from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as pbg
from service.answering.alphabet import is_arpabet
from service.client.connection import DEFAULT_SERVER, make_channel

# phonemizer's Punctuation.default_marks(), so that the same lines keep the same marks.
DEFAULT_MARKS = ';:,.!?¡¿—…"«»“”(){}[]'

# espeak's language codes -> the served models that read them, the first one served wins. English is read
# by the stress model in IPA (ARPAbet models answer in IPA on request), so unstressed vowels are ə and ɚ;
# g2p-en (CMUdict without stress) and the task's own US English model are next.
LANGUAGE_MODELS: dict[str, tuple[str, ...]] = {
    "en-us": ("g2p-en-stress", "g2p-en", "g2p-eng-us-ipa"), "en": ("g2p-en-stress", "g2p-en", "g2p-eng-us-ipa"),
    "fr-fr": ("g2p-fra",), "fr": ("g2p-fra",), "it": ("g2p-ita",), "nl": ("g2p-nld",), "hu": ("g2p-hun",),
    "is": ("g2p-isl",), "ro": ("g2p-ron",), "sl": ("g2p-slv",), "lv": ("g2p-lav",), "ja": ("g2p-jpn-hira",),
    "ko": ("g2p-kor",), "vi": ("g2p-vie-hanoi",), "vi-vn-x-central": ("g2p-vie-hanoi",), "el": ("g2p-ell",),
    "bg": ("g2p-bul",), "hy": ("g2p-hye",), "ka": ("g2p-kat",), "km": ("g2p-khm",), "cy": ("g2p-cym-sw",),
    "mt": ("g2p-mlt-latn",), "sh": ("g2p-hbs-latn",), "sr": ("g2p-hbs-latn",), "hr": ("g2p-hbs-latn",),
    "bs": ("g2p-hbs-latn",), "ady": ("g2p-ady",),
}
WORDS_MISMATCH = ("ignore", "warn", "remove")
LANGUAGE_SWITCH = ("keep-flags", "remove-flags", "remove-utterance")
STRESS_MARKS = "ˈˌ"
TEXTS_PER_CALL, CALLS_IN_FLIGHT = 64, 4
_LOGGER = logging.getLogger("attnserve.phonemize")


class Separator:
    """phonemizer's Separator: the strings between phones, syllables and words, all different where not
    empty. phonemizer's own Separator objects are accepted as well (only .phone and .word are read)."""

    def __init__(self, word: str = " ", syllable: str | None = None, phone: str | None = None):
        given = [s for s in (phone, syllable, word) if s]
        if len(given) != len(set(given)):
            raise ValueError(f'illegal separator with word="{word}", syllable="{syllable}" and phone="{phone}", '
                             "must be all differents if not empty")
        self.phone, self.syllable, self.word = str(phone or ""), str(syllable or ""), str(word or "")

    def __eq__(self, other) -> bool:
        return (self.phone, self.syllable, self.word) == (other.phone, other.syllable, other.word)

    def __repr__(self) -> str:
        return f'(phone: "{self.phone}", syllable: "{self.syllable}", word: "{self.word}")'


default_separator = Separator(phone="", syllable="", word=" ")


def phonemize(text, language: str = "en-us", backend: str = "espeak",
              separator: Separator | None = default_separator, strip: bool = False, prepend_text: bool = False,
              preserve_empty_lines: bool = False, preserve_punctuation: bool = False,
              punctuation_marks: Union[str, Pattern] = DEFAULT_MARKS, with_stress: bool = False,
              tie: Union[bool, str] = False, language_switch: str = "keep-flags", words_mismatch: str = "ignore",
              njobs: int = 1, logger: logging.Logger | None = None, *, model: str | None = None,
              server: str | None = None, timeout_s: float = 60.0):
    """`text` (a str, one utterance a line, or a list of utterances) phonemized by the server's model for
    `language`; the same type back (a list of (text, phones) pairs with `prepend_text`).

    As phonemizer's espeak backend:
      separator     phones joined by `.phone`, words by `.word`; not `strip`: each word ends with
                    `.phone` and each line with `.word`. `.syllable` is ignored, as espeak ignores it.
      preserve_punctuation  the marks of `punctuation_marks` (a str of single marks, or a regular
                    expression) stay in place with the spaces around them, those spaces turned into
                    `.word`; other punctuation (hyphens, apostrophes the server reads inside words) is
                    dropped, as espeak drops it.
      with_stress   stress marks (ˈ ˌ) where the model marks stress: the English stress model, in IPA,
                    before the syllable; with a phone separator each mark stays with the phone after it.
                    The task models (g2p-fra, ...) transcribe no stress, so the option changes nothing there.
      tie           a tie (True: U+0361, "z": U+200D, or the one character given) between the letters of
                    each multi-letter phone (t͡ʃ, a͡ɪ); refused with a phone separator, as phonemizer does.
      words_mismatch  a mismatch here is a token the model cannot read (outside its alphabet: the server
                    flags it and reads nothing) or a word read as nothing; "warn" logs each line,
                    "remove" answers '' for it, and a summary is logged in every mode, as phonemizer's.
    Accepted and without effect: `njobs` (the server batches the texts; they go TEXTS_PER_CALL a call,
    CALLS_IN_FLIGHT calls at once) and `language_switch` (the server never switches language, so there
    are no flags to keep or remove; its value is still checked).
    Refused (RuntimeError): a `backend` other than "espeak": festival's and segments' phone sets and
    espeak-mbrola's SAMPA are not what the server answers, so a pipeline built on them would get
    other symbols under the same call.

    Beyond phonemizer: `model` names the served model and overrides `language` ("" is the server's
    default model); LANGUAGE_MODELS says which models read each language code. `server` is host:port
    or any gRPC target (default $ATTNSERVE_SERVER, else localhost:50051); a token in
    $ATTNSERVE_AUTH_TOKEN is sent as attnserve-client sends it. `timeout_s` bounds each call.
    Raises RuntimeError for an unknown language, a model not served, or a call the server refuses (an
    utterance longer than its max_text_len, for one), with the server's reason.
    """
    logger = logger or _LOGGER
    separator = default_separator if separator is None else separator
    _check_arguments(backend, tie, separator, language_switch, words_mismatch, njobs)
    tie_char = None if not tie else "\u0361" if tie is True else "\u200d" if tie == "z" else str(tie)
    if tie_char is not None and len(tie_char) != 1:
        raise RuntimeError(f"explicit tie must be a single character but is {tie}")
    lines = [line.strip(os.linesep) for line in (text.strip(os.linesep).split(os.linesep)
                                                 if isinstance(text, str) else text)]
    empty = [n for n, line in enumerate(lines) if not line.strip()]
    lines = [line for line in lines if line.strip()]

    is_mark = _mark_test(punctuation_marks)
    if model is None and language not in LANGUAGE_MODELS:
        raise RuntimeError(f'language "{language}" is not supported: no served model reads it (known: '
                           f"{', '.join(sorted(LANGUAGE_MODELS))}); name a model with model=")
    results: list = []
    if lines:  # as phonemizer, nothing to read asks nothing of the backend
        stub, target = _stub(server)
        name, arpabet = _resolve(stub, target, LANGUAGE_MODELS[language] if model is None else (model,), timeout_s)
        results = _transduce(stub, lines, name, "ipa" if arpabet else "", timeout_s)
    out, mismatched = [], 0
    for line, result in zip(lines, results):
        phonemized, unread = _assemble(line, result, separator, strip, preserve_punctuation, is_mark,
                                       with_stress, tie_char)
        if unread:
            mismatched += 1
            if words_mismatch == "warn":
                logger.warning("line %d: %d token(s) unread by model %s: %s", len(out) + 1, len(unread), name,
                               ", ".join(repr(u) for u in unread))
            if words_mismatch == "remove":
                phonemized = ""
        out.append(phonemized)
    if mismatched:
        logger.warning("words count mismatch on %s%% of the lines (%s/%s)",
                       round(mismatched / len(lines), 2) * 100, mismatched, len(lines))
        if words_mismatch == "remove":
            logger.warning("removing the mismatched lines")

    if preserve_empty_lines:
        for n in empty:
            if prepend_text:
                lines.insert(n, "")
            out.insert(n, "")
    if prepend_text:
        return list(zip(lines, out))
    return os.linesep.join(out) if isinstance(text, str) else out


def _check_arguments(backend, tie, separator, language_switch, words_mismatch, njobs) -> None:
    if backend != "espeak":
        raise RuntimeError(f"backend {backend!r}: the server answers in place of phonemizer's espeak backend "
                           "only (IPA, espeak's separators); festival's and segments' phone sets and "
                           "espeak-mbrola's SAMPA are not what it returns")
    if tie and separator.phone:
        raise RuntimeError(f'the "tie" option is incompatible with phone separator (which is "{separator.phone}")')
    if language_switch not in LANGUAGE_SWITCH:
        raise RuntimeError(f"language_switch must be one of {LANGUAGE_SWITCH}, got {language_switch!r}")
    if words_mismatch not in WORDS_MISMATCH:
        raise RuntimeError(f"words_mismatch must be one of {WORDS_MISMATCH}, got {words_mismatch!r}")
    if not isinstance(njobs, int) or njobs < 1:
        raise RuntimeError(f"njobs must be a positive integer, got {njobs!r}")


@functools.lru_cache(maxsize=8)
def _channel(target: str, token: str) -> grpc.Channel:
    """One channel per server (and token), kept: a pipeline calling once per utterance reuses it."""
    return make_channel(target, token=token)


def _stub(server: str | None) -> tuple[pbg.TransducerStub, str]:
    # The environment is read at call time, as attnserve-client reads it.
    target = server or os.environ.get("ATTNSERVE_SERVER") or DEFAULT_SERVER
    return pbg.TransducerStub(_channel(target, os.environ.get("ATTNSERVE_AUTH_TOKEN", ""))), target


_MODELS: dict[tuple[str, str], tuple[str, bool]] = {}  # (server, model asked) -> (its name, outputs ARPAbet)


def _resolve(stub, target: str, candidates: tuple[str, ...], timeout_s: float) -> tuple[str, bool]:
    """The first of `candidates` the server serves, by its name, and whether it answers in ARPAbet (then
    asked for IPA). Kept per server and name; "" (the server's default model) is asked every time."""
    for name in candidates:
        if (target, name) in _MODELS:
            return _MODELS[target, name]
        try:
            info = stub.GetModelInfo(pb.GetModelInfoRequest(model_name=name), timeout=timeout_s)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND and name != candidates[-1]:
                continue
            raise RuntimeError(f"model {name!r} at {target}: {e.details()}") from e
        found = info.name, is_arpabet(list(info.target_vocab))
        if name:
            _MODELS[target, name] = found
        return found
    raise AssertionError("unreachable: the last candidate returns or raises")


def _transduce(stub, lines: list[str], model: str, alphabet: str, timeout_s: float):
    """Each line's TextResult, in order: TEXTS_PER_CALL lines a call, CALLS_IN_FLIGHT calls at once."""
    options = pb.TextOptions(alphabet=alphabet, return_attention=False)
    batches = [lines[i:i + TEXTS_PER_CALL] for i in range(0, len(lines), TEXTS_PER_CALL)]
    pending = []
    try:
        for n in range(len(batches) + CALLS_IN_FLIGHT):
            if n < len(batches):
                request = pb.TransduceTextRequest(texts=batches[n], model_name=model, options=options)
                pending.append((n, stub.TransduceText.future(request, timeout=timeout_s)))
            if len(pending) == CALLS_IN_FLIGHT or n >= len(batches) and pending:
                first, future = pending.pop(0)
                try:
                    yield from future.result().results
                except grpc.RpcError as e:
                    raise RuntimeError(f"model {model!r}, lines {first * TEXTS_PER_CALL + 1}.."
                                       f"{first * TEXTS_PER_CALL + len(batches[first])}: {e.details()}") from e
    finally:
        for _, future in pending:
            future.cancel()


def _mark_test(marks: Union[str, Pattern]):
    """Whether a token the server calls punctuation is made of marks, as phonemizer's Punctuation reads them."""
    if isinstance(marks, Pattern):
        whole = re.compile(r"(?:(?:" + marks.pattern + r")|\s)+", marks.flags)
        return lambda token: whole.fullmatch(token) is not None
    if isinstance(marks, str):
        chars = set(marks)
        return lambda token: all(c in chars for c in token)
    raise ValueError("punctuation marks must be defined as a string or re.Pattern")


def _phones(result: pb.Result, with_stress: bool, tie: str | None) -> list[str]:
    """A word's phones: the result's tokens, each stress mark of its text joined to the phone after it."""
    tokens = list(result.output_tokens)
    if with_stress:
        text, pos, marked = result.output_text, 0, []
        for token in tokens:
            at = text.find(token, pos)
            marked.append(token if at < 0 else "".join(c for c in text[pos:at] if c in STRESS_MARKS) + token)
            pos = pos if at < 0 else at + len(token)
        tokens = marked
    else:
        tokens = [t for t in (t.strip(STRESS_MARKS) for t in tokens) if t]
    return tokens if tie is None else [_tied(t, tie) for t in tokens]


def _tied(phone: str, tie: str) -> str:
    """The tie between a phone's letters: t͡ʃ; diacritics and modifier letters (ʰ ː) stay with theirs."""
    parts: list[str] = []
    for c in phone.replace("\u0361", tie):  # a tie the model writes (d͡ʒ in Hungarian) becomes the one asked for
        letter = unicodedata.category(c) in ("Ll", "Lu", "Lo")
        if letter and parts and not parts[-1].endswith(tie) and \
                any(unicodedata.category(p) in ("Ll", "Lu", "Lo") for p in parts[-1]):
            parts.append(c)
        elif parts:
            parts[-1] += c
        else:
            parts.append(c)
    return tie.join(parts)


def _assemble(line: str, result: pb.TextResult, sep, strip: bool, preserve: bool, is_mark, with_stress: bool,
              tie: str | None) -> tuple[str, list[str]]:
    """One line's output from the server's tokens, in the text's order, and the tokens left unread.

    Each word read is its phones joined by sep.phone (and one more, not stripped); consecutive words
    are joined by sep.word. A run of kept marks with only spaces between them is one group, taken from
    the text with the spaces on either side (phonemizer's regular expression takes the same), spaces
    turned into sep.word: the word before it loses its word separator, the line ending on it gets one."""
    items: list[tuple[str, str]] = []  # ("word", phones) or ("mark", (start, end) of the group)
    unread: list[str] = []
    for token in result.tokens:
        if token.words:
            for word in token.words:
                phones = _phones(word.result, with_stress, tie)
                if phones:
                    items.append(("word", sep.phone.join(phones) + ("" if strip else sep.phone)))
                else:
                    unread.append(word.text)
        elif preserve and token.kind in (pb.TOKEN_KIND_PUNCTUATION, pb.TOKEN_KIND_SYMBOL) and is_mark(token.text):
            start, end = token.start, token.end
            if items and items[-1][0] == "mark" and not line[items[-1][1][1]:start].strip():
                start = items.pop()[1][0]
            items.append(("mark", (start, end)))
        elif token.unread:
            unread.append(token.text)
    out = ""
    for n, (kind, value) in enumerate(items):
        if kind == "word":
            out += (sep.word if n and items[n - 1][0] == "word" else "") + value
            continue
        start, end = value
        while start > 0 and line[start - 1].isspace():
            start -= 1
        while end < len(line) and line[end].isspace():
            end += 1
        group = line[start:end].replace(" ", sep.word)
        last = n == len(items) - 1
        out += group + ("" if not last or strip or group.endswith(sep.word) else sep.word)
    if items and items[-1][0] == "word" and not strip:
        out += sep.word
    return out, unread
