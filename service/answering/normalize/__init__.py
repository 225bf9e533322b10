"""Normalization: the spans of running text that are read by a class's rule (a date, an amount, a
telephone number, an address, a URL), each as the words it is said as, every word pointing at the
characters it reads.

A language's Normalizer finds them (chunks()); text.py reads everything between them with its own
scanner, so a text with nothing to normalize reads exactly as without this package, and a chunk's
own punctuation inside it (the dots of a URL, the dashes of a telephone number) is read or dropped by
its class's rule while the punctuation around it stays in place. English: rules here (english.py)
first, then WeTextProcessing's grammars (`wetext`, wetext.py) for what they read well; French: rules
here (french.py). The numbers themselves are num2words's (numbers.py).
"""
from __future__ import annotations

from service.answering.normalize.base import Chunk, Normalizer, Said, said, shown
from service.answering.normalize.english import English
from service.answering.normalize.french import French
from service.answering.textrules import TextRules

__all__ = ["Chunk", "Normalizer", "Said", "said", "shown", "for_rules"]


def for_rules(rules: TextRules) -> Normalizer | None:
    """The language's normalizer, None where it has none (its numbers are read by text.py alone)."""
    if rules.num2words == "en":
        return English(rules)
    if rules.num2words == "fr":
        return French(rules)
    return None
