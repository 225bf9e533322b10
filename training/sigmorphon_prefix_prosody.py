"""Would a memory of trained words decide prosody better than the model? Asked on held-out words only.

Korean vowel length (most of `kor`'s errors, docs/results/sigmorphon_errors.md) is lexical: the spelling
does not write it, but words that share their first syllables often share it (a Sino-Korean morpheme).
For each held-out word whose first `prefix` source symbols (NFC: for Hangul, syllables) begin some word
the model trained on, this counts how often the majority of those trained words has the held-out word's
prosody (any prosodic mark or none, training/sigmorphon_errors.py PROSODY) against how often the model's
output has it, and what deciding it that way would mend and break where the model's segments are
otherwise right.

    python -m training.sigmorphon_heldout --langs kor --tag recipe       # the model, on the held-out eighth
    python -m training.sigmorphon_prefix_prosody --lang kor --tag recipe

Reads runs/sigmorphon-heldout/<lang>/ (the held-out words, the rest of the train file, the model); the dev
file counts as trained where the recipe trains on it; never the test file.
"""
from __future__ import annotations

import argparse
import json
import unicodedata
from collections import Counter, defaultdict

from training.data import read_lines
from training.sigmorphon import RULES, files, recipe_for, trains_on_dev
from training.sigmorphon_errors import bare
from training.sigmorphon_heldout import RUNS
from training.sigmorphon_recipes import BEAM, LANGS


def marked(segments: list[str]) -> bool:
    """Whether any segment carries a prosodic mark."""
    return bare(segments) != [unicodedata.normalize("NFC", s) for s in segments]


COUNTS = ("wrong", "prosody_only", "covered", "majority_right", "model_right", "would_mend", "would_break")


def prefix_prosody(trained: list[tuple[str, str]], held: list[tuple[str, str]], hyps: dict[str, list[str]],
                   prefix: int = 2) -> dict:
    """Counts over the held-out words (see the module's docstring)."""
    seen: dict[str, Counter] = defaultdict(Counter)
    for src, tgt in trained:
        seen[unicodedata.normalize("NFC", src)[:prefix]][marked(tgt.split())] += 1
    out = Counter(dict.fromkeys(COUNTS, 0), words=len(held))  # every count present, zeros too
    for src, tgt in held:
        gold, hyp = tgt.split(), hyps[src]
        key = unicodedata.normalize("NFC", src)[:prefix]
        out["wrong"] += hyp != gold
        out["prosody_only"] += hyp != gold and bare(hyp) == bare(gold)
        if len(key) < prefix or not seen[key]:
            continue
        majority = seen[key][True] > seen[key][False]
        out["covered"] += 1
        out["majority_right"] += majority == marked(gold)
        out["model_right"] += marked(hyp) == marked(gold)
        if bare(hyp) == bare(gold):
            out["would_mend"] += marked(hyp) != marked(gold) and majority == marked(gold)
            out["would_break"] += marked(hyp) == marked(gold) and majority != marked(gold)
    out["gold_marked"] = sum(marked(t.split()) for _, t in held)
    out["model_marked"] = sum(marked(hyps[s]) for s, _ in held)
    return dict(out)


def main(argv=None):
    from training.evaluate import hyps_from_bundle

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lang", choices=sorted(LANGS), required=True)
    p.add_argument("--tag", required=True, help="the held-out run's tag (python -m training.sigmorphon_heldout)")
    p.add_argument("--prefix", type=int, default=2, help="source symbols a trained word must share")
    args = p.parse_args(argv)
    root = RUNS / args.lang
    held = read_lines(root / "heldout.tsv")
    trained = read_lines(root / "train_rest.tsv")
    if trains_on_dev(recipe_for(args.lang), RULES):
        trained += read_lines(files(args.lang)["dev"])
    hyps = hyps_from_bundle(str(root / args.tag / "bundle" / "1"), sorted({s for s, _ in held}), 256, BEAM, 0.0,
                            "fp32", texts=True)
    print(json.dumps({"lang": args.lang, "tag": args.tag, "prefix": args.prefix,
                      **prefix_prosody(trained, held, hyps, args.prefix)}))


if __name__ == "__main__":
    main()
