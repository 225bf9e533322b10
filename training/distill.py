"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher's outputs as a student's targets.

    python -m training.distill --bundle models/g2p-en/2 --out runs/distill/train.tsv
    python -m training.train --corpus cmudict --train-targets runs/distill/train.tsv --out runs/student ...
    # or: the training references kept, plus unlabeled words (wordfreq, not in the corpus) the teacher labels
    python -m training.distill --bundle models/g2p-en/1 --keep-references --unlabeled-wordfreq 40000 --out ...

An ensemble (training/ensemble.py) is more accurate than its members and costs the sum of
their compute. A single model trained on the ensemble's outputs, rather than on the
references, can keep much of that accuracy at one model's speed (Kim & Rush). Here, with a
two-member teacher on CMUdict, it has not (docs/training.md, "Distillation"). The teacher decodes every
training source of its own corpus, in-process through the ONNX engine; the student's dev and
test words keep their references, so it is measured like any other model, and a targets file
holding a dev or test source is refused: the teacher's outputs on held-out words would leak
them into training.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import hashlib
import json
import time
from pathlib import Path

from attnserve.config import parse, setting
from training.data import Pair, load_tsv, read_pairs, references
from training.evaluate import engine_hyps, load_splits, source_text


def load_train_targets(path: Path, src_tokens: str, tgt_tokens: str,
                       held_out: dict[str, set] | None = None) -> tuple[list[Pair], dict]:
    """The training pairs of a targets file, and how to name it in a checkpoint's data description.
    held_out: the dev and test sources of given splits; None: the corpus is hash-split, so a source's
    split is its hash's."""
    if held_out is None:
        splits = load_tsv(path, src_tokens, tgt_tokens)
    else:
        pairs = read_pairs(path, src_tokens, tgt_tokens)
        splits = {"train": pairs, **{split: [p for p in pairs if p.src in sources]
                                     for split, sources in held_out.items()}}
    for split in ("dev", "test"):
        if splits.get(split):
            example = source_text(splits[split][0].src, src_tokens)
            raise SystemExit(f"{path}: {len(splits[split])} targets for {split} sources (e.g. {example!r}); "
                             f"a targets file may only replace training targets")
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return splits["train"], {"path": str(path), "sha256": digest, "pairs": len(splits["train"])}


def labelled(engine, sources: list[tuple[str, ...]], src_tokens: str, beam_size: int) -> list[str]:
    """TSV lines `source<TAB>teacher output` for each source the teacher maps to something."""
    from service.domain import DecodeOptions

    hyps = engine_hyps(engine, sources, DecodeOptions(beam_size=beam_size))
    return [f"{source_text(s, src_tokens)}\t{engine.tgt_joiner.join(hyps[s])}" for s in sources if hyps[s]]


def unlabeled_words(n: int, known: set[str]) -> list[str]:
    """The `n` most frequent English words (wordfreq's offline lists) that the corpus does not list,
    of the corpus's word shape, at least 4 letters with a vowel (short ones are mostly abbreviations),
    and hashed into the training split, so no dev or test source can ever appear among them."""
    import wordfreq

    from training.data import CMUDICT_WORD_RE, split_of

    out = []
    for w in wordfreq.top_n_list("en", 400_000, wordlist="large"):
        if (w not in known and len(w) >= 4 and CMUDICT_WORD_RE.match(w) and any(v in w for v in "aeiouy")
                and split_of(w) == "train"):
            out.append(w)
            if len(out) == n:
                break
    return out


@dataclass(frozen=True)
class DistillConfig:
    bundle: str = setting(doc="the teacher: a bundle directory (an ensemble's, typically)")
    out: Path = setting(doc="the targets file to write (TSV)")
    beam_size: int = setting(1, "the teacher's beam; 1 = greedy")
    precision: str = setting("fp32", "the teacher's graphs", choices=("fp32", "int8"))
    keep_references: bool = setting(False, "training sources keep their references; the teacher labels only "
                                    "--unlabeled-wordfreq words", switch=True)
    unlabeled_wordfreq: int = setting(0, "add this many frequent English words the corpus lacks, labelled by the "
                                      "teacher (Sun et al. 2019)")


def main(argv=None):
    args = parse(DistillConfig, argv, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    started = time.perf_counter()
    from service.engine.bundle import load_bundle
    from service.engine.engine import Engine, EngineConfig

    bundle = load_bundle(args.bundle)
    data, tokenization = bundle.manifest.data, bundle.manifest.src_tokenization
    splits = load_splits(data)  # parsed once: the training sources, and every source the corpus holds
    train = references(splits["train"])
    engine = None if args.keep_references and not args.unlabeled_wordfreq else \
        Engine(bundle, EngineConfig(intra_op_threads=0, precision=args.precision))
    empty = 0
    if args.keep_references:
        lines = [f"{source_text(s, tokenization)}\t{' '.join(t)}" for s in sorted(train) for t in train[s]]
    else:
        lines = labelled(engine, sorted(train), tokenization, args.beam_size)
        empty = len(train) - len(lines)
    if args.unlabeled_wordfreq:
        known = {source_text(pair.src, tokenization) for pairs in splits.values() for pair in pairs}
        words = unlabeled_words(args.unlabeled_wordfreq, known)
        lines += labelled(engine, [tuple(w) for w in words], tokenization, args.beam_size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(json.dumps({"teacher": args.bundle, "out": str(args.out), "pairs": len(lines), "left_out_empty": empty,
                      "beam_size": args.beam_size, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
