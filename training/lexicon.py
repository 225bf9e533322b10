"""A bundle's lexicon: every pair of its corpus (all splits, every pronunciation), so that the
server answers a dictionary word as the dictionary says (service/scheduling/lexicon.py).

    python -m training.lexicon models/g2p-en/1      (export does it for new bundles)

Written as lexicon.tsv (`source<TAB>target`, a source's pronunciations in the corpus's order) and
named in the manifest, whose sha256 list then covers it. The manifest's metrics are untouched:
they are the model's, measured without the lexicon.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from training.data import load_cmudict, load_tsv

FILE = "lexicon.tsv"


def corpus_pairs(data: dict) -> list:
    splits = (load_cmudict(keep_stress=data["keep_stress"]) if data["corpus"] == "cmudict"
              else load_tsv(data["path"], data["src_tokens"], data["tgt_tokens"]))
    return [pair for split in ("train", "dev", "test") for pair in splits[split]]


def write_lexicon(bundle_dir: Path, manifest: dict) -> dict:
    """Write the bundle's lexicon.tsv; returns the manifest with it named (not written)."""
    data = manifest["data"]
    src_join = "" if data["src_tokens"] == "chars" else " "
    tgt_join = "" if data["tgt_tokens"] == "chars" else " "
    lines = [f"{src_join.join(p.src)}\t{tgt_join.join(p.tgt)}" for p in corpus_pairs(data)]
    (Path(bundle_dir) / FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    sources = len({line.split("\t")[0] for line in lines})
    return {**manifest, "lexicon": {"file": FILE, "sources": sources, "entries": len(lines),
                                    "from": f"{data['corpus']}, every split"}}


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
