"""Write a bundle's prosody memory (attnserve/bundle/prosody.py) from the pairs its model trained on.

    python -m training.prosody_memory --bundle models/g2p-kor/1 --pairs kor_train.tsv kor_dev.tsv --mark ː \
        --prefixes 3 2 1 --segment-pair ʌ̹ ɘː

For each beginning of `prefixes` characters (NFC) that trained words have, whether most of them carry the
mark (a tie writes nothing: a shorter beginning, or the model, decides). Refused where the data does not fix the mark's place: every
trained output with the mark must have it on its first segment that can carry it (Korean length: the
first vowel), since that is where the engine puts it.
"""
from __future__ import annotations

import argparse
import json
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

from attnserve.bundle import read, write
from attnserve.bundle.prosody import FILE, markable
from training.data import read_lines


def place_checked(pairs: list[tuple[str, str]], mark: str, with_mark: dict[str, str]) -> None:
    """ValueError naming the first trained pair whose mark is not on its first markable segment."""
    can_carry = set(with_mark) | {s for _, tgt in pairs for s in tgt.split() if mark in s}
    for src, tgt in pairs:
        segments = tgt.split()
        marked = [i for i, s in enumerate(segments) if mark in s]
        if not marked:
            continue
        first = next(i for i, s in enumerate(segments) if s in can_carry)  # the marked one can carry it
        if marked != [first]:
            raise ValueError(f"{src!r} -> {tgt!r}: the mark {mark!r} is on segments {marked}, not only on the "
                             f"first that can carry it ({first}); a memory would put it elsewhere")


def votes(pairs: list[tuple[str, str]], mark: str, prefixes: tuple[int, ...]) -> dict[str, bool]:
    """beginning -> whether most trained words beginning so carry the mark (ties left out), for each length."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for src, tgt in pairs:
        word = unicodedata.normalize("NFC", src)
        for n in prefixes:
            if len(word) >= n:
                counts[word[:n]][mark in tgt] += 1
    return {key: c[True] > c[False] for key, c in sorted(counts.items()) if c[True] != c[False]}


def add_memory(bundle: Path, pairs: list[tuple[str, str]], mark: str, prefixes: tuple[int, ...],
               segment_pairs: dict[str, str] | None = None, why: str = "") -> dict:
    """Write the memory into the bundle and its manifest; the manifest's `prosody_memory`. segment_pairs:
    bare -> marked segments beyond those that differ by the mark alone (prosody.markable)."""
    manifest = read(bundle)
    if manifest.src_tokenization != "chars":
        raise ValueError("a prosody memory keys on a word's first characters: it needs a model of char sources")
    with_mark = markable(list(manifest.tgt_vocab), mark, segment_pairs)
    if not with_mark:
        raise ValueError(f"no segment of the output vocabulary carries {mark!r} beside its bare form")
    place_checked(pairs, mark, with_mark)
    prefixes = tuple(sorted(prefixes, reverse=True))
    decided = votes(pairs, mark, prefixes)
    (bundle / FILE).write_text("".join(f"{k}\t{int(v)}\n" for k, v in decided.items()), encoding="utf-8")
    spec = {"mark": mark, "prefixes": list(prefixes), "pairs": segment_pairs or {}, "file": FILE,
            "trained_words": len(pairs), "entries": len(decided),
            "why": why or "words that share their first characters often share the mark"}
    write(bundle, manifest.replace(prosody_memory=spec))
    return spec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--pairs", type=Path, nargs="+", required=True, help="source<TAB>target files the model trained on")
    p.add_argument("--mark", default="ː")
    p.add_argument("--prefixes", type=int, nargs="+", default=[2], help="beginnings' lengths, tried longest first")
    p.add_argument("--segment-pair", nargs=2, action="append", default=[], metavar=("BARE", "MARKED"),
                   help="a bare segment and its marked form where they differ by more than the mark")
    args = p.parse_args(argv)
    pairs = [pair for path in args.pairs for pair in read_lines(path)]
    print(json.dumps(add_memory(args.bundle, pairs, args.mark, tuple(args.prefixes), dict(args.segment_pair)),
                     ensure_ascii=False))


if __name__ == "__main__":
    main()
