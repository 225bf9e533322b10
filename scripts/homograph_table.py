"""Make a G2P bundle's homographs table: each wordid of data/wikipedia-homographs -> the bundle
lexicon's pronunciation of it (attnserve/bundle/homographs.py), matched by the wordid's IPA.

    python scripts/homograph_table.py --bundle models/g2p-en-stress/1 > table.tsv
    python scripts/homograph_table.py --bundle models/g2p-en-stress/1 --fix data/wikipedia-homographs/fixes-arpabet.tsv \
        --install homograph-en    # the table into the bundle, the readings it lacks into its lexicon

The annotators' IPA (wordids.tsv) is turned into ARPAbet with stress and compared with each of the
lexicon's pronunciations of the homograph by an edit distance (a stress mark costs half a phone);
each wordid takes the nearest. The lines where two wordids take one pronunciation the bundle can tell
apart, or where the nearest is barely nearer than the next, are printed on stderr, for a person to check
and set by --fix (homograph<TAB>wordid<TAB>pronunciation lines that win over the match). A wordid whose
reading the lexicon lacks is set by --fix too, and its pronunciation is added to the lexicon by the one
who makes the bundle.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from attnserve.bundle import manifest  # noqa: E402

TABLE = "homographs.tsv"
WORDIDS = REPO / "data" / "wikipedia-homographs" / "wordids.tsv"

_MULTI = {"eɪ": "EY", "aɪ": "AY", "ɔɪ": "OY", "aʊ": "AW", "oʊ": "OW", "dʒ": "JH", "tʃ": "CH", "ɜɹ": "ER", "ɝ": "ER",
          "ɚ": "ER", "ɜ": "ER"}
_ONE = {"æ": "AE", "ɑ": "AA", "ɒ": "AA", "ɔ": "AO", "ə": "AH", "ʌ": "AH", "ɛ": "EH", "ɪ": "IH", "i": "IY", "ʊ": "UH",
        "u": "UW", "e": "EY", "o": "OW", "a": "AA", "ʤ": "JH", "ʧ": "CH", "b": "B", "d": "D", "f": "F", "g": "G",
        "ɡ": "G", "h": "HH", "k": "K", "l": "L", "m": "M", "n": "N", "ŋ": "NG", "p": "P", "ɹ": "R", "r": "R", "s": "S",
        "ʃ": "SH", "t": "T", "θ": "TH", "ð": "DH", "v": "V", "w": "W", "j": "Y", "z": "Z", "ʒ": "ZH", "ɾ": "T"}
VOWELS = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"}


def arpabet(ipa: str) -> list[str]:
    """The annotators' IPA as ARPAbet, each vowel with its stress ('1 primary, ˌ secondary, else 0)."""
    out, stress, i = [], "0", 0
    while i < len(ipa):
        c = ipa[i]
        if c in "'ˈ":
            stress, i = "1", i + 1
            continue
        if c == "ˌ":
            stress, i = "2", i + 1
            continue
        two = ipa[i:i + 2]
        phone = _MULTI.get(two)
        i += 2 if phone else 1
        phone = phone or _MULTI.get(c) or _ONE.get(c)
        if phone is None:
            continue  # length marks, the annotators' digits
        if phone in VOWELS:
            phone, stress = phone + stress, "0"
        out.append(phone)
    return out


_NEAR = {frozenset(p): 0.3 for p in (("AH", "IH"), ("AH", "EH"), ("IH", "EH"), ("IH", "IY"), ("AA", "AO"),
                                     ("AH", "UH"))}


def distance(a: list[str], b: list[str], stress: bool) -> float:
    """Edit distance between phone lists: reduced vowels apart cost 0.3, a stress apart 0.5 (primary) or
    0.25 (secondary against none), nothing where the bundle has no stress."""
    def sub(x: str, y: str) -> float:
        if x == y:
            return 0.0
        bx, by = x.rstrip("012"), y.rstrip("012")
        if bx not in VOWELS or by not in VOWELS:
            return 1.0
        sx, sy = x[len(bx):], y[len(by):]
        cost = 0.0 if bx == by else 0.3 if sx == sy == "0" else _NEAR.get(frozenset((bx, by)), 1.0)
        if stress and sx != sy:
            cost += 0.5 if "1" in (sx, sy) else 0.25
        return min(cost, 1.0)
    prev = [float(j) for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        cur = [float(i)]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + sub(x, y)))
        prev = cur
    return prev[-1]


NEW = 0.75  # what a reading the lexicon lacks costs over its distance: a near one of the lexicon's is kept


def assign(wants: list[list[str]], prons: list[str], stress: bool) -> list[str]:
    """Each wanted reading's pronunciation: the assignment of distinct pronunciations of least total
    distance, among the lexicon's and the wanted readings themselves (those at a cost of NEW more); in a
    bundle without stress (or with fewer pronunciations than readings), each reading's nearest."""
    own = [" ".join(w if stress else [p.rstrip("012") for p in w]) for w in wants]
    cands = list(dict.fromkeys(prons + own))
    cost = [[distance(w, p.split(), stress) + (NEW if p not in prons else 0.0) for p in cands] for w in wants]
    if len(cands) < len(wants) or not stress:  # readings apart only by stress are one where it is not written
        return [cands[min(range(len(cands)), key=row.__getitem__)] for row in cost]
    best = min(itertools.permutations(range(len(cands)), len(wants)),
               key=lambda js: sum(cost[i][j] for i, j in enumerate(js)))
    return [cands[j] for j in best]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--fix", type=Path, help="homograph<TAB>wordid<TAB>pronunciation lines set by a person")
    ap.add_argument("--install", metavar="CONTEXT_MODEL", help="write the table into the bundle (homographs.tsv), "
                    "append the readings its lexicon lacks to it (after a word's own, so its primary reading stays; "
                    "a word it lacks gets them in wordids.tsv's order) and name both in its manifest")
    ap.add_argument("--like", type=Path, help="take another bundle's table (its homographs.tsv) instead of "
                    "matching, stress removed where this bundle has none (g2p-en: g2p-en-stress's, CMUdict both)")
    args = ap.parse_args(argv)
    lexicon = defaultdict(list)
    for line in (args.bundle / "lexicon.tsv").read_text(encoding="utf-8").splitlines():
        word, pron = line.split("\t")
        lexicon[word].append(pron)
    stress = any(p[-1:].isdigit() for prons in list(lexicon.values())[:50] for p in prons[0].split())
    fixed = {}
    if args.fix:
        for line in args.fix.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                word, wordid, pron = line.split("\t")
                fixed[wordid] = pron.strip()
    if not stress:  # the fixes are written with stress
        fixed = {w: " ".join(p.rstrip("012") for p in pron.split()) for w, pron in fixed.items()}
    if args.like:
        for line in (args.like / TABLE).read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                word, wordid, pron = line.split("\t")
                fixed[wordid] = pron if stress else " ".join(p.rstrip("012") for p in pron.split())
    rows = [line.split("\t") for line in WORDIDS.read_text(encoding="utf-8").splitlines()[1:]]
    by_word = defaultdict(list)
    for word, wordid, _, ipa, *_ in rows:
        by_word[word].append((wordid, ipa))
    lines = ["# homograph\twordid\tpronunciation: made by scripts/homograph_table.py from "
             "data/wikipedia-homographs/wordids.tsv and this bundle's lexicon"]
    added = []
    for word, ids in by_word.items():
        prons = lexicon.get(word, [])
        free = [(w, ipa) for w, ipa in ids if w not in fixed]
        wants = [arpabet(ipa) for _, ipa in free]
        chosen = dict(fixed)
        chosen.update(zip([w for w, _ in free], assign(wants, prons, stress) if free else []))
        for (wordid, ipa), want in zip(free, wants):
            ranked = sorted(distance(want, p.split(), stress) for p in prons) or [0.0]
            mine = distance(want, chosen[wordid].split(), stress)
            if mine > ranked[0] + 0.5 or mine >= 1:
                print(f"CHECK {word} {wordid} {ipa} -> {' '.join(want)}: {chosen[wordid]} ({mine}) of {prons}",
                      file=sys.stderr)
        for wordid, _ in ids:
            lines.append(f"{word}\t{wordid}\t{chosen[wordid]}")
            if chosen[wordid] not in prons and (word, chosen[wordid]) not in added:
                added.append((word, chosen[wordid]))
    for word, pron in added:
        print(f"ADD {word}\t{pron}", file=sys.stderr)
    if not args.install:
        print("\n".join(lines))
        return
    with (args.bundle / "lexicon.tsv").open("a", encoding="utf-8") as f:
        f.writelines(f"{word}\t{pron}\n" for word, pron in added)
    (args.bundle / TABLE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    m = manifest.read(args.bundle)
    lexicon = {**manifest._json(m.lexicon), "entries": m.lexicon.extra.get("entries", 0) + len(added),
               "homograph_readings_added": len(added)}
    manifest.write(args.bundle, m.replace(lexicon=lexicon, homographs={
        "model": args.install, "file": TABLE, "made_by": "scripts/homograph_table.py --fix "
        "data/wikipedia-homographs/fixes-arpabet.tsv"}))

if __name__ == "__main__":
    main()
