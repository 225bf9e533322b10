"""WER and PER: the one scoring function used by training, export and evaluation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Scores:
    wer: float  # fraction of words whose hypothesis matches no reference
    per: float  # summed edit distance to the closest reference / summed reference length
    words: int


def score(
    hyps: Mapping[tuple[str, ...], Sequence[str]],
    refs: Mapping[tuple[str, ...], Sequence[Sequence[str]]],
) -> Scores:
    """Score one hypothesis per source word against all of that word's references.

    WER: a word is right if its hypothesis equals any reference.
    PER: edit distance to the closest reference, divided by that reference's
    length, pooled over the corpus (sum of distances / sum of lengths).
    """
    if not refs:
        raise ValueError("score() needs at least one reference word")
    from rapidfuzz.distance import Levenshtein  # the [eval] extra: attnserve-eval --help runs without it
    wrong = edits = length = 0
    for src, candidates in refs.items():
        hyp = list(hyps[src])
        dist, ref_len = min((Levenshtein.distance(hyp, list(r)), len(r)) for r in candidates)
        wrong += dist > 0
        edits += dist
        length += ref_len
    return Scores(wer=wrong / len(refs), per=edits / length, words=len(refs))


def gold_wer(pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> tuple[float, int]:
    """The SIGMORPHON G2P scorer's WER of (hypothesis, gold) segment sequences, one pair a gold line:
    a line is wrong unless the two are equal; returns (percent wrong, lines wrong)."""
    if not pairs:
        raise ValueError("gold_wer() needs at least one gold line")
    wrong = sum(list(hyp) != list(gold) for hyp, gold in pairs)
    return 100.0 * wrong / len(pairs), wrong
