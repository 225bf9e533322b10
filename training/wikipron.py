"""WikiPron (CUNY-CL/wikipron) as the non-English bundles' lexicons read it: which of its files each
SIGMORPHON 2021 language was drawn from, the task's conventions where the task changed WikiPron's,
and how a pronunciation is compared with another by sound (scripts/frequent_words.py).

scripts/wikipron_lexicons.py writes data/wikipron/<code>.tsv from WikiPron's commit COMMIT; training/
lexicon.py adds that file to the bundle's lexicon.tsv.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "data" / "wikipron"
FREQUENT_DIR = OUT_DIR / "frequent"  # the words scripts/frequent_words.py scores, with what reads them right
FREQUENT = 1_000  # that many most frequent words of each language are scored
COMMIT = "9aa71006ae5ec1b044efe62adb6aa181641f5019"  # 2021-02-12: the task's transcriptions, verbatim for most
WIKIPRON_CUT = 50_000  # a word is kept when it is among its language's this many most frequent (wordfreq)
TIE = "\u0361"


@dataclass(frozen=True)
class Language:
    model: str
    file: str  # data/tsv/<file> at COMMIT: the one the task's train words all come from
    wordfreq: str  # wordfreq's language code; "" where wordfreq has no list for the language


LANGUAGES = {  # task code -> its bundle, WikiPron file and wordfreq list
    "ady": Language("g2p-ady", "ady_phonetic_filtered.tsv", ""),
    "arm_e": Language("g2p-hye", "arm_e_phonetic_filtered.tsv", ""),
    "bul": Language("g2p-bul", "bul_phonemic_filtered.tsv", "bg"),
    "dut": Language("g2p-nld", "dut_phonemic_filtered.tsv", "nl"),
    "fre": Language("g2p-fra", "fre_phonemic_filtered.tsv", "fr"),
    "geo": Language("g2p-kat", "geo_phonemic_filtered.tsv", ""),
    "gre": Language("g2p-ell", "gre_phonemic_filtered.tsv", "el"),
    "hbs_latn": Language("g2p-hbs-latn", "hbs_latn_phonemic_filtered.tsv", "sh"),
    "hun": Language("g2p-hun", "hun_phonetic_filtered.tsv", "hu"),
    "ice": Language("g2p-isl", "ice_phonemic_filtered.tsv", "is"),
    "ita": Language("g2p-ita", "ita_phonemic_filtered.tsv", "it"),
    "jpn_hira": Language("g2p-jpn-hira", "jpn_hira_phonetic_filtered.tsv", "ja"),
    "khm": Language("g2p-khm", "khm_phonemic_filtered.tsv", ""),
    "kor": Language("g2p-kor", "kor_phonetic_filtered.tsv", "ko"),
    "lav": Language("g2p-lav", "lav_phonetic_filtered.tsv", "lv"),
    "mlt_latn": Language("g2p-mlt-latn", "mlt_latn_phonemic_filtered.tsv", ""),
    "rum": Language("g2p-ron", "rum_phonetic_filtered.tsv", "ro"),
    "slv": Language("g2p-slv", "slv_phonemic_filtered.tsv", "sl"),
    "vie_hanoi": Language("g2p-vie-hanoi", "vie_hanoi_phonetic_filtered.tsv", "vi"),
    "wel_sw": Language("g2p-cym-sw", "wel_sw_phonemic_filtered.tsv", ""),
}

# English: WikiPron's frequent words are g2p-eng-us-ipa's lexicon (in LANGUAGES too), never the
# ARPAbet bundles' (CMUdict's and the task's). Every English model is scored on them, the ARPAbet
# ones in IPA (service/answering/alphabet.py), against WikiPron's readings and CMUdict's
# (scripts/wikipron_lexicons.py): the task edited WikiPron's English.
ENGLISH = {"eng_us": Language("g2p-eng-us-ipa", "eng_us_phonemic_filtered.tsv", "en")}
LANGUAGES["eng_us"] = ENGLISH["eng_us"]
ENGLISH_MODELS = ("g2p-eng-us-ipa", "g2p-en", "g2p-en-stress", "g2p-en-compact")
# What a listener does not hear as another word, dropped before two English pronunciations are
# compared: length (the task dropped WikiPron's), stress marks (the ARPAbet models' IPA has them where
# the task's has none), syllable breaks, non-syllabic marks.
_ENGLISH_SILENT = str.maketrans("", "", "ːˈˌ.\u032f")
# Then the notations of one American sound that WikiPron's entries and ARPAbet's IPA
# (service/answering/alphabet.py) write differently, each written one way, longest first.
_ENGLISH_SAME = [("ɛəɹ", "ɛɹ"), ("eəɹ", "ɛɹ"), ("ɛɚ", "ɛɹ"), ("ɪɚ", "iɹ"), ("ɪɹ", "iɹ"), ("ʊɹ", "uɹ"), ("ʊɚ", "uɹ"),
                 ("ɝ", "əɹ"), ("ɚ", "əɹ"), ("ɜ", "ə"), ("ʌ", "ə"), ("l\u0329", "əl"), ("n\u0329", "ən"), ("m\u0329", "əm"),
                 ("ɒ", "ɑ"), ("ʍ", "w"), ("ɹ", "r"), ("ɡ", "g")]
LINK = "‿"  # French WikiPron's liaison mark: a link between two words, no sound of its own

# Where the task wrote an affricate as one tied segment and WikiPron (at COMMIT) as two: the two
# segments, the tied one, and the letters that spell it. The tie is put back only where the spelling
# has exactly as many of those letters as the pronunciation has such pairs; otherwise the entry is unsure.
_AFFRICATES = {
    "geo": [(("t", "sʼ"), "t͡sʼ", ("წ",)), (("t", "ʃʼ"), "t͡ʃʼ", ("ჭ",)), (("t", "s"), "t͡s", ("ც",)),
            (("d", "z"), "d͡z", ("ძ",)), (("t", "ʃ"), "t͡ʃ", ("ჩ",)), (("d", "ʒ"), "d͡ʒ", ("ჯ",))],
    "bul": [(("t", "s"), "t͡s", ("ц",)), (("t", "ʃ"), "t͡ʃ", ("ч",)), (("d", "ʒ"), "d͡ʒ", ("дж",))],
}
# English US: how the task rewrote WikiPron's segments (its every train, dev and test word that
# WikiPron has is reproduced so: data/wikipron/counts.json). Vowel length is dropped but on a (aː
# kept); these pairs are one segment or one sound in the task's notation, longest match first...
_ENG_PAIRS = {("t", "ʃ"): ("t͡ʃ",), ("d", "ʒ"): ("d͡ʒ",), ("ə", "ʊ"): ("o", "ʊ"), ("ɛ", "ə"): ("ɛ",),
              ("o", "ɹ"): ("ɔ", "ɹ"), ("i", "ɹ"): ("ɪ", "ɹ"), ("h", "w"): ("w",)}
# ...and these segments are written as another (wine-whine merged, ɒ as the American ɔ).
_ENG_SEGMENTS = {"ɒ": "ɔ", "ʍ": "w"}
_ENG_LONG_VOWELS = set("iuɑɔɜɝɛoɪæe")
# Segments the task's Bulgarian never has, written as the one it has for them (every l is ɫ, every
# plain t and d dental).
_BUL_SEGMENTS = {"l": "ɫ", "t": "t̪", "d": "d̪"}


def to_task(code: str, word: str, pron: str) -> str | None:
    """WikiPron's pronunciation of `word` in the task's conventions; None where that is not sure."""
    if code == "eng_us":
        return _to_task_english(pron)
    if code not in _AFFRICATES:
        return pron
    segments = pron.split()
    for pair, tied, letters in _AFFRICATES[code]:
        out, i = [], 0
        while i < len(segments):
            if tuple(segments[i:i + 2]) == pair:
                out.append(tied)
                i += 2
            else:
                out.append(segments[i])
                i += 1
        segments = out
        if segments.count(tied) != sum(word.count(letter) for letter in letters):
            return None
    if code == "bul":
        segments = [_BUL_SEGMENTS.get(s, s) for s in segments]
    return " ".join(segments)


def _to_task_english(pron: str) -> str:
    segments = [s.replace("ː", "") if s[0] in _ENG_LONG_VOWELS else s for s in pron.split()]
    out, i = [], 0
    while i < len(segments):
        pair = _ENG_PAIRS.get(tuple(segments[i:i + 2]))
        out += pair or [segments[i]]
        i += 2 if pair else 1
    return " ".join(_ENG_SEGMENTS.get(s, s) for s in out)


def by_sound(pron: str, code: str = "") -> str:
    """A pronunciation as heard: its segments run together with their ties and linking marks dropped,
    so that two transcriptions that differ only in how they cut the same sounds into segments compare
    equal; for English (code eng_us) length and stress dropped too, and the American notations of
    one sound written one way (_ENGLISH_SAME)."""
    heard = "".join(pron.split()).replace(TIE, "").replace(LINK, "")
    if code != "eng_us":
        return heard
    heard = heard.translate(_ENGLISH_SILENT)
    for written, same in _ENGLISH_SAME:
        heard = heard.replace(written, same)
    return heard


def read_tsv(path: Path) -> list[tuple[str, str]]:
    """`word<TAB>pronunciation` lines (a word on several lines for its pronunciations)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            word, pron = line.split("\t")[:2]
            out.append((word, pron))
    return out


@dataclass(frozen=True)
class Frequent:
    """One of a language's most frequent words that WikiPron transcribes."""
    word: str
    frequency: float  # wordfreq's: a token's share of running text
    in_task: bool  # a task file (train, dev or test) has the word
    right: tuple[str, ...]  # the pronunciations that read it right


def write_frequent(path: Path, rows: list[tuple[str, float, bool, list[str]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{w}\t{f:.3g}\t{'task' if t else '-'}\t{' | '.join(ps)}\n" for w, f, t, ps in rows),
                    encoding="utf-8")


def read_frequent(path: Path) -> list[Frequent]:
    """`word<TAB>frequency<TAB>task or -<TAB>pronunciation | pronunciation ...` lines, most frequent first."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        word, frequency, task, prons = line.split("\t")
        out.append(Frequent(word, float(frequency), task == "task", tuple(p.strip() for p in prons.split("|"))))
    return out
