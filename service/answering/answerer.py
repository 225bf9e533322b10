"""Answering: what a call is answered with before the model, and what it asks of the model.

The stage between the transport and the scheduler. For each input, in order: tokenized and
checked against the model's alphabet; split into words when the model cannot read its
separators (compound.py); then each source from the response cache (cache.py), else the
overrides and the lexicon (lexicon.py: a given pronunciation, forced through the model for its
score and attention), else decoded by the model. What reaches the model goes through the
batcher it holds (service/scheduling/batcher.py). Scoring given outputs comes through here too.
Running text is read, its words answered that way once each, and its answers assembled from both
(text.py, reading.py): the answerer hands each stage data and holds no stage that holds it.

One Answerer per served model version, holding that version's engine (for its tokenizer and
alphabet) and batcher. Knows nothing of gRPC.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

from service.answering.cache import Answer, ResponseCache
from service.answering.compound import SEPARATORS, join_words, split_words
from service.answering.context import ContextChooser
from service.answering.lexicon import KnownWords, Lexicon
from service.answering.reading import (Said, SaidMemo, TextAnswer, assemble, check_alphabet, homograph_asks, said_of,
                                       word_keys, word_separator)
from service.answering.alphabet import IPA, is_arpabet
from service.answering.languages.registry import reader
from service.answering.text import Script
from service.answering.textrules import TextRules
from service.config import AnswerConfig
from service.domain import GREEDY, Decoded, DecodeOptions, InvalidInput, NotReady, OutsideAlphabet, Source
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.scheduling.batcher import Batcher


OPTIONS_ENTRIES = 1000  # distinct decode options kept as one object each (emptied whole when full)
FORCED_ENTRIES = 20000  # homographs' chosen readings, forced, kept (emptied whole when full)


def script_of(engine: Engine) -> Script:
    """What the model reads and says, as values: its source tokenization and alphabet, and its output
    symbols but the specials (a text rule's pronunciation must be made of them)."""
    specials = {engine.pad_id, engine.bos_id, engine.eos_id, engine.unk_id}
    return Script(engine.src_tokenization == "chars", frozenset(engine.alphabet), engine.normalize, engine.tokenize,
                  frozenset(s for i, s in enumerate(engine.tgt_vocab) if i not in specials))


class Answerer:
    def __init__(self, engine: Engine, batcher: Batcher, cfg: AnswerConfig, metrics: ModelMetrics,
                 lexicon: Lexicon | None = None, text_rules: TextRules | None = None,
                 chooser: ContextChooser | None = None):
        self.engine = engine
        self.batcher = batcher
        self.cfg = cfg
        self.metrics = metrics
        self.lexicon = lexicon or Lexicon()  # replaced whole when the overrides change
        self.cache = ResponseCache(cfg.cache_entries, metrics)
        # What the transport shows of the model: how its output symbols join into a string, and the
        # precision it is served in.
        self.tgt_joiner = engine.tgt_joiner
        self.precision = engine.precision
        self.is_arpabet = is_arpabet(engine.tgt_vocab)
        self.text_rules = text_rules or TextRules()
        self._options: dict[DecodeOptions, DecodeOptions] = {}
        self._reader = reader(self.text_rules)
        self._script = script_of(engine)  # what the model reads, as values
        self.chooser = chooser if cfg.lexicon else None  # homographs read by their sentence (context.py)
        self._said = SaidMemo(self.tgt_joiner, engine.tgt_vocab, cfg.lexicon, self.chooser.model if self.chooser else "")
        self._forced: dict[tuple, object] = {}  # (word, reading, options) -> its forced hypothesis

    async def transduce(self, texts: list[str], options: DecodeOptions = GREEDY,
                        deadline_s: float | None = None) -> list[list[Decoded]]:
        """Decode every text: per text its hypotheses, best first (one unless n_best > 1), in input order.

        A text the lexicon (or the overrides) has comes back as its pronunciations, as many as
        n_best asks, each forced through the model for its score and attention (origin set); a
        text of several words the model cannot separate itself is answered word by word and
        joined (compound.py). Raises the batcher's Overloaded at once when the call cannot be answered
        within its deadline (time.perf_counter() clock) or the queue's time bound; cancelling the
        caller drops its sources from the queue and the running batch.
        """
        words = [self._words(t) for t in texts]  # None: not several words
        sources = self._sources(texts, options, words)
        if all(w is None for w in words):
            return [a.hyps for a in await self._answer(sources, options, deadline_s)]
        parts = [[tokens] if ws is None else [self.engine.tokenize(w) for w in ws] for tokens, ws in zip(sources, words)]
        answers = [a.hyps for a in await self._answer([p for ps in parts for p in ps], options, deadline_s)]
        out, k = [], 0
        for tokens, ws, ps in zip(sources, words, parts):
            part = answers[k:k + len(ps)]
            k += len(ps)
            out.append(part[0] if ws is None else [join_words(tokens, ps, [h[0] for h in part])])
        return out

    async def transduce_text(self, texts: list[str], options: DecodeOptions = GREEDY, deadline_s: float | None = None,
                             alphabet: str = "", separator: str | None = None,
                             attention: bool = True) -> list[TextAnswer]:
        """Running texts: each read into tokens (service/answering/text.py) in the model's language,
        their words answered as transduce() answers words, each once, all of a call's words in one
        submission, then each text's answer assembled (reading.py). alphabet: "" or "model" (the
        model's symbols), "arpabet", "ipa" (ARPAbet models)."""
        if not self.batcher.running:
            raise NotReady("model is not loaded yet")
        check_alphabet(alphabet, self.is_arpabet, self.engine.name)
        options = self.same_options(replace(options, n_best=1, beam_size=min(options.beam_size, 16)))
        known = KnownWords(self.lexicon, self.engine.tokenize) if self.cfg.lexicon else frozenset()
        read = [self._reader.read(t, self._script, known) for t in texts]
        keys = word_keys(read, options.allow_unknown, self.engine.tokenize)
        unique = list(dict.fromkeys(keys.values()))
        asks = homograph_asks(texts, read, self.chooser, options)
        if asks:  # the words and the homographs' readings at once: the context model has its own batcher
            answers, chosen = await asyncio.gather(self._answer([list(k) for k in unique], options, deadline_s),
                                                   self.chooser.choose([a[1:4] for a in asks], deadline_s))
        else:
            answers, chosen = await self._answer([list(k) for k in unique], options, deadline_s), []
        ipa = alphabet == IPA
        said = {k: self._said.get(k, a, options, ipa) for k, a in zip(unique, answers)}
        by_text = await self._readings(asks, chosen, keys, dict(zip(unique, answers)), said, options, ipa, deadline_s)
        separator = word_separator(separator, ipa, self.tgt_joiner)
        return [assemble(text, tokens, keys, said, options.allow_unknown, separator, attention, self._script.normalize,
                         lambda w: self._said.given(w, ipa), by_text.get(i))
                for i, (text, tokens) in enumerate(zip(texts, read))]

    async def _readings(self, asks: list, chosen: list, keys: dict, answers: dict, said: dict, options: DecodeOptions,
                        ipa: bool, deadline_s: float | None) -> dict[int, dict[tuple[int, int], Said]]:
        """Each homograph's answer as shown, by text and span: the reading its context chose (forced
        through this model for its score and attention where it is not the word's primary one), or
        the primary one, saying why."""
        out: dict[int, dict[tuple[int, int], Said]] = {}
        need = []  # (word, reading) whose forced hypothesis is not kept yet
        for (i, _, start, end, word), c in zip(asks, chosen):
            key = keys[word]
            base = said[key]
            if c is None:
                out.setdefault(i, {})[(start, end)] = replace(base, choice=self.chooser.not_served())
            elif c.ids not in map(tuple, answers[key].pronunciations or ()):
                out.setdefault(i, {})[(start, end)] = base  # an override's, or the lexicon bypassed: as it is
            elif c.ids == tuple(base.hyp.output_ids):
                out.setdefault(i, {})[(start, end)] = replace(base, choice=c.choice)
            elif (key, c.ids, options) not in self._forced:
                need.append((key, c.ids))
        need = list(dict.fromkeys(need))
        if need:
            results = await self.batcher.submit([Source(list(k), list(ids)) for k, ids in need], options, deadline_s)
            if len(self._forced) + len(need) > FORCED_ENTRIES:
                self._forced.clear()
            for (k, ids), hyps in zip(need, results):
                self._forced[(k, ids, options)] = replace(hyps[0], origin=answers[k].hyps[0].origin)
        for (i, _, start, end, word), c in zip(asks, chosen):
            key = keys[word]
            if c is None or (start, end) in out.get(i, {}):
                continue
            hyp = self._forced[(key, c.ids, options)]
            shown = said_of(Answer([hyp], answers[key].pronunciations), options, ipa, self.tgt_joiner,
                            self.engine.tgt_vocab, self.cfg.lexicon)
            out.setdefault(i, {})[(start, end)] = replace(shown, choice=c.choice)
        return out

    def same_options(self, options: DecodeOptions) -> DecodeOptions:
        """One object for equal options: each call parses its own, and the cache's keys (a word and its
        options) then compare by identity instead of field by field, once per word."""
        if len(self._options) >= OPTIONS_ENTRIES:
            self._options.clear()
        return self._options.setdefault(options, options)

    async def _answer(self, sources: list[list[str]], options: DecodeOptions,
                      deadline_s: float | None) -> list[Answer]:
        """Each source from the cache, else the lexicon (forced), else the model; each answer with the
        pronunciations its one lexicon lookup found."""
        lexicon, cache, options = self.lexicon, self.cache, self.same_options(options)
        out: list[Answer | None] = cache.get_many([(tuple(t), options) for t in sources])
        hyps_of: dict[int, list[Decoded]] = {}  # what the batcher answers, by input index
        found_of: dict[int, tuple] = {}  # what the lexicon has, by input index
        work = []  # (input index, forced target or None, origin)
        for i, (tokens, cached) in enumerate(zip(sources, out)):
            if cached is not None:
                continue
            found = None if options.bypass_lexicon or not self.cfg.lexicon else lexicon.lookup(tokens)
            hyps_of[i] = []
            if found is None:
                work.append((i, None, "MODEL"))
            else:
                found_of[i] = found
                work += [(i, target, found[0]) for target in found[1][:options.n_best]]
        if work:
            results = await self.batcher.submit([Source(sources[i], target) for i, target, _ in work], options, deadline_s)
            for (i, target, origin), hyps in zip(work, results):
                hyps_of[i] += hyps if target is None else [replace(hyps[0], origin=origin)]
            for i in sorted(hyps_of):
                hyps = hyps_of[i]
                unknown = tuple(p for p, _ in self.engine.unknown_symbols(sources[i]))
                if unknown:  # allow_unknown: say where the model saw symbols it does not know
                    hyps = [replace(h, unknown_positions=unknown) for h in hyps]
                found = found_of.get(i)
                out[i] = Answer(hyps, None if found is None else found[1])
                if cache is self.cache:  # the overrides did not change meanwhile
                    cache.put((tuple(sources[i]), options), out[i])
        for origin, n in Counter(a.hyps[0].origin for a in out).items():  # once per origin: a text has many words
            self.metrics.answers.labels(origin).inc(n)
        return out

    def set_overrides(self, overrides: dict) -> None:
        """The model's overrides changed: new lexicon, empty cache (one step on the event loop)."""
        self.lexicon = self.lexicon.with_overrides(overrides)
        self.cache = ResponseCache(self.cfg.cache_entries, self.metrics)
        self.metrics.cache_entries.set(0)

    def set_text_rules(self, rules: TextRules) -> None:
        """The model's own text rules file changed (one step on the event loop)."""
        self.text_rules = rules
        self._reader = reader(rules)

    async def score(self, pairs: list[tuple[str, str]], options: DecodeOptions = GREEDY,
                    deadline_s: float | None = None) -> list[Decoded]:
        """The model's log-probabilities and attention of given (source, target text) pairs."""
        sources = self._sources([source for source, _ in pairs], options)
        targets = []
        for i, (_, text) in enumerate(pairs):
            tokens = self.engine.tokenize_target(text)
            if not tokens:
                raise InvalidInput(f"candidate {i} is empty")
            try:
                targets.append(self.engine.target_ids(tokens))
            except ValueError as e:
                raise InvalidInput(f"candidate {i} ({text!r}): {e}") from None
        results = await self.batcher.submit([Source(s, t) for s, t in zip(sources, targets)], options, deadline_s)
        return [hyps[0] for hyps in results]

    def _in_lexicon(self, tokens: list[str], options: DecodeOptions) -> bool:
        """Whether the lexicon (or the overrides) answers this source: then a letter outside the
        model's alphabet is no reason to refuse it, the model only scores the given pronunciation."""
        return self.cfg.lexicon and not options.bypass_lexicon and self.lexicon.lookup(tokens) is not None

    def reads(self, text: str) -> bool:
        """Whether every symbol of `text`, after the model's own source normalization, is in its
        alphabet (a compound's separators aside): the model reads it without unknown symbols."""
        tokens = self.engine.tokenize(text)
        return bool(tokens) and not any(not SEPARATORS.fullmatch(t) for _, t in self.engine.unknown_symbols(tokens))

    def _words(self, text: str) -> list[str] | None:
        if self.engine.src_tokenization != "chars":
            return None
        return split_words(self.engine.normalize(text), self.engine.alphabet)

    def _sources(self, texts: list[str], options: DecodeOptions, words: list[list[str]] | None = None) -> list[list[str]]:
        """Tokenize and check: ready, attention mode, not empty, every symbol in the alphabet (but a
        compound input's separators) unless options.allow_unknown."""
        if not self.batcher.running:
            raise NotReady("model is not loaded yet")
        if options.attention_mode != "soft" and options.attention_mode not in self.engine.attention_modes:
            raise InvalidInput(f"options.attention_mode {options.attention_mode!r} is not available for this "
                               f"model (it has {list(self.engine.attention_modes) or 'no attention'})")
        sources = [self.engine.tokenize(t) for t in texts]
        for i, tokens in enumerate(sources):
            if not tokens:
                raise InvalidInput(f"inputs[{i}] is empty after tokenization")
            compound = words is not None and words[i] is not None
            if compound and not words[i]:
                raise InvalidInput(f"inputs[{i}] {texts[i]!r} holds no word, only separators")
            unknown = [(p, t) for p, t in self.engine.unknown_symbols(tokens)
                       if not (compound and SEPARATORS.fullmatch(t))]
            if unknown and not options.allow_unknown and not self._in_lexicon(tokens, options):
                shown = ", ".join(f"{t!r} at position {p}" for p, t in unknown[:5])
                raise OutsideAlphabet(f"inputs[{i}] {texts[i]!r} has symbols outside the model's alphabet: {shown} "
                                      "(options.allow_unknown_symbols decodes them as unknown)", texts[i])
        return sources
