"""How a language's running text is read aloud: its abbreviations, letters, signs, currencies and
number marks, from a data file per language (textdata/<language>.tsv) and a model's own file.

The bundle declares its language (the manifest's `language`, attnserve/bundle; bundles from before
the field that were trained on CMUdict read as English). A model's own file (models/<name>/text.tsv, or
<overrides-dir>/<name>.text.tsv) has the format of the shipped one, and a written form it lists
replaces every line the shipped file has for it, as the overrides file's words win over the lexicon.
A bad line is refused with its file and line number (LexiconError), and nothing of the file is taken.

Two kinds give a pronunciation, in the symbols of the language's models separated by spaces, where
the model cannot be trusted: `elision` (French j' l' qu', Italian l'), a clitic written as letters
and an apostrophe, read as a word of its own before the word it leans on, which is read as any word
is; `word`, a word the lexicon lacks whose reading is a rule of the language (French `a`, the verb,
is /a/). A model whose output symbols lack one of them reads that word as written, as it would
without the rule (text.py). A `spelling` maps a letter the language writes to the letters its models
were trained on (Greek's final ς as σ), for a model that lacks the letter (text.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from service.answering.languages import spellout
from service.domain import LexiconError

DATA = Path(__file__).resolve().parent / "textdata"
WHEN = ("", "before_capital", "after_capital", "before_number", "after_number")
KINDS = ("abbreviation", "letter", "symbol", "currency", "unit", "mark", "ordinal", "time", "elision", "word",
         "spelling")
APOSTROPHES = "'\u2019"  # an elision's apostrophe: either is written, the ASCII one is its key
MARKS = ("decimal", "thousands", "point")
ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")  # a mark's character written as an escape (\u00a0)
TIMES = ("oclock", "oh")
# Language tags a bundle may carry (ISO 639-1, 639-2/B and /T, 639-3, with a region or a script after
# it) -> num2words's language; only languages num2words reads are here.
NUM2WORDS = {"en": "en", "eng": "en", "fr": "fr", "fre": "fr", "fra": "fr", "de": "de", "ger": "de", "deu": "de",
             "es": "es", "spa": "es", "it": "it", "ita": "it", "nl": "nl", "dut": "nl", "nld": "nl", "hu": "hu",
             "hun": "hu", "sl": "sl", "slv": "sl", "ro": "ro", "rum": "ro", "ron": "ro", "lv": "lv", "lav": "lv",
             "is": "is", "ice": "is", "isl": "is", "ko": "ko", "kor": "ko", "ja": "ja", "jpn": "ja", "vi": "vi",
             "vie": "vi", "cy": "cy", "wel": "cy", "cym": "cy", "sr": "sr", "hbs": "sr", "pt": "pt", "por": "pt",
             "pl": "pl", "pol": "pl", "cs": "cs", "cze": "cs", "ces": "cs", "ru": "ru", "rus": "ru", "sv": "sv",
             "swe": "sv", "da": "da", "dan": "da", "fi": "fi", "fin": "fi", "tr": "tr", "tur": "tr", "uk": "uk",
             "ukr": "uk", "lt": "lt", "lit": "lt", "ca": "ca", "cat": "ca", "he": "he", "heb": "he",
             # read by CLDR's rules (unicode-rbnf, languages/spellout.py) where it is installed
             "bg": "bg", "bul": "bg", "el": "el", "gre": "el", "ell": "el", "hy": "hy", "arm": "hy", "hye": "hy",
             "ka": "ka", "geo": "ka", "kat": "ka", "km": "km", "khm": "km", "mt": "mt", "mlt": "mt"}


def base_language(tag: str) -> str:
    """`eng_us`, `en-US`, `hbs_latn` -> `eng`, `en`, `hbs`: what the data files and num2words key on."""
    return tag.replace("-", "_").split("_")[0].lower()


@dataclass(frozen=True)
class TextRules:
    language: str = ""  # the bundle's tag, as declared
    num2words: str | None = None  # num2words's language, None: numbers cannot be read
    decimal: str = "."
    thousands: str = ","
    point: str = "point"  # the decimal mark read aloud
    ordinals: tuple[str, ...] = ()
    times: dict[str, str] = field(default_factory=dict)
    abbreviations: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # written -> ((spoken, when), ...)
    letters: dict[str, str] = field(default_factory=dict)
    symbols: dict[str, str] = field(default_factory=dict)
    currencies: dict[str, str] = field(default_factory=dict)  # sign -> ISO 4217 code
    units: dict[str, tuple[str, str]] = field(default_factory=dict)  # code -> (singular, plural)
    elisions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "qu'" (lower case) -> its symbols
    words: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "a" (lower case) -> its symbols
    spellings: dict[str, str] = field(default_factory=dict)  # "ς" -> "σ": a letter -> the letters the model reads

    @property
    def english(self) -> bool:
        return self.num2words == "en"


def _parse(path: Path) -> dict[str, list[tuple[str, tuple[str, ...], int]]]:
    """kind -> [(written, the other fields, line number)], in file order."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LexiconError(f"{path}: cannot be read as UTF-8 text: {e}") from None
    out: dict[str, list] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        kind = fields[0].strip()
        least = 2 if kind == "ordinal" else 3  # an ordinal suffix is read by num2words: it has no spoken field
        if kind not in KINDS or len(fields) < least or not fields[1].strip() or least == 3 and kind != "mark" and not fields[2].strip():
            raise LexiconError(f"{path}:{n}: expected kind<TAB>written<TAB>spoken with kind one of {KINDS}, "
                               f"got {line!r}")
        # a mark's characters may be spaces (French writes 3 000 with a no-break space): not stripped
        # its \uXXXX escapes read, and only those: the rest may be any letters (virgulă, κόμμα)
        rest = (tuple(f.strip() for f in fields[2:]) if kind != "mark"
                else (ESCAPE.sub(lambda e: chr(int(e[1], 16)), fields[2]),))
        written = fields[1].strip()
        if kind == "abbreviation" and (len(rest) > 2 or (rest[1:] or ("",))[0] not in WHEN):
            raise LexiconError(f"{path}:{n}: an abbreviation's `when` must be one of {WHEN[1:]} or nothing, got {line!r}")
        if kind == "mark" and written not in MARKS or kind == "time" and written not in TIMES:
            raise LexiconError(f"{path}:{n}: {kind} {written!r} is not one of {MARKS if kind == 'mark' else TIMES}")
        if kind == "elision" and not (len(written) >= 2 and written[-1] in APOSTROPHES and written[:-1].isalpha()):
            raise LexiconError(f"{path}:{n}: an elision is letters then an apostrophe, got {written!r}")
        if kind == "spelling" and not (len(written) == 1 and written.isalpha() and rest[0].isalpha()):
            raise LexiconError(f"{path}:{n}: a spelling is one letter<TAB>the letters the model reads, got {line!r}")
        if kind == "word" and not written.isalpha():
            raise LexiconError(f"{path}:{n}: a word is letters only, got {written!r}")
        if kind == "unit" and len(rest) != 2:
            raise LexiconError(f"{path}:{n}: a unit is code<TAB>singular<TAB>plural, got {line!r}")
        out.setdefault(kind, []).append((written, rest, n))
    return out


