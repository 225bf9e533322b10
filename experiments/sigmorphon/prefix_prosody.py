"""Would a memory of trained words decide prosody better than the model? Asked on held-out words only.

Korean vowel length (most of `kor`'s errors, docs/results/sigmorphon_errors.md) is lexical: the spelling
does not write it, but words that share their first syllables often share it (a Sino-Korean morpheme).
For each held-out word whose first `prefix` source symbols (NFC: for Hangul, syllables) begin some word
the model trained on, this counts how often the majority of those trained words has the held-out word's
prosody (any prosodic mark or none, errors.py PROSODY) against how often the model's
output has it, and what deciding it that way would mend and break where the model's segments are
otherwise right.

    python -m experiments.sigmorphon heldout --langs kor --tag recipe       # the model, on the held-out eighth
    python -m experiments.sigmorphon prefix-prosody --lang kor --tag recipe

Reads runs/sigmorphon-heldout/<lang>/ (the held-out words, the rest of the train file, the model); the dev
file counts as trained where the recipe trains on it; never the test file.
"""
from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict

from experiments.sigmorphon.build import trains_on_dev
from experiments.sigmorphon.errors import bare
from experiments.sigmorphon.heldout import runs_of
from experiments.sigmorphon.layout import Study
from training.data import read_lines
from training.evaluate import hyps_from_bundle


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


def ask(study: Study, lang: str, tag: str, prefix: int = 2) -> dict:
    """The counts for the model a held-out question (heldout.py, the first eighth) built under `tag`."""
    root = runs_of(study, 0) / lang
    held = read_lines(root / "heldout.tsv")
    trained = read_lines(root / "train_rest.tsv")
    if trains_on_dev(study.task.recipe_for(lang), study.rules()):
        trained += read_lines(study.files(lang)["dev"])
    hyps = hyps_from_bundle(str(root / tag / "bundle" / "1"), sorted({s for s, _ in held}), 256, study.task.beam,
                            0.0, "fp32", texts=True)
    return {"lang": lang, "tag": tag, "prefix": prefix, **prefix_prosody(trained, held, hyps, prefix)}
