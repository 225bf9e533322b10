"""Texts through the per-word path, as data: the answerer (answerer.py) reads each text into
tokens (text.py), answers the words of every text of the call at once as single words are answered
(the cache keyed by word, the overrides and the lexicon, else the model; each word once, in one
submission to the batcher, each decoded as its own short sequence), and this module makes the
texts' answers from the read tokens and those words' answers: a pure function of them, each word's
attention mapped back onto the characters of the text.

A word the lexicon has several pronunciations of (read, record, live, lead) gets the lexicon's first,
its primary one, and says so; the others come as alternatives, from the pronunciations the one
lookup found (cache.Answer). Where the model's bundle names a context model (context.py) and it
covers the word, the reading is chosen by the word's sentence instead: each such occurrence
(homograph_asks) gets its own answer, by its span (assemble's `chosen`), its choice naming the
context words that decided it; the others stay as alternatives.

A word whose pronunciation a text rule gives (an elided clitic, text.py) is not answered: its
answer is the rule's symbols, attention spread over its letters. A word answered with nothing (no
symbol) is flagged: its token unread, the word kept with the reason as its choice, never dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from service.answering.alphabet import IPA, MODEL, to_ipa
from service.answering.cache import Answer
from service.answering.lexicon import Targets
from service.answering.text import PUNCTUATION, Spoken, Token, joined, spoken_text
from service.domain import LEXICON, OVERRIDE, RULE, Decoded, DecodeOptions, InvalidInput

RULE_CHOICE = "rule: the language's text rules give it (textdata)"
EMPTY_CHOICE = "unread: answered with no symbol"

ARPABET_WORDS, PLAIN_WORDS = " | ", " "  # the default word separators: phonemes joined by spaces, or not
SAID_ENTRIES = 20000  # words' answers as shown, kept beside the response cache (emptied whole when full)


@dataclass(frozen=True)
class WordAnswer:
    word: Spoken
    hyp: Decoded  # the model's (or the lexicon's, forced) answer for the word alone
    tokens: list[str]  # its pronunciation in the alphabet asked for, one symbol per attention row
    text: str  # the same as one string
    char_attn: np.ndarray | None  # (rows, word.end - word.start): the attention on the text's own characters
    alternatives: tuple[str, ...] = ()  # the lexicon's other pronunciations, in the alphabet asked for
    choice: str = ""  # why this pronunciation


@dataclass(frozen=True)
class TokenAnswer:
    token: Token
    words: tuple[WordAnswer, ...]  # empty for punctuation and for what is unread


@dataclass(frozen=True)
class TextAnswer:
    text: str
    tokens: tuple[TokenAnswer, ...]
    spoken: str  # the text as read, punctuation in place
    pronunciation: str  # the words' pronunciations by the separator, punctuation (and what is unread) in place

    @property
    def log_prob(self) -> float:
        return sum(w.hyp.log_prob for t in self.tokens for w in t.words)


@dataclass(frozen=True)
class Said:
    """A word's answer as shown: its symbols and string in the alphabet asked for, the lexicon's
    other pronunciations (same alphabet), and why this pronunciation."""

    hyp: Decoded
    tokens: list[str]
    text: str
    alternatives: tuple[str, ...]
    choice: str


def char_attention(normalize: Callable[[str], str], word: Spoken, attn: np.ndarray) -> np.ndarray:
    """A word's attention (rows, its source symbols) on the text's characters [word.start, word.end):
    each symbol's column onto the character it came from where the word is read as written (a
    character's normalization may give it none, or several), else each row spread evenly over the
    span's characters (a number's words read the whole number)."""
    width = word.end - word.start
    out = np.zeros((attn.shape[0], width), dtype=np.float32)
    if word.letters is not None:
        columns = [pos - word.start for c, pos in zip(word.text, word.letters) for _ in normalize(c)]
        if len(columns) == attn.shape[1]:
            np.add.at(out, (slice(None), columns), attn)
            return out
    out += attn.sum(axis=1, keepdims=True) / width
    return out


def _choice(pronunciations: Targets | None, origin: str, options: DecodeOptions, lexicon_on: bool,
            context: str = "") -> str:
    if origin == OVERRIDE:
        return "override: the model's own word"
    if origin == LEXICON:
        n = len(pronunciations) if pronunciations else 1
        rule = f"the context model {context!r} does not cover it" if context else "no context model"
        return "lexicon: its only pronunciation" if n == 1 else \
            f"lexicon: the first of its {n} pronunciations (the primary one; {rule})"
    if options.bypass_lexicon or not lexicon_on:
        return "model: the lexicon was bypassed"
    return "model: not in the lexicon"


def word_keys(read: list[list[Token]], allow_unknown: bool,
              tokenize: Callable[[str], list[str]]) -> dict[str, tuple[str, ...]]:
    """Each word the texts are read as, as written -> as the model tokenizes it: the words to answer
    (a token's with something unreadable only where unknown symbols are allowed)."""
    keys: dict[str, tuple[str, ...]] = {}
    for tokens in read:
        for t in tokens:
            if t.words and (not t.unread or allow_unknown):
                for w in t.words:
                    if w.said is None and w.text not in keys:
                        keys[w.text] = tuple(tokenize(w.text))
    return keys


def homograph_asks(texts: list[str], read: list[list[Token]], chooser, options: DecodeOptions
                   ) -> list[tuple[int, str, int, int, str]]:
    """(text index, text, start, end, word) of each word of the texts whose reading the chooser decides by
    its sentence: a word read as written (not a number's), answered from the lexicon (not bypassed),
    that the context model covers."""
    if chooser is None or options.bypass_lexicon:
        return []
    return [(i, text, w.start, w.end, w.text) for i, (text, tokens) in enumerate(zip(texts, read)) for t in tokens
            if t.words and (not t.unread or options.allow_unknown)
            for w in t.words if w.said is None and w.letters is not None and chooser.covers(w.text)]


def said_of(answer: Answer, options: DecodeOptions, ipa: bool, joiner: str, tgt_vocab: list[str],
            lexicon_on: bool, context: str = "") -> Said:
    """A word's answer as shown, from its hypothesis and the pronunciations its lookup found."""
    hyp = answer.hyps[0]
    alternatives = []
    if answer.pronunciations is not None:
        alternatives = [[tgt_vocab[i] for i in ids] for ids in answer.pronunciations if ids != hyp.output_ids]
    if ipa:
        tokens, text = to_ipa(hyp.output_tokens)
        shown = tuple(to_ipa(a)[1] for a in alternatives)
    else:
        tokens, text = list(hyp.output_tokens), joiner.join(hyp.output_tokens)
        shown = tuple(joiner.join(a) for a in alternatives)
    return Said(hyp, tokens, text, shown, _choice(answer.pronunciations, hyp.origin, options, lexicon_on, context))


class SaidMemo:
    """Words' answers as shown, each kept while the answer it was made from is the one the answerer
    gives (the same hypothesis, out of its response cache): running text repeats its words. Holds the
    model's output vocabulary and joiner, whether its lexicon is on and its context model's name ("" none),
    as values."""

    def __init__(self, joiner: str, tgt_vocab: list[str], lexicon_on: bool, context: str = ""):
        self.joiner, self.tgt_vocab, self.lexicon_on, self.context = joiner, tgt_vocab, lexicon_on, context
        self._said: dict[tuple, Said] = {}

    def given(self, word: Spoken, ipa: bool) -> Said:
        """A word's answer from the pronunciation a rule gives (its symbols in the model's output
        vocabulary, as text.py checked): certain, its attention spread evenly over the word's
        letters, its apostrophe none."""
        key = ("\0rule", word.text, word.said, ipa)
        shown = self._said.get(key)
        if shown is None:
            letters = [i for i, c in enumerate(word.text) if c.isalpha()] or list(range(len(word.text)))
            attn = np.zeros((len(word.said) + 1, len(word.text)), dtype=np.float32)
            attn[:, letters] = 1.0 / len(letters)
            hyp = Decoded(list(word.text), [self.tgt_vocab.index(t) for t in word.said], list(word.said), 0.0, attn,
                          True, origin=RULE)
            shown = replace(said_of(Answer([hyp], None), DecodeOptions(), ipa, self.joiner, self.tgt_vocab, True),
                            choice=RULE_CHOICE)
            if len(self._said) >= SAID_ENTRIES:
                self._said.clear()
            self._said[key] = shown
        return shown

    def get(self, key: tuple[str, ...], answer: Answer, options: DecodeOptions, ipa: bool) -> Said:
        shown = self._said.get((key, ipa, options))
        if shown is None or shown.hyp is not answer.hyps[0]:  # not seen, or answered anew since
            shown = said_of(answer, options, ipa, self.joiner, self.tgt_vocab, self.lexicon_on, self.context)
            if len(self._said) >= SAID_ENTRIES:
                self._said.clear()
            self._said[(key, ipa, options)] = shown
        return shown


def word_separator(separator: str | None, ipa: bool, joiner: str) -> str:
    """The separator asked for, else phonemes' words apart by a bar, other models' by a space."""
    if separator is not None:
        return separator
    return PLAIN_WORDS if ipa or joiner == "" else ARPABET_WORDS


def assemble(text: str, tokens: list[Token], keys: dict[str, tuple[str, ...]], said: dict[tuple[str, ...], Said],
             allow_unknown: bool, separator: str, attention: bool, normalize: Callable[[str], str],
             given: Callable[[Spoken], Said] | None = None,
             chosen: dict[tuple[int, int], Said] | None = None) -> TextAnswer:
    """A text's answer from its read tokens and its words' answers as shown (keys: word_keys()),
    the words a rule pronounces by `given` (SaidMemo.given), a homograph by its span's in `chosen`."""
    out, parts = [], []
    for token in tokens:
        words, empty = [], set()
        if token.words and (not token.unread or allow_unknown):
            for w in token.words:
                s = given(w) if w.said is not None else \
                    chosen[(w.start, w.end)] if chosen and (w.start, w.end) in chosen else said[keys[w.text]]
                choice = s.choice
                if not s.tokens:  # nothing to say is not a reading: flagged, with the reason
                    empty.update(i for i in range(w.start, w.end) if not text[i].isspace())
                    choice = f"{EMPTY_CHOICE} ({s.choice})"
                char_attn = char_attention(normalize, w, s.hyp.attn) if attention and s.hyp.attn is not None else None
                words.append(WordAnswer(w, s.hyp, s.tokens, s.text, char_attn, s.alternatives, choice))
        if empty:
            token = replace(token, unread=tuple(sorted(empty.union(token.unread))))
        out.append(TokenAnswer(token, tuple(words)))
        parts.append(separator.join(w.text for w in words) if words and not empty else token.text)
    shown = [replace(t, words=()) if not a.words and t.kind != PUNCTUATION else t for t, a in zip(tokens, out)]
    return TextAnswer(text, tuple(out), spoken_text(text, tokens), joined(text, shown, parts, separator))


def check_alphabet(alphabet: str, is_arpabet: bool, model_name: str) -> None:
    if alphabet not in ("", MODEL, "arpabet", IPA):
        raise InvalidInput(f"alphabet {alphabet!r} is not one of 'model', 'arpabet', 'ipa'")
    if alphabet in ("arpabet", IPA) and not is_arpabet:
        raise InvalidInput(f"alphabet {alphabet!r}: model {model_name!r} does not output ARPAbet")
