"""A recipe question asked on words no model saw: the held-out eighth of a SIGMORPHON train file.

    python -m experiments.sigmorphon heldout --langs fre kor --tag h384 -- --hidden-size 384
    python -m experiments.sigmorphon heldout --langs fre kor --tag recipe          # the recipe as it is

Once a recipe trains on the train and dev files together, dev can choose nothing; so the experiments in
docs/sigmorphon-tried.md hold out an eighth of each train file (a source is held out where
int(md5(source).hexdigest(), 16) % 8 == 0, the same words every time), train the language's members on
the rest (and dev, where the recipe or the flags after `--` train on it; eng_us with CMUdict, none of
whose pairs is a held-out word's) with the recipe's flags, the language's own and the flags after `--`,
and score the held-out words with the task's scorer through the engine (beam 5, fp32), several seeds as
one ensemble. Write the rule before reading a figure, and compare with the recipe retrained in the same session
on the same split (`--tag base`, then `--against base`): a run repeats to the bit on one machine but not
necessarily on another machine or install, so a figure recorded in another session is one draw
(docs/sigmorphon-tried.md). `--eighth K` holds out another eighth (md5 % 8 == K), a question's second look on
words its first figures were not read on. Runs go to runs/sigmorphon-heldout/<lang>/<tag>/
(runs/sigmorphon-heldout-K/ for another eighth), each language's figure to its result.json there; the test file
is never read.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from experiments.sigmorphon.build import (cmudict_flags, run_name, run_training, task_wer, train_flags, trained_pairs,
                                          with_memory)
from experiments.sigmorphon.flags import parsed
from experiments.sigmorphon.layout import Study
from experiments.sigmorphon.task import Recipe
from training.data import read_lines
from training.export import build_bundle


def held_out(source: str, eighth: int = 0) -> bool:
    return int(hashlib.md5(source.encode("utf-8")).hexdigest(), 16) % 8 == eighth


def runs_of(study: Study, eighth: int) -> Path:
    """Where the questions on an eighth go: the held-out runs' folder for the first (0), whose figures
    docs/sigmorphon-tried.md records; beside it for the others (a question's second look, on words its first
    answer was not read on)."""
    if not 0 <= eighth < 8:
        raise ValueError(f"an eighth is 0-7, got {eighth}")
    runs = study.paths.heldout_runs
    return runs if eighth == 0 else runs.with_name(f"{runs.name}-{eighth}")


def split_train(study: Study, lang: str, out: Path, eighth: int = 0) -> tuple[Path, Path]:
    """The language's train file as (the rest, the held-out eighth), written under `out`."""
    rows = read_lines(study.files(lang)["train"])
    rest, held = out / "train_rest.tsv", out / "heldout.tsv"
    out.mkdir(parents=True, exist_ok=True)
    for path, keep in ((rest, False), (held, True)):
        text = "".join(f"{s}\t{t}\n" for s, t in rows if held_out(s, eighth) == keep)
        # a question asked beside another on the same split finds the same bytes: never rewrite a file a run may read
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return rest, held


def member(study: Study, lang: str, seed: int, rest: Path, held: Path, run: Path, extra: list[str],
           recipe: Recipe) -> Path:
    """Train one member (skipped when its result.json exists); its checkpoint."""
    flags = [*train_flags(study, lang, seed, recipe, study.rules()), *extra]
    checkpoint = run / ("last.pt" if parsed(flags)["train_on_dev"] else "best.pt")
    if (run / "result.json").exists():
        return checkpoint
    argv = [sys.executable, "-m", "training.train", "--corpus", "tsv", "--train-tsv", str(rest),
            "--dev-tsv", str(study.files(lang)["dev"]), "--test-tsv", str(held), "--out", str(run), *flags,
            *cmudict_flags(study, lang, recipe, run, rest, (held,))]
    run_training(argv, run, study.paths.root)
    return checkpoint


def ask(study: Study, lang: str, tag: str, seeds: list[int], extra: list[str], runs: Path | None = None,
        eighth: int = 0) -> dict:
    """Train the members, export their ensemble, score the held-out words (`eighth` of the train file); the
    figure, also in result.json. Runs go under `runs`, by default the eighth's own folder (runs_of)."""
    runs = runs or runs_of(study, eighth)
    out = runs / lang / tag
    rest, held = split_train(study, lang, runs / lang, eighth)
    recipe = study.task.recipe_for(lang)
    checkpoints = [member(study, lang, seed, rest, held, out / run_name(seed), extra, recipe) for seed in seeds]
    bundle = out / "bundle" / "1"
    build_bundle(checkpoints if len(checkpoints) > 1 else checkpoints[0], bundle, f"{lang}-{tag}", "1",
                 parity_words=50, lexicon=False)
    with_memory(study, lang, bundle, trained_pairs(study, lang, rest))  # the language's memory, where it has one
    beam = study.task.beam
    result = {"lang": lang, "tag": tag, "seeds": seeds, "flags": extra, "heldout_words": len(read_lines(held)),
              f"heldout_beam{beam}_fp32": task_wer(bundle, held, beam, "fp32")}
    (out / "result.json").write_text(json.dumps(result) + "\n")
    return result


def against(result: dict, tag: str, runs: Path, beam: int) -> dict:
    """The question's held-out words wrong beside another tag's on the same words (the recipe retrained in the same
    session, say: a figure recorded on another machine does not reproduce), and how many fewer."""
    other = json.loads((runs / result["lang"] / tag / "result.json").read_text())
    key, words = f"heldout_beam{beam}_fp32", result["heldout_words"]
    wrong, other_wrong = (round(r[key] * words / 100) for r in (result, other))
    return {"lang": result["lang"], "tag": result["tag"], "against": tag, "words": words, "wrong": wrong,
            "against_wrong": other_wrong, "fewer_wrong": other_wrong - wrong}
