"""A bundle's language (the manifest's `language`) by its name, for people picking a model.

The tags are ISO 639 codes (639-1, 639-2/B and /T, 639-3) as the bundles carry them, with the
SIGMORPHON 2021 task's variant after an underscore (`arm_e`, `wel_sw`, `eng_us`, `jpn_hira`). No
library in the environment holds the names (langcodes needs `language_data`, not installed), so a
table of the languages bundles are trained for lives here; a tag it lacks is named by itself.
"""
from __future__ import annotations

_NAMES = {
    "English": ("en", "eng"), "French": ("fr", "fre", "fra"), "Adyghe": ("ady",), "Armenian": ("hy", "arm", "hye"),
    "Bulgarian": ("bg", "bul"), "Dutch": ("nl", "dut", "nld"), "Georgian": ("ka", "geo", "kat"),
    "Greek": ("el", "gre", "ell"), "Serbo-Croatian": ("sh", "hbs"), "Hungarian": ("hu", "hun"),
    "Icelandic": ("is", "ice", "isl"), "Italian": ("it", "ita"), "Japanese": ("ja", "jpn"), "Khmer": ("km", "khm"),
    "Korean": ("ko", "kor"), "Latvian": ("lv", "lav"), "Maltese": ("mt", "mlt"), "Romanian": ("ro", "rum", "ron"),
    "Slovene": ("sl", "slv"), "Vietnamese": ("vi", "vie"), "Welsh": ("cy", "wel", "cym"), "German": ("de", "ger", "deu"),
    "Spanish": ("es", "spa"), "Portuguese": ("pt", "por"), "Russian": ("ru", "rus"), "Polish": ("pl", "pol"),
    "Czech": ("cs", "cze", "ces"), "Chinese": ("zh", "chi", "zho"),
}
NAMES = {code: name for name, codes in _NAMES.items() for code in codes}
# The task's variants, and the common region and script subtags.
VARIANTS = {"e": "Eastern", "sw": "South-Western", "us": "US", "uk": "UK", "gb": "UK", "hira": "hiragana",
            "kana": "katakana", "latn": "Latin", "cyrl": "Cyrillic", "hanoi": "Hanoi", "hue": "Huế",
            "saigon": "Saigon"}


def language_name(tag: str) -> str:
    """`fre` -> "French", `eng_us` -> "English (US)", `jpn_hira` -> "Japanese (hiragana)"; "" stays ""
    and a tag the table lacks is its own name."""
    base, *rest = tag.replace("-", "_").lower().split("_") if tag else [""]
    if base not in NAMES:
        return tag
    variants = [VARIANTS.get(v, v) for v in rest]
    return NAMES[base] + (f" ({', '.join(variants)})" if variants else "")
