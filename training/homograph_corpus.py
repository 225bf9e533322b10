"""The homograph context model's corpus: data/wikipedia-homographs' train split as source<TAB>target
files for training/train.py (--src-tokens words), the source made by the bundle's own context_source.

    python -m training.homograph_corpus --out runs/homograph/data --window 10
    python -m training.homograph_corpus --finish models/homograph-en/1 --window 10   # after export

writes train.tsv and heldout.tsv: a tenth of each homograph's train sentences held out (by a hash of
the sentence, so the same on every run), for every choice (window, size, epochs); the eval split is
never read here. A word seen fewer than --min-count times in the kept train sentences is written as
<unk> there, so the model learns what an unseen word is; the held-out sources keep their words (the
vocabulary makes them <unk>, as the server does).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import re
from collections import Counter, defaultdict
from pathlib import Path

from attnserve.bundle import manifest as bundle_manifest
from attnserve.bundle.homographs import NORMALIZATION, context_source

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "wikipedia-homographs"
SUPPLEMENT = REPO / "data" / "homograph-supplement" / "sentences.tsv"
UNK = "<unk>"


def read_split(path: Path) -> list[dict]:
    """The rows of a split file: homograph, wordid, sentence, start, end (character offsets, as ints)."""
    with Path(path).open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for r in rows:
        r["start"], r["end"] = int(r["start"]), int(r["end"])
    return rows


def read_supplement(path: Path = SUPPLEMENT) -> list[dict]:
    """The hand-written sentences (homograph, wordid, sentence), each homograph's span its first whole-word
    occurrence in the sentence; ValueError naming a line whose sentence lacks it."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()[1:], 2):
        word, wordid, sentence = line.split("\t")
        found = re.search(rf"\b{re.escape(word)}\b", sentence, re.IGNORECASE)
        if found is None:
            raise ValueError(f"{path}:{n}: {word!r} is not a word of the sentence")
        rows.append({"homograph": word, "wordid": wordid, "sentence": sentence, "start": found.start(),
                     "end": found.end()})
    return rows


def held_out(rows: list[dict], share: int = 10) -> tuple[list[dict], list[dict]]:
    """(kept, held out): of each homograph's rows, the 1/share with the smallest sentence hashes held out."""
    by_word = defaultdict(list)
    for r in rows:
        by_word[r["homograph"]].append(r)
    kept, out = [], []
    for word in sorted(by_word):
        ranked = sorted(by_word[word], key=lambda r: hashlib.sha1(r["sentence"].encode()).hexdigest())
        n = max(1, round(len(ranked) / share))
        out += ranked[:n]
        kept += ranked[n:]
    return kept, out


def balanced(pairs: list[tuple[str, str]], rows: list[dict], share: float) -> list[tuple[str, str]]:
    """The pairs with each homograph's rarer readings repeated (whole copies, in order) up to `share` of
    its commonest reading's count: what the model is scored on counts each reading alike."""
    counts = Counter((r["homograph"], r["wordid"]) for r in rows)
    top = defaultdict(int)
    for (word, _), n in counts.items():
        top[word] = max(top[word], n)
    out = list(pairs)
    for pair, r in zip(pairs, rows):
        n = counts[(r["homograph"], r["wordid"])]
        out += [pair] * (max(1, round(share * top[r["homograph"]] / n)) - 1)
    return out


def write(path: Path, pairs: list[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")


def finish(bundle: Path, window: int) -> None:
    """An exported context model's manifest: its sources' normalization and how it reads a sentence."""
    manifest = bundle_manifest.read(bundle)
    bundle_manifest.write(bundle, manifest.replace(
        source_normalization=NORMALIZATION, context={"window": window, "trained_on": "data/wikipedia-homographs/"
                                                    "train.tsv, a tenth of each homograph held out for dev"}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="where train.tsv and heldout.tsv go")
    ap.add_argument("--finish", type=Path, help="an exported bundle to declare a context model instead")
    ap.add_argument("--window", type=int, default=10, help="tokens on each side of the homograph [10]")
    ap.add_argument("--min-count", type=int, default=2, help="rarer train words become <unk> [2]")
    ap.add_argument("--supplement", action="store_true", help="train on data/homograph-supplement's "
                    "hand-written sentences too")
    ap.add_argument("--balance", type=float, default=0.0, help="repeat a homograph's rarer readings' train "
                    "sentences until each has at least this share of its commonest reading's count [0: as they are]")
    args = ap.parse_args(argv)
    if args.finish:
        return finish(args.finish, args.window)
    rows = read_split(DATA / "train.tsv")
    kept, out = held_out(rows)
    if args.supplement:  # training only: the held-out part stays Wikipedia's
        kept += read_supplement()
    src = {id(r): context_source(r["sentence"], r["start"], r["end"], args.window).split() for r in kept + out}
    counts = Counter(w for r in kept for w in src[id(r)])
    train = [(" ".join(w if counts[w] >= args.min_count else UNK for w in src[id(r)]), r["wordid"]) for r in kept]
    write(args.out / "train.tsv", balanced(train, kept, args.balance) if args.balance else train)
    write(args.out / "heldout.tsv", [(" ".join(src[id(r)]), r["wordid"]) for r in out])
    print(f"{len(train)} train, {len(out)} held out; {sum(1 for w in counts if counts[w] >= args.min_count)} words")


if __name__ == "__main__":
    main()
