"""Where the SIGMORPHON models' dev errors are: of the dev words a shipped model gets wrong (in the
precision served, with the table's decoding), how many differ from the gold only in prosodic marks
(vowel length ː ˑ, stress ˈ ˌ, the tone and pitch-accent diacritics, tone letters), and how many in one
segment. Read on dev only, so that no choice made from it touches a test figure.

    python -m experiments.sigmorphon errors [--langs kor hbs_latn] [--out docs/results/sigmorphon_errors.md]

Where most of a language's errors are length or tone, which its spelling does not write (Korean
vowel length, Serbo-Croatian and Slovenian pitch accent), more of the same training mostly relearns
a lexical lottery; the table says which languages those are.
"""
from __future__ import annotations

import json
import unicodedata

from experiments.sigmorphon.flags import trained_on_dev
from experiments.sigmorphon.layout import Study
from service.engine.engine import served_precision
from training.data import read_lines
from training.evaluate import hyps_from_bundle

# Marks of length, stress and tone: spacing (ː ˑ ˈ ˌ, the tone letters ˥ ˦ ˧ ˨ ˩) and combining (grave,
# acute, circumflex, macron, double acute, caron, double grave). Segmental diacritics (the tilde of
# nasal vowels, the marks below of tongue position) are not among them.
PROSODY = set("ːˑˈˌ˥˦˧˨˩") | {"\u0300", "\u0301", "\u0302", "\u0304", "\u030b", "\u030c", "\u030f"}


def bare(segments: list[str]) -> list[str]:
    """The segments without their prosodic marks (a segment that was only marks is dropped)."""
    out = []
    for seg in segments:
        kept = "".join(ch for ch in unicodedata.normalize("NFD", seg) if ch not in PROSODY)
        if kept:
            out.append(unicodedata.normalize("NFC", kept))
    return out


def one_segment_apart(a: list[str], b: list[str]) -> bool:
    """One substitution, insertion or deletion of a whole segment turns a into b."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def classify(rows: list[tuple[str, str]], hyps: dict[str, list[str]]) -> dict:
    """Counts over (source, gold) rows: words, errors, prosody-only errors, one-segment errors."""
    errors = [(hyps[s], g.split()) for s, g in rows if hyps[s] != g.split()]
    prosody = [(h, g) for h, g in errors if bare(h) == bare(g)]
    return {"words": len(rows), "errors": len(errors), "prosody_only": len(prosody),
            "one_segment": sum(one_segment_apart(h, g) for h, g in errors),
            "examples": [(" ".join(h), " ".join(g)) for h, g in prosody[:3]]}


def language(study: Study, lang: str) -> dict:
    rules = study.rules()
    bundle = study.bundle(lang, rules)
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    precision = served_precision(manifest, "auto")
    rows = read_lines(study.files(lang)["dev"])
    hyps = hyps_from_bundle(str(bundle), sorted({s for s, _ in rows}), 256, study.task.beam, 0.0, precision,
                            texts=True)
    return {"lang": lang, "model": study.name(lang, rules), "precision": precision,
            "trained_on_dev": trained_on_dev(manifest), **classify(rows, hyps)}


def table(results: list[dict], beam: int) -> str:
    lines = ["# Where the SIGMORPHON models' dev errors are", "",
             f"`python -m experiments.sigmorphon errors`: each shipped model on its dev file, beam {beam}, in the "
             "precision served. *Prosody only*: the output differs from the gold only in length, stress or tone "
             "marks (ː ˑ ˈ ˌ, tone letters, accent diacritics); *one segment*: one segment substituted, inserted or "
             "dropped (prosody-only errors of one segment among them). A model that trained on its dev file too "
             "(the low ones, docs/sigmorphon.md) shows its errors on words it learned: marked *trained on*.", "",
             "| language | model | dev words | errors | prosody only | one segment | an error of prosody only: ours / gold |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        share = f"{r['prosody_only']} ({100 * r['prosody_only'] / max(r['errors'], 1):.0f}%)"
        example = f"{r['examples'][0][0]} / {r['examples'][0][1]}" if r["examples"] else ""
        words = f"{r['words']} (*trained on*)" if r["trained_on_dev"] else r["words"]
        lines.append(f"| `{r['lang']}` | `{r['model']}` | {words} | {r['errors']} | {share} | {r['one_segment']} "
                     f"| {example} |")
    return "\n".join(lines) + "\n"
