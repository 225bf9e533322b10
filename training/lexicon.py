"""A bundle's lexicon: every pair of its corpus (all splits, every pronunciation), so that the
server answers a dictionary word as the dictionary says (service/answering/lexicon.py). A corpus
of given splits (a shared task's) lends its train and dev files only: its test words stay unseen,
so that the task's test set scores the model even when the lexicon answers. A task language with
frequent words from WikiPron (data/wikipron/<language>.tsv, scripts/wikipron_lexicons.py) has those
after its train and dev words: the task's table bypasses the lexicon, so they move none of its figures.

    python -m training.lexicon models/g2p-en/1      (export does it for new bundles)
    python -m training.lexicon --wikipron-in models  (make lexicons: every bundle with WikiPron words)

Written as lexicon.tsv (`source<TAB>target`, a source's pronunciations in the corpus's order) and
named in the manifest, whose sha256 list then covers it. The manifest's metrics are untouched:
they are the model's, measured without the lexicon.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

from attnserve.bundle.manifest import sha256_file
from attnserve.bundle.normalization import normalizer
from training.data import SPECIALS, SPLITS, load_described
from training.wikipron import COMMIT, OUT_DIR, by_sound, read_tsv

FILE = "lexicon.tsv"
# (word, its pronunciations) -> each word's pronunciations, the primary one first
Ranker = Callable[[list[tuple[str, list[str]]]], list[list[str]]]
RANK_BATCH = 64


def lexicon_splits(data: dict) -> tuple[str, ...]:
    return ("train", "dev") if "files" in data else SPLITS


def corpus_pairs(data: dict) -> list:
    splits = load_described(data)
    return [pair for split in lexicon_splits(data) for pair in splits[split]]


def lexicon_origin(data: dict) -> str:
    if "files" in data:
        return "the given " + " and ".join(f"{s} file {data['files'][s]['path']}" for s in lexicon_splits(data))
    return f"{data['corpus']}, every split"


def write_lexicon(bundle_dir: Path, manifest: dict, rank: Ranker | None = None) -> dict:
    """Write the bundle's lexicon.tsv; returns the manifest with it named (not written). A pronunciation
    with a symbol the model cannot emit (a dev word's phoneme that no training word has) is left out:
    the server answers a lexicon word by teacher forcing it through the model, and refuses such a line."""
    data = manifest["data"]
    src_join = "" if data["src_tokens"] == "chars" else " "
    tgt_join = "" if data["tgt_tokens"] == "chars" else " "
    emittable = set(manifest["tgt_vocab"]) - set(SPECIALS)
    pairs = corpus_pairs(data)
    kept = [p for p in pairs if set(p.tgt) <= emittable]
    # A word in both train and dev with the same pronunciation is one entry (the server refuses a
    # source listed twice with the same target); its pronunciations stay in the corpus's order.
    lines = list(dict.fromkeys(f"{src_join.join(p.src)}\t{tgt_join.join(p.tgt)}" for p in kept))
    wikipron = wikipron_file(manifest)
    added = 0
    if wikipron is not None:
        # as the server keys them: a word and its capitalized form are one source, whose pronunciations
        # must differ (service/answering/lexicon.py refuses one listed twice)
        norm = normalizer(manifest.get("source_normalization", "none"))
        seen = {norm(line.split("\t")[0]) for line in lines}
        extra: dict[str, dict[str, str]] = {}  # a source as the server keys it -> pronunciation -> line
        for w, p in read_tsv(wikipron):  # scripts/wikipron_lexicons.py kept what the model emits, outside the task's files
            if norm(w) not in seen and set(p.split()) <= emittable:
                extra.setdefault(norm(w), {}).setdefault(p, f"{w}\t{p}")
        if rank is not None:  # WikiPron lists a word's pronunciations in no order of preference
            several = [w for w, prons in extra.items() if len(prons) > 1]
            for w, order in zip(several, rank([(w, list(extra[w])) for w in several])):
                extra[w] = {p: extra[w][p] for p in order}
        added = sum(map(len, extra.values()))
        lines += [line for prons in extra.values() for line in prons.values()]
    (Path(bundle_dir) / FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    sources = len({line.split("\t")[0] for line in lines})
    lexicon = {"file": FILE, "sources": sources, "entries": len(lines), "from": lexicon_origin(data),
               "splits": list(lexicon_splits(data))}
    if wikipron is not None:
        lexicon["wikipron"] = {"file": str(wikipron.relative_to(OUT_DIR.parents[1])), "commit": COMMIT,
                               "entries": added, "licence": "CC BY-SA 3.0 (data/wikipron/README.md)"}
    if len(kept) < len(pairs):
        lexicon["left_out"] = {"entries": len(pairs) - len(kept), "why": "a symbol outside the output vocabulary"}
    return {**manifest, "lexicon": lexicon}


def wikipron_file(manifest: dict) -> Path | None:
    """data/wikipron/<language>.tsv for a task language that has one, else None."""
    language = manifest.get("language", "")
    path = OUT_DIR / f"{language}.tsv"
    return path if language and "files" in manifest.get("data", {}) and path.exists() else None


def main(argv=None) -> None:
    from service.engine.bundle import MANIFEST

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundles", type=Path, nargs="*")
    p.add_argument("--wikipron-in", type=Path, metavar="REPOSITORY",
                   help="also every bundle of this model repository whose language has data/wikipron/<language>.tsv")
    args = p.parse_args(argv)
    bundles = list(args.bundles)
    if args.wikipron_in:
        for manifest in sorted(args.wikipron_in.glob(f"*/*/{MANIFEST}")):
            if wikipron_file(json.loads(manifest.read_text(encoding="utf-8"))) is not None:
                bundles.append(manifest.parent)
    if not bundles:
        p.error("no bundle given")
    for bundle in bundles:
        rebuild(bundle)


def by_the_model(bundle) -> Ranker:
    """Orders each word's pronunciations by the model's log-probability of each (teacher forced through
    the bundle's fp32 graphs), the likeliest first: the one nearest the task's own readings is the
    primary one, which a word's answer gives (French `chat`: ʃ a before the loanword's t ʃ a t)."""
    from service.engine.engine import Engine, EngineConfig
    from service.engine.forced import force

    engine = Engine(bundle, EngineConfig())

    def rank(words: list[tuple[str, list[str]]]) -> list[list[str]]:
        pairs = [(engine.tokenize(w), p) for w, prons in words for p in prons]
        scores = []
        for i in range(0, len(pairs), RANK_BATCH):
            batch = pairs[i:i + RANK_BATCH]
            targets = [engine.target_ids(engine.tokenize_target(p)) for _, p in batch]
            scores += [d.log_prob for d in force(engine, [t for t, _ in batch], targets)]
        out, k = [], 0
        for _, prons in words:
            mine = scores[k:k + len(prons)]
            k += len(prons)
            out.append([p for _, p in sorted(zip(mine, prons), key=lambda sp: -sp[0])])  # stable: ties keep the file's order
        return out
    return rank


def by_the_hint_then_the_model(bundle) -> Ranker:
    """For a bundle with source hints (g2p-eng-us-ipa: CMUdict's first transcription of a word in the
    task's IPA, attnserve/bundle/hints.py), the pronunciation nearest the word's hint by sound first,
    the model's order among those as near: the model alone puts WikiPron's rare readings first in
    frequent short words (`is` a ɪ z, the plural of the letter, before ɪ z), which CMUdict, the
    curated dictionary, gives as running text reads them. Without hints, the model's order."""
    by_model = by_the_model(bundle)
    hints = bundle.manifest.source_hints and _hints(bundle)
    if not hints:
        return by_model
    language = bundle.manifest.language

    def rank(words: list[tuple[str, list[str]]]) -> list[list[str]]:
        out = []
        for (word, _), order in zip(words, by_model(words)):
            hint = hints.get(word)
            if hint is not None:
                heard = by_sound(hint, language)
                order = sorted(order, key=lambda p: _distance(by_sound(p, language), heard))  # stable
            out.append(order)
        return out
    return rank


def _hints(bundle) -> dict[str, str]:
    from attnserve.bundle import hints
    loaded = hints.load(bundle.manifest, bundle.path)
    return loaded.by_word if loaded else {}


def _distance(a: str, b: str) -> int:
    """Levenshtein distance between two strings (characters)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def rebuild(path: Path) -> None:
    from service.engine.bundle import MANIFEST, load_bundle

    bundle = load_bundle(path)  # verifies the hashes before it adds a file
    # The manifest as written, changed only in its lexicon and that file's hash: a bundle of an older
    # format keeps its format (load migrates it), so that the diff is the lexicon's alone.
    manifest = bundle.path / MANIFEST
    written = json.loads(manifest.read_text(encoding="utf-8"))
    lexicon = write_lexicon(bundle.path, {**written, **{k: bundle.manifest[k] for k in ("data", "tgt_vocab")},
                                          "language": bundle.manifest.language,
                                          "source_normalization": bundle.manifest.source_normalization},
                            by_the_hint_then_the_model(bundle))["lexicon"]
    written["lexicon"] = lexicon
    written["files"] = {**written.get("files", {}), FILE: sha256_file(bundle.path / FILE)}
    manifest.write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
    load_bundle(path)  # the hashes verify again
    print(json.dumps({"bundle": str(path), **lexicon}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
