"""SIGMORPHON 2021's low subtask again, each model first pretrained on the task's other languages: a row
of its own in docs/sigmorphon.md, never in place of the rule-abiding one.

    python -m experiments.sigmorphon transfer                  # every low language (`make sigmorphon-transfer`)
    python -m experiments.sigmorphon transfer --langs ady gre  # these only

The low and medium subtasks allow no outside resource, and other languages' words are one: these models
break that rule, openly, to measure what learning from other languages is worth. One model is pretrained
on the train files of the task's low and medium languages together, early-stopped on the low languages'
dev files together, with no language tag. Left out of its data: Korean (its Hangul syllables would add
thousands of symbols no other language has; recipes/transfer.toml `left_out`) and every pair whose source
is a word of a low language's test file (another language's `alla`, `vino`, `note`), so that no test word
is seen in training, in any language. Then each low language's recipe (the rule-abiding model's
architecture and schedule, with the variant's seeds) continues from it on that language's own train file,
early-stopped on its dev file (`--init-from`, `--init-vocab by-symbol`), and is exported, quantized and
scored as build.py does, into models-transfer/<name>-transfer/1: a model repository of its own, which
`make serve` leaves out (`make serve MODEL_REPOSITORY=models-transfer DEFAULT_MODEL=` serves it). Runs go
to runs/sigmorphon-transfer/.
"""
from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from experiments.sigmorphon.layout import Study
from training.data import read_lines


def pretraining_files(study: Study, out: Path) -> dict[str, Path]:
    """The pretraining corpus (see the module's docstring); returns its train and dev files."""
    low = study.low_langs()
    test_sources = {s for lang in low for s, _ in read_lines(study.files(lang)["test"])}
    train = [(s, t) for lang, language in study.task.languages.items()
             if language.subtask in ("low", "medium") and lang not in study.task.transfer.left_out
             for s, t in read_lines(study.files(lang)["train"]) if s not in test_sources]
    dev = [row for lang in low for row in read_lines(study.files(lang)["dev"])]
    out.mkdir(parents=True, exist_ok=True)
    paths = {"train": out / "pretrain_train.tsv", "dev": out / "pretrain_dev.tsv"}
    for split, rows in (("train", train), ("dev", dev)):
        paths[split].write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    return paths


def pretrain(study: Study) -> Path:
    """The pretrained model (trained when its result.json is missing); returns its best checkpoint. A second
    driver (`make sigmorphon-transfer SIGMORPHON_JOBS=2`) waits here for the first's pretraining."""
    runs, checkpoint = study.paths.transfer_runs, study.paths.pretrained_checkpoint()
    out = checkpoint.parent
    runs.mkdir(parents=True, exist_ok=True)
    with (runs / "pretrain.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "result.json").exists():
            f = pretraining_files(study, runs)
            log = runs / "pretrained.log"
            print(f"pretraining on {len(read_lines(f['train'])):,} pairs, log {log}", flush=True)
            with log.open("w") as stream:
                subprocess.run([sys.executable, "-m", "training.train", "--corpus", "tsv", "--train-tsv",
                                str(f["train"]), "--dev-tsv", str(f["dev"]), "--out", str(out), "--seed", "1",
                                *study.task.transfer.pretrain_flags], stdout=stream, stderr=subprocess.STDOUT,
                               check=True, cwd=study.paths.root)
            (out / "result.json").write_text(log.read_text().strip().splitlines()[-1] + "\n")
    return checkpoint
