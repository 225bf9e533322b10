"""SIGMORPHON 2021's low subtask again, each model first pretrained on the task's other languages: a row
of its own in docs/sigmorphon.md, never in place of the rule-abiding one.

    python -m training.sigmorphon_transfer                  # every low language (`make sigmorphon-transfer`)
    python -m training.sigmorphon_transfer --langs ady gre  # these only

The low and medium subtasks allow no outside resource, and other languages' words are one: these models
break that rule, openly, to measure what learning from other languages is worth. One model is pretrained
on the train files of the task's low and medium languages together, early-stopped on the low languages'
dev files together, with no language tag. Left out of its data: Korean (its Hangul syllables would add
thousands of symbols no other language has) and every pair whose source is a word of a low language's
test file (another language's `alla`, `vino`, `note`), so that no test word is seen in training, in any
language. Then each low language's recipe (the rule-abiding model's architecture, seeds and schedule)
continues from it on that language's own train file, early-stopped on its dev file (`--init-from`,
`--init-vocab by-symbol`), and is exported, quantized and scored as training/sigmorphon.py does, into
models-transfer/<name>-transfer/1: a model repository of its own, which `make serve` leaves out
(`make serve MODEL_REPOSITORY=models-transfer DEFAULT_MODEL=` serves it). Runs go to runs/sigmorphon-transfer/.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
from pathlib import Path

from training import sigmorphon
from training.data import REPO, read_lines
from training.sigmorphon_recipes import COSINE

RUNS = REPO / "runs" / "sigmorphon-transfer"
MODELS = REPO / "models-transfer"
SUFFIX = "-transfer"
LEFT_OUT = ("kor",)
SEEDS = (1, 2, 3)  # its members: made before the low recipe went to two
OUTSIDE_DATA = ("each member continued from one model pretrained on the train files of the task's low and medium "
                "languages (Korean and every source of a low test file left out): training/sigmorphon_transfer.py; "
                "not under the low subtask's rules")
# The low recipe's model (it must be: the fine-tuned models keep the pretrained one's architecture), with
# larger batches and fewer epochs for 80,000 words.
PRETRAIN_FLAGS = ("--hidden-size", "128", "--enc-layers", "1", "--emb-dim", "64", "--dropout", "0.3",
                  "--batch-size", "64", "--lr", "3e-3", "--warmup-steps", "300", "--max-epochs", "25",
                  "--max-output-len", "40", "--max-minutes", "35", *COSINE)


def low_langs() -> list[str]:
    return [lang for lang, (subtask, _, _) in sigmorphon.LANGS.items() if subtask == "low"]


def pretraining_files(out: Path) -> dict[str, Path]:
    """The pretraining corpus (see the module's docstring); returns its train and dev files."""
    low = low_langs()
    test_sources = {s for lang in low for s, _ in read_lines(sigmorphon.files(lang)["test"])}
    train = [(s, t) for lang, (subtask, _, _) in sigmorphon.LANGS.items()
             if subtask in ("low", "medium") and lang not in LEFT_OUT
             for s, t in read_lines(sigmorphon.files(lang)["train"]) if s not in test_sources]
    dev = [row for lang in low for row in read_lines(sigmorphon.files(lang)["dev"])]
    out.mkdir(parents=True, exist_ok=True)
    paths = {"train": out / "pretrain_train.tsv", "dev": out / "pretrain_dev.tsv"}
    for split, rows in (("train", train), ("dev", dev)):
        paths[split].write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    return paths


def pretrain() -> Path:
    """The pretrained model (trained when its result.json is missing); returns its best checkpoint. A second
    driver (`make sigmorphon-transfer SIGMORPHON_JOBS=2`) waits here for the first's pretraining."""
    out = pretrained_checkpoint().parent
    RUNS.mkdir(parents=True, exist_ok=True)
    with (RUNS / "pretrain.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "result.json").exists():
            f = pretraining_files(RUNS)
            log = RUNS / "pretrained.log"
            print(f"pretraining on {len(read_lines(f['train'])):,} pairs, log {log}", flush=True)
            with log.open("w") as stream:
                subprocess.run([sys.executable, "-m", "training.train", "--corpus", "tsv", "--train-tsv",
                                str(f["train"]), "--dev-tsv", str(f["dev"]), "--out", str(out), "--seed", "1",
                                *PRETRAIN_FLAGS], stdout=stream, stderr=subprocess.STDOUT, check=True, cwd=REPO)
            (out / "result.json").write_text(log.read_text().strip().splitlines()[-1] + "\n")
    return pretrained_checkpoint()


def pretrained_checkpoint() -> Path:
    return RUNS / "pretrained" / "best.pt"


def variant() -> sigmorphon.Variant:
    return sigmorphon.Variant(runs=RUNS, models=MODELS, suffix=SUFFIX,
                              # --output context: these models were made before the low recipe's monotonic output
                              flags=("--init-from", str(pretrained_checkpoint()), "--init-vocab", "by-symbol",
                                     "--output", "context"),
                              outside_data=OUTSIDE_DATA,
                              seeds=SEEDS,
                              train_on_dev=False)  # and before it trained on dev


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--langs", nargs="+", choices=low_langs(), help="default: every low language")
    p.add_argument("--requantize", action="store_true",
                   help="make the built models' int8 graphs again and score them again; no training")
    args = p.parse_args(argv)
    from training.sigmorphon_table import write_table

    v = variant()
    if args.requantize:
        for lang in args.langs or low_langs():
            sigmorphon.requantize(lang, v)
        write_table(sigmorphon.DOC)
        return
    pretrain()
    for lang in args.langs or low_langs():
        try:
            sigmorphon.build(lang, v)
        except sigmorphon.Busy as busy:
            print(f"{busy}: passed over", flush=True)
    write_table(sigmorphon.DOC)
    print(json.dumps({"models": str(MODELS), "built": sorted(d.name for d in MODELS.iterdir() if d.is_dir())}))


if __name__ == "__main__":
    main()
