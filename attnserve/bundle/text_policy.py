"""What the server does to a source before it tokenizes it, chosen from the data a model learned from.

The manifest's `source_normalization` names one of attnserve/bundle/normalization.py's NORMALIZATIONS. CMUdict
models fold accents and case (their alphabet is a-z and the apostrophe). A model of given splits (a
shared task's languages) keeps its accents: its inputs are put in NFC, the form its files are in, so a
decomposed é is the é it learned; and they are lower-cased only where no training source has a
character that lower-casing changes, so a language that writes case keeps it. A source alphabet with
the space in it (Vietnamese syllables, `anh em`) reads the space as a symbol, which the manifest says.
"""
from __future__ import annotations

import unicodedata

from attnserve.bundle.normalization import CMUDICT


def text_policy(data: dict, splits: dict, src_vocab: list[str]) -> dict:
    """The manifest's fields for this corpus: source_normalization and, for given splits, text_policy (why)."""
    space = " " in src_vocab
    if data["corpus"] == "cmudict":
        return {"source_normalization": CMUDICT}
    if "files" not in data:  # one hash-split TSV: its inputs as they come, as before this policy
        return {"source_normalization": "none"}
    sources = ["".join(p.src) if data["src_tokens"] == "chars" else " ".join(p.src)
               for split in ("train", "dev") for p in splits[split]]
    cased = any(s.lower() != s for s in sources)
    if data.get("source_form") == "nfd":  # trained on decomposed sources: inputs decomposed the same way
        normalization = "nfd" if cased else "nfd-lower"
        why = (f"trained on NFD-decomposed sources (--source-form nfd); "
               f"{'some have' if cased else 'none has'} characters that lower-casing changes")
    else:
        nfc = all(unicodedata.is_normalized("NFC", s) for s in sources)
        normalization = ("nfc" if nfc else "none") if cased else ("nfc-lower" if nfc else "lower")
        why = (f"train and dev sources {'all' if nfc else 'not all'} NFC; "
               f"{'some have' if cased else 'none has'} characters that lower-casing changes")
    return {"source_normalization": normalization, "text_policy": {"why": why, "space_is_a_source_symbol": space}}
