"""Texts through the per-word path: each text read into tokens (text.py), their words answered as
single words are (the cache keyed by word, the overrides and the lexicon, else the model), many
words in one submission to the batcher (the words of every text of the call at once, each decoded as
its own short sequence), and each word's attention mapped back onto the characters of the text.

A word the lexicon has several pronunciations of (read, record, live, lead) gets the lexicon's first,
its primary one, and says so; the others come as alternatives. Nothing chooses by context here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from service.answering.alphabet import IPA, MODEL, to_ipa
from service.answering.text import PUNCTUATION, Spoken, Token, joined, spoken_text
from service.domain import LEXICON, OVERRIDE, Decoded, DecodeOptions, InvalidInput

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
    def score(self) -> float:
        return sum(w.hyp.score for t in self.tokens for w in t.words)


def char_attention(engine, word: Spoken, attn: np.ndarray) -> np.ndarray:
    """A word's attention (rows, its source symbols) on the text's characters [word.start, word.end):
    each symbol's column onto the character it came from where the word is read as written (a
    character's normalization may give it none, or several), else each row spread evenly over the
    span's characters (a number's words read the whole number)."""
    width = word.end - word.start
    out = np.zeros((attn.shape[0], width), dtype=np.float32)
    if word.letters is not None:
        columns = [pos - word.start for c, pos in zip(word.text, word.letters) for _ in engine.normalize(c)]
        if len(columns) == attn.shape[1]:
            np.add.at(out, (slice(None), columns), attn)
            return out
    out += attn.sum(axis=1, keepdims=True) / width
    return out


def _choice(found, origin: str, options: DecodeOptions, lexicon_on: bool) -> str:
    if origin == OVERRIDE:
        return "override: the model's own word"
    if origin == LEXICON:
        n = len(found[1]) if found else 1
        return "lexicon: its only pronunciation" if n == 1 else \
            f"lexicon: the first of its {n} pronunciations (the primary one; no context model)"
    if options.bypass_lexicon or not lexicon_on:
        return "model: the lexicon was bypassed"
    return "model: not in the lexicon"


class Reading:
    """What a text call needs of an answerer: its engine (normalization, alphabet), its lexicon and
    its transduce(), the per-word path."""

    def __init__(self, answerer, reader):
        self.answerer, self.reader = answerer, reader
        self.engine = answerer.engine
        # A word's answer as shown, kept while the answer it was made from is the one the answerer
        # gives (the same object, out of its response cache): running text repeats its words.
        self._said: dict = {}

    async def read(self, texts: list[str], options: DecodeOptions, deadline_s: float | None,
                   alphabet: str = "", separator: str | None = None, attention: bool = True) -> list[TextAnswer]:
        options = self.answerer.same_options(replace(options, n_best=1, beam_size=min(options.beam_size, 16)))
        read = [self.reader.read(t) for t in texts]
        keys: dict[str, tuple[str, ...]] = {}  # each word as written -> as the model tokenizes it, once per call
        for tokens in read:
            for t in tokens:
                if t.words and (not t.unread or options.allow_unknown):
                    for w in t.words:
                        if w.text not in keys:
                            keys[w.text] = tuple(self.engine.tokenize(w.text))
        unique = list(dict.fromkeys(keys.values()))
        answers = dict(zip(unique, await self.answerer.answer_words([list(k) for k in unique], options, deadline_s)))
        ipa = alphabet == IPA
        if separator is None:
            separator = PLAIN_WORDS if ipa or self.answerer.tgt_joiner == "" else ARPABET_WORDS
        return [self._text(text, tokens, keys, answers, options, ipa, separator, attention)
                for text, tokens in zip(texts, read)]

    def _text(self, text: str, tokens: list[Token], keys: dict, answers: dict, options: DecodeOptions, ipa: bool,
              separator: str, attention: bool) -> TextAnswer:
        out, parts = [], []
        for token in tokens:
            said = []
            if token.words and (not token.unread or options.allow_unknown):
                said = [self._word(w, keys[w.text], answers[keys[w.text]][0], options, ipa, attention)
                        for w in token.words]
            out.append(TokenAnswer(token, tuple(said)))
            parts.append(separator.join(w.text for w in said) if said else token.text)
        shown = [replace(t, words=()) if not a.words and t.kind != PUNCTUATION else t for t, a in zip(tokens, out)]
        return TextAnswer(text, tuple(out), spoken_text(text, tokens), joined(text, shown, parts, separator))

    def _word(self, word: Spoken, key: tuple[str, ...], hyp: Decoded, options: DecodeOptions, ipa: bool,
              attention: bool) -> WordAnswer:
        said = self._said.get((key, ipa, options))
        if said is None or said[0] is not hyp:  # not seen, or answered anew since (a new cache, new overrides)
            said = (hyp, *self._pronounced(key, hyp, options, ipa))
            if len(self._said) >= SAID_ENTRIES:
                self._said.clear()
            self._said[(key, ipa, options)] = said
        _, tokens, text, shown, choice = said
        char_attn = char_attention(self.engine, word, hyp.attn) if attention and hyp.attn is not None else None
        return WordAnswer(word, hyp, tokens, text, char_attn, shown, choice)

    def _pronounced(self, key: tuple[str, ...], hyp: Decoded, options: DecodeOptions, ipa: bool):
        """A word's answer as shown: its symbols and string in the alphabet asked for, the lexicon's
        other pronunciations, and why this one."""
        joiner = self.answerer.tgt_joiner
        found = self.answerer.lexicon.lookup(list(key)) if hyp.origin in (LEXICON, OVERRIDE) else None
        alternatives = []
        if found is not None:
            vocab = self.engine.tgt_vocab
            alternatives = [[vocab[i] for i in ids] for ids in found[1] if ids != hyp.output_ids]
        if ipa:
            tokens, text = to_ipa(hyp.output_tokens)
            shown = tuple(to_ipa(a)[1] for a in alternatives)
        else:
            tokens, text = list(hyp.output_tokens), joiner.join(hyp.output_tokens)
            shown = tuple(joiner.join(a) for a in alternatives)
        return tokens, text, shown, _choice(found, hyp.origin, options, self.answerer.cfg.lexicon)


def check_alphabet(alphabet: str, is_arpabet: bool, model_name: str) -> None:
    if alphabet not in ("", MODEL, "arpabet", IPA):
        raise InvalidInput(f"alphabet {alphabet!r} is not one of 'model', 'arpabet', 'ipa'")
    if alphabet in ("arpabet", IPA) and not is_arpabet:
        raise InvalidInput(f"alphabet {alphabet!r}: model {model_name!r} does not output ARPAbet")