def _merged(shipped: dict, own: dict) -> dict:
    """The shipped lines, every written form the model's own file lists replaced by its lines."""
    merged = {}
    for kind in KINDS:
        replaced = {w for w, _, _ in own.get(kind, [])}
        merged[kind] = [x for x in shipped.get(kind, []) if x[0] not in replaced] + own.get(kind, [])
    return merged


def read_rules(language: str, own_file: Path | None = None) -> TextRules:
    """The rules for a bundle's language tag: the shipped file of its base language, if any, under
    the model's own file, if it exists. LexiconError for a bad line."""
    base = base_language(language)
    shipped_path = DATA / f"{NUM2WORDS.get(base, base)}.tsv"
    shipped = _parse(shipped_path) if language and shipped_path.is_file() else {}
    own = _parse(own_file) if own_file is not None and own_file.is_file() else {}
    lines = _merged(shipped, own)
    marks = {w: rest[0] for w, rest, _ in lines["mark"]}
    abbreviations: dict[str, list] = {}
    for written, rest, _ in lines["abbreviation"]:
        abbreviations.setdefault(written, []).append((rest[0], rest[1] if len(rest) > 1 else ""))
    spoken = NUM2WORDS.get(base)
    return TextRules(
        language=language, num2words=spoken if spoken in spellout.CONVERTER_CLASSES else None,
        decimal=marks.get("decimal", "."), thousands=marks.get("thousands", ","), point=marks.get("point", "point"),
        ordinals=tuple(sorted({w for w, _, _ in lines["ordinal"]}, key=len, reverse=True)),
        times={w: rest[0] for w, rest, _ in lines["time"]},
        abbreviations={w: tuple(v) for w, v in abbreviations.items()},
        letters={w.lower(): rest[0] for w, rest, _ in lines["letter"]},
        symbols={w: rest[0] for w, rest, _ in lines["symbol"]},
        currencies={w: rest[0] for w, rest, _ in lines["currency"]},
        units={w: (rest[0], rest[1]) for w, rest, _ in lines["unit"]},
        elisions={w[:-1].lower() + "'": tuple(rest[0].split()) for w, rest, _ in lines["elision"]},
        words={w.lower(): tuple(rest[0].split()) for w, rest, _ in lines["word"]},
        spellings={w: rest[0] for w, rest, _ in lines["spelling"]})
