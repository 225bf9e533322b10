"""bench/realtraffic.py's workload and report, without servers (seconds): the words it draws and how."""
from __future__ import annotations

import json
import re
from collections import Counter


from bench import realtraffic
from tests.conftest import SHIPPED_MODEL

WORD = re.compile(r"[a-z']*[a-z][a-z']*")


def shipped_manifest() -> dict:
    return json.loads((SHIPPED_MODEL / "1" / "manifest.json").read_text())


def test_alphabet_is_the_source_vocabulary_without_specials():
    assert realtraffic.alphabet(shipped_manifest()) == set("abcdefghijklmnopqrstuvwxyz'")
    assert realtraffic.alphabet({"src_vocab": ["<pad>", "<s>", "</s>", "<unk>", "a", "b"]}) == {"a", "b"}


def test_tokens_are_drawn_by_weight_with_a_fixed_seed():
    words, weights = ["the", "of", "zebra"], [0.90, 0.09, 0.01]
    tokens = realtraffic.sample_tokens(words, weights, 20_000)
    assert tokens == realtraffic.sample_tokens(words, weights, 20_000)  # the seed fixes the stream
    assert tokens != realtraffic.sample_tokens(words, weights, 20_000, seed=2)
    counts = Counter(tokens)
    assert set(counts) <= set(words)
    assert abs(counts["the"] / len(tokens) - 0.90) < 0.01
    assert abs(counts["zebra"] / len(tokens) - 0.01) < 0.005


def test_vocabulary_keeps_only_words_of_the_models_alphabet():
    words, weights = realtraffic.vocabulary(realtraffic.alphabet(shipped_manifest()))
    assert len(words) == len(weights) > 40_000
    assert all(WORD.fullmatch(w) for w in words)  # a-z and apostrophes, a letter at least
    assert words[:3] == ["the", "to", "and"] and "don't" in words
    assert not {"1st", "u.s", "e.g", "2"} & set(words)
    assert all(a >= b for a, b in zip(weights, weights[1:]))  # wordfreq's order: most frequent first
    tokens = realtraffic.sample_tokens(words, weights, 50_000)
    assert all(WORD.fullmatch(t) for t in tokens)
    assert 0.04 < Counter(tokens)["the"] / len(tokens) < 0.07  # about one token in 18 is "the"


def test_lru_model_and_metric_deltas():
    assert realtraffic.lru_hit_rate(list("abab"), entries=2, skip=2) == 1.0
    assert realtraffic.lru_hit_rate(list("abcabc"), entries=2, skip=3) == 0.0  # each evicted before it returns
    x = realtraffic.rates({"cache_hit": 10, "cache_miss": 5, "answers_LEXICON": 15},
                          {"cache_hit": 40, "cache_miss": 15, "answers_LEXICON": 50, "answers_MODEL": 5})
    assert x["cache_hit_rate"] == 0.75 and x["answers"] == 40
    assert x["answer_share"] == {"LEXICON": 35 / 40, "MODEL": 5 / 40}
    assert realtraffic.rates({}, {"answers_MODEL": 3})["cache_hit_rate"] is None  # cache off


def test_targets_and_markdown_section():
    point = {"words_per_s": 6000.0, "calls_per_s": 375.0, "p50_ms": 40.0, "p99_ms": 90.0, "errors": 0,
             "server_cpu_util": 0.9, "cache_hit_rate": 0.93, "answer_share": {"LEXICON": 0.99, "MODEL": 0.01},
             "wrapped": False}
    warm = {"tokens": 100, "words_per_s": 3000.0, "words_per_request": 128, "in_flight": 4, "refused_and_resent": 0,
            "cache_hit_rate": 0.8, "answer_share": {"LEXICON": 1.0}}
    unloaded = {"p50_ms": 0.7, "p99_ms": 1.0}
    rt = {"source": "wordfreq", "vocabulary": {"words": 3, "of_top_n": 3, "alphabet": "abc", "frequency_mass_kept": 0.9},
          "seed": 1, "E": {"words_per_s": 500.0, "key": "fp32/greedy-loop=onnx/batch=64"},
          "stream": {"tokens": 10, "unique": 3, "unique_fraction": 0.3, "lexicon_token_fraction": 1.0,
                     "lexicon_type_fraction": 1.0, "dev_test_token_fraction": 0.1,
                     "unique_fraction_of_first": {"10000": 0.3}, "top10": [["the", 0.5]]},
          "lru_model": {"entries": 2, "after_warmup": 0.9, "steady": 0.95}, "warmup": "sent once",
          "configs": {"lexicon+cache": {"warmup": warm, "b_16words_c16": point, "a_1word_c64": point},
                      "model only": {"b_16words_c16": dict(point, cache_hit_rate=None)}},
          "cached_word_unloaded": {"word": "the", "rounds": 1, "cached_p50_ms": 0.7, "cached_p99_ms": 1.0,
                                   "echo_p50_ms": 0.5, "echo_p99_ms": 0.8, "cached_runs": [unloaded],
                                   "echo_runs": [dict(unloaded, p50_ms=0.5)]}}
    rows = realtraffic.targets(rt)
    assert [t["met"] for t in rows] == [True, True]  # 6000 / 500 = 12 x E; 0.7 - 0.5 = 0.2 ms
    assert rows[0]["value"] == 12.0 and abs(rows[1]["value"] - 0.2) < 1e-9
    rt["targets"] = rows
    md = "\n".join(realtraffic.lines(rt))
    assert "| lexicon+cache | (b) 16 words/req, c16 | 6000 | 12.00 |" in md and "| met |" in md
    rt["cached_word_unloaded"]["cached_p50_ms"] = 0.9
    assert not realtraffic.targets(rt)[1]["met"]
