"""What a source is turned into before it is tokenized: one table, read by training and serving alike.

A bundle names one entry (the manifest's `source_normalization`): the server applies it to every word it
is sent. Training reads given files with an entry too (train.py --source-form: `none` or `nfd`), and
text_policy.py chooses the bundle's entry from the data so read.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable


def _strip_accents_lower(text: str) -> str:
    """NFKD, combining marks dropped, lower case: café -> cafe, Ångström -> angstrom."""
    if text.isascii():  # nothing to decompose (most words): the same string, sooner
        return text.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


_DIGITS = re.compile(r"\d+")


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _context_words(text: str) -> str:
    """Lower case, the typographic apostrophe as ', each run of digits as one 0, a final s dropped (pipes
    as pipe): a context model's words (homographs.py), where a number's value says nothing of the
    homograph beside it and a word seen only in the plural still counts in the singular. Applied twice,
    the same as once (the server applies a bundle's normalization to the source it is given)."""
    return " ".join(_singular(w) for w in _DIGITS.sub("0", text.lower().replace("\u2019", "'")).split(" "))


NORMALIZATIONS: dict[str, Callable[[str], str]] = {
    "none": lambda t: t, "lower": str.lower, "nfkd-strip-accents-lower": _strip_accents_lower,
    "nfc": lambda t: unicodedata.normalize("NFC", t), "nfc-lower": lambda t: unicodedata.normalize("NFC", t.lower()),
    "nfd": lambda t: unicodedata.normalize("NFD", t), "nfd-lower": lambda t: unicodedata.normalize("NFD", t.lower()),
    "context-words": _context_words}
# The entries that keep case: what a model of given files may be trained on (train.py --source-form).
SOURCE_FORMS = ("none", "nfd")
CMUDICT = "nfkd-strip-accents-lower"  # CMUdict models: a-z and the apostrophe


def normalizer(name: str) -> Callable[[str], str]:
    """The function a normalization's name stands for; ValueError naming the known ones."""
    try:
        return NORMALIZATIONS[name]
    except KeyError:
        raise ValueError(f"source normalization {name!r} is not one of {sorted(NORMALIZATIONS)}") from None


def lowercases(name: str) -> bool:
    """Whether a normalization folds case (a served word's case then says nothing to the model)."""
    return name.endswith("lower") or name == "context-words"
