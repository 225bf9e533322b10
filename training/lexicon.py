"""A bundle's lexicon: every pair of its corpus (all splits, every pronunciation), so that the
server answers a dictionary word as the dictionary says (service/answering/lexicon.py). A corpus
of given splits (a shared task's) lends its train and dev files only: its test words stay unseen,
so that the task's test set scores the model even when the lexicon answers.

    python -m training.lexicon models/g2p-en/1      (export does it for new bundles)

Written as lexicon.tsv (`source<TAB>target`, a source's pronunciations in the corpus's order) and
named in the manifest, whose sha256 list then covers it. The manifest's metrics are untouched:
they are the model's, measured without the lexicon.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from training.data import SPECIALS, SPLITS, load_described

FILE = "lexicon.tsv"


def lexicon_splits(data: dict) -> tuple[str, ...]:
    return ("train", "dev") if "files" in data else SPLITS


def corpus_pairs(data: dict) -> list:
    splits = load_described(data)
    return [pair for split in lexicon_splits(data) for pair in splits[split]]


def lexicon_origin(data: dict) -> str:
    if "files" in data:
        return "the given " + " and ".join(f"{s} file {data['files'][s]['path']}" for s in lexicon_splits(data))
    return f"{data['corpus']}, every split"


def write_lexicon(bundle_dir: Path, manifest: dict) -> dict:
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
    (Path(bundle_dir) / FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    sources = len({line.split("\t")[0] for line in lines})
    lexicon = {"file": FILE, "sources": sources, "entries": len(lines), "from": lexicon_origin(data),
               "splits": list(lexicon_splits(data))}
    if len(kept) < len(pairs):
        lexicon["left_out"] = {"entries": len(pairs) - len(kept), "why": "a symbol outside the output vocabulary"}
    return {**manifest, "lexicon": lexicon}


def main(argv=None) -> None:
    from service.engine.bundle import MANIFEST, load_bundle, write_manifest

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path)
    args = p.parse_args(argv)
    bundle = load_bundle(args.bundle)  # verifies the hashes before it adds a file
    manifest = write_lexicon(bundle.path, {k: v for k, v in bundle.manifest.items() if k not in ("files",)})
    write_manifest(bundle.path, manifest)
    print(json.dumps(json.loads((bundle.path / MANIFEST).read_text())["lexicon"]))


if __name__ == "__main__":
    main()
