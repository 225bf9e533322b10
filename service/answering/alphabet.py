"""The output alphabet a caller asks for: the model's own symbols, or for English ARPAbet models IPA.

One IPA symbol per ARPAbet phoneme, so that each still has its attention row. Stress (the stress
model's digits: 1 primary, 2 secondary, 0 none) becomes a mark before the stressed syllable: the
consonants before its vowel that can begin an English syllable go after the mark (maximal onset:
AH0 B AW1 T -> əˈbaʊt, EH1 K S T R AH0 -> ˈɛkstɹə). Unstressed AH and ER are ə and ɚ, stressed ʌ
and ɝ; a model without stress marks none, and reads AH and ER as stressed only in a word of one
vowel.
"""
from __future__ import annotations

import re

MODEL, ARPABET, IPA = "model", "arpabet", "ipa"
ALPHABETS = ("", MODEL, ARPABET, IPA)  # "" = the model's own symbols

VOWELS = {"AA": "ɑ", "AE": "æ", "AH": "ʌ", "AO": "ɔ", "AW": "aʊ", "AY": "aɪ", "EH": "ɛ", "ER": "ɝ", "EY": "eɪ",
          "IH": "ɪ", "IY": "i", "OW": "oʊ", "OY": "ɔɪ", "UH": "ʊ", "UW": "u"}
UNSTRESSED = {"AH": "ə", "ER": "ɚ"}
CONSONANTS = {"B": "b", "CH": "tʃ", "D": "d", "DH": "ð", "F": "f", "G": "ɡ", "HH": "h", "JH": "dʒ", "K": "k", "L": "l",
              "M": "m", "N": "n", "NG": "ŋ", "P": "p", "R": "ɹ", "S": "s", "SH": "ʃ", "T": "t", "TH": "θ", "V": "v",
              "W": "w", "Y": "j", "Z": "z", "ZH": "ʒ"}
STRESS = {"1": "ˈ", "2": "ˌ"}
# Consonant clusters an English syllable may begin with (beside any one consonant but NG).
ONSETS = {tuple(o.split()) for o in (
    "P R", "P L", "P Y", "B R", "B L", "B Y", "T R", "T W", "D R", "D W", "K R", "K L", "K W", "K Y", "G R", "G L",
    "G W", "F R", "F L", "F Y", "TH R", "TH W", "SH R", "S P", "S T", "S K", "S M", "S N", "S L", "S W", "S F",
    "M Y", "N Y", "HH Y", "V Y", "S P R", "S P L", "S T R", "S K R", "S K W", "S K Y", "S P Y")}
_PHONE = re.compile(r"^([A-Z]+)([012]?)$")


def is_arpabet(vocab: list[str]) -> bool:
    """Whether a model's output symbols are ARPAbet (with or without stress digits)."""
    symbols = [t for t in vocab if not t.startswith("<")]
    return bool(symbols) and all((m := _PHONE.match(t)) and (m[1] in VOWELS or m[1] in CONSONANTS and not m[2])
                                 for t in symbols)


def _onset_start(phones: list[str], vowel: int) -> int:
    """Where the syllable of the vowel at `vowel` begins: back over the consonants before it while
    they still form an onset."""
    start = vowel
    while start > 0 and phones[start - 1] in CONSONANTS:
        cluster = tuple(phones[start - 1:vowel])
        if len(cluster) > 1 and cluster not in ONSETS or cluster == ("NG",):
            break
        start -= 1
    return start


def to_ipa(tokens: list[str]) -> tuple[list[str], str]:
    """ARPAbet tokens -> (one IPA symbol per token, the word as one IPA string with stress marks)."""
    parsed = [_PHONE.match(t) for t in tokens]
    phones = [m[1] if m else t for m, t in zip(parsed, tokens)]
    stresses = [m[2] if m else "" for m in parsed]
    vowels = [i for i, p in enumerate(phones) if p in VOWELS]
    has_stress = any(stresses[i] for i in vowels)
    symbols = []
    for p, s in zip(phones, stresses):
        if p in UNSTRESSED and (s == "0" or not has_stress and len(vowels) > 1):
            symbols.append(UNSTRESSED[p])
        else:
            symbols.append(VOWELS.get(p) or CONSONANTS.get(p) or p)
    marks = {_onset_start(phones, i): STRESS[stresses[i]] for i in vowels if stresses[i] in STRESS}
    return symbols, "".join(marks.get(i, "") + s for i, s in enumerate(symbols))
