"""A SIGMORPHON 2021 language's model, built from its recipe (`python -m experiments.sigmorphon build`).

Per language (data/sigmorphon-2021/README.md names the files and the models): train its subtask's
recipe on the train file, early-stopped on the dev file, one run per seed (several seeds export as
their ensemble), or, where a recipe chosen so then says `train_on_dev`, on the train and dev files
together, each run to the end of its schedule; export to a bundle whose lexicon is the train and dev
words; quantize, keeping int8 only where it costs nothing on dev; score dev and test with the task's
scorer through the engine (greedy and beam 5; the lexicon is never consulted); write models/<name>/1. What is done is kept: a
finished run (its result.json) is not trained again, a finished bundle not exported again, so an
interrupted run resumes where it stopped; both record their flags (a run its flags.json, a bundle its
manifest's `task_scores.runs`), so a model whose recipe has changed is built again, and a run trained
with other flags is refused. Recipes and decoding are chosen on dev only; the test file is read only
for the reported figures. Runs and logs go to runs/sigmorphon/<lang>/.

The bundle ships its ONNX graphs, manifest and lexicon, not checkpoint.pt: serving and scoring read
only the graphs, and what reads a checkpoint (re-export, ensembles, --init-from) can retrain it here;
it stays in runs/sigmorphon/<lang>/.
"""
from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from experiments.sigmorphon.english import write_hints, write_targets
from experiments.sigmorphon.flags import TRAIN_ON_DEV, built_as, recorded_flags, same_training
from experiments.sigmorphon.layout import Study, Variant
from experiments.sigmorphon.task import Recipe
from service.engine.bundle import load_bundle, write_manifest
from service.engine.engine import served_precision
from training.data import read_lines
from training.evaluate import hyps_from_bundle
from training.export import build_bundle, parity_ok
from training.metrics import gold_wer
from training.prosody_memory import add_memory
from training.quantize import quantize_bundle


def trains_on_dev(recipe: Recipe, variant: Variant) -> bool:
    return recipe.train_on_dev and variant.train_on_dev


def train_flags(study: Study, lang: str, seed: int, recipe: Recipe, variant: Variant, device: str = "") -> list[str]:
    """One member's python -m training.train flags but its files; `device` in place of the recipe's."""
    return ["--seed", str(seed), *recipe.flags, *study.task.languages[lang].flags, *variant.flags,
            *(TRAIN_ON_DEV if trains_on_dev(recipe, variant) else ()),
            *(("--device", device) if device else ())]


def member_flags(study: Study, lang: str, seed: int, recipe: Recipe, variant: Variant, device: str = "") -> list[str]:
    """train_flags as its run and a model built from it record them, so that a changed recipe is noticed
    (paths inside the repository relative to it)."""
    root = study.paths.root
    return [str(Path(a).relative_to(root)) if Path(a).is_absolute() and Path(a).is_relative_to(root) else a
            for a in train_flags(study, lang, seed, recipe, variant, device)] + (
        ["+cmudict_ipa"] if recipe.cmudict_ipa else []) + (["+cmudict_hints"] if recipe.cmudict_hints else [])


def run_name(seed: int) -> str:
    return f"seed{seed}"


def train_seed(study: Study, lang: str, seed: int, recipe: Recipe, variant: Variant, device: str = "") -> Path:
    """One training run (skipped when its result.json exists), on `device` where given (else the recipe's);
    returns its checkpoint (best.pt, or last.pt where it trains on dev). A run that records flags training
    something else is refused, not reused."""
    runs = variant.run_dir(lang)
    run = run_name(seed)
    out = runs / run
    checkpoint = out / ("last.pt" if trains_on_dev(recipe, variant) else "best.pt")
    flags = member_flags(study, lang, seed, recipe, variant, device)
    if (out / "result.json").exists():
        recorded = out / "flags.json"  # runs from before it was written record nothing: taken as they are
        if recorded.exists() and not same_training(json.loads(recorded.read_text()), flags):
            raise SystemExit(f"{out} was trained with other flags than {lang}'s recipe now asks ({recorded}): "
                             "move it aside to train this member again")
        return checkpoint
    f = study.files(lang)
    argv = [sys.executable, "-m", "training.train", "--corpus", "tsv", "--train-tsv", str(f["train"]),
            "--dev-tsv", str(f["dev"]), "--test-tsv", str(f["test"]), "--out", str(out),
            *train_flags(study, lang, seed, recipe, variant, device),
            *cmudict_flags(study, lang, recipe, runs, f["train"])]
    print(f"{lang} {run}: training, log {runs / run}.log", flush=True)
    run_training(argv, out, study.paths.root, flags)
    return checkpoint


def cmudict_flags(study: Study, lang: str, recipe: Recipe, runs: Path, train: Path,
                  held_out: tuple[Path, ...] = ()) -> list[str]:
    """The training flags of the recipe's CMUdict extras (eng_us), their files written into `runs`: the targets
    file of `train`'s pairs and CMUdict's, none of a dev, test or `held_out` word; the hints file."""
    argv = []
    if recipe.cmudict_ipa:
        f, targets = study.files(lang), runs / "train_plus_cmudict_ipa.tsv"
        print(f"{lang}: {write_targets(train, [f['dev'], f['test'], *held_out], targets)} in {targets}", flush=True)
        argv += ["--train-targets", str(targets)]
    if recipe.cmudict_hints:
        hints = runs / "cmudict_hints.tsv"
        print(f"{lang}: {write_hints(hints)} in {hints}", flush=True)
        argv += ["--source-hints", str(hints)]
    return argv


def run_training(argv: list[str], out: Path, cwd: Path, flags: list[str] | None = None) -> None:
    """python -m training.train's argv, run in `cwd`, into `out`, its log beside it (<out>.log); then the flags it
    records (where given) and its last line as out/result.json, which marks the run finished."""
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    with log.open("w") as f:
        subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=True, cwd=cwd)
    if flags is not None:
        (out / "flags.json").write_text(json.dumps(flags) + "\n")
    (out / "result.json").write_text(log.read_text().strip().splitlines()[-1] + "\n")


def task_wer(bundle: Path, split_file: Path, beam: int, precision: str) -> float:
    """The task scorer's WER (%) of the bundle's engine on one of the language's files."""
    rows = read_lines(split_file)
    hyps = hyps_from_bundle(str(bundle), sorted({s for s, _ in rows}), 256, beam, 0.0, precision, texts=True)
    return round(gold_wer([(hyps[s], g.split()) for s, g in rows])[0], 2)


def with_memory(study: Study, lang: str, bundle: Path, trained: list[tuple[str, str]]) -> bool:
    """Write the language's prosody memory from the pairs its model `trained` on into a bundle that lacks it as
    the recipe asks; whether it did. The memory is the model's: the task's scores read it."""
    spec = study.task.languages[lang].prosody_memory
    if spec is None:
        return False
    has = json.loads((bundle / "manifest.json").read_text()).get("prosody_memory", {})
    pairs = dict(spec.segment_pairs)
    if (has.get("mark"), has.get("prefixes"), has.get("pairs"), has.get("trained_words"), has.get("why")) == (
            spec.mark, list(spec.prefixes), pairs, len(trained), spec.why):
        return False
    add_memory(bundle, trained, spec.mark, spec.prefixes, pairs, spec.why)
    return True


def trained_pairs(study: Study, lang: str, train: Path | None = None) -> list[tuple[str, str]]:
    """The pairs the language's rule-abiding model learned from: its train file (or `train`, a held-out
    question's rest of it), and dev where the recipe trains on it."""
    f = study.files(lang)
    dev = read_lines(f["dev"]) if trains_on_dev(study.task.recipe_for(lang), study.rules()) else []
    return read_lines(train or f["train"]) + dev


def keep_int8_if_free(bundle: Path) -> dict:
    """Quantize; keep the int8 graphs only where their dev WER is no worse than fp32's. A model that trained
    on dev takes the same check, on words it learned (docs/sigmorphon-tried.md: on words held out from such
    models, int8 and fp32 agreed)."""
    manifest = quantize_bundle(bundle)
    fp32, int8 = manifest["metrics"]["dev"]["wer"], manifest["int8"]["metrics"]["dev"]["wer"]
    if int8 <= fp32:
        return manifest
    for role in ("encoder.int8", "decoder_step.int8"):
        (bundle / manifest["graphs"].pop(role)).unlink()
    manifest["int8_dropped"] = {**manifest.pop("int8"), "why": f"dev WER {int8:.4f} > fp32's {fp32:.4f}"}
    write_manifest(bundle, {k: v for k, v in manifest.items() if k != "files"})
    return load_bundle(bundle).manifest


def task_scores(study: Study, bundle: Path, lang: str, precision: str) -> dict:
    f, beam = study.files(lang), study.task.beam
    return {split: {"greedy": task_wer(bundle, f[split], 1, precision),
                    f"beam{beam}": task_wer(bundle, f[split], beam, precision)} for split in ("dev", "test")}


def requantize(study: Study, lang: str, variant: Variant) -> dict:
    """A built model's int8 graphs made again by training/quantize.py's current method, kept as
    build() keeps them, and the task's scores taken again in the precision `--precision auto` serves."""
    target = study.bundle(lang, variant)
    manifest = {k: v for k, v in load_bundle(target).manifest.items() if k not in ("files", "int8", "int8_dropped")}
    for role in ("encoder.int8", "decoder_step.int8"):
        if role in manifest["graphs"]:
            (target / manifest["graphs"].pop(role)).unlink()
    write_manifest(target, manifest)
    keep_int8_if_free(target)
    return rescore(study, lang, variant, always=True)


def rescore(study: Study, lang: str, variant: Variant, always: bool = False) -> dict:
    """A built model's task scores taken again in the precision `--precision auto` serves it in, where
    that has changed (after `python -m training.quantize --speed` timed it, say) or always; no training."""
    target = study.bundle(lang, variant)
    manifest = {k: v for k, v in load_bundle(target).manifest.items() if k != "files"}
    precision = served_precision(manifest, "auto")
    if always or manifest["task_scores"].get("precision") != precision:
        manifest["task_scores"] = {**manifest["task_scores"], "precision": precision,
                                   **task_scores(study, target, lang, precision)}
        write_manifest(target, manifest)
    print(json.dumps({"lang": lang, "precision": precision, **{k: manifest["task_scores"][k] for k in ("dev", "test")},
                      "batch_independence": manifest.get("int8", {}).get("batch_independence", {}).get("independent")}),
          flush=True)
    return manifest


class Busy(Exception):
    """Another driver is building this language."""


@contextmanager
def sole_driver(lang: str, variant: Variant):
    """One driver per language: two would train into, and export from, one run directory (one's early
    best.pt under the other's export). Several drivers share out the languages (`make sigmorphon
    SIGMORPHON_JOBS=2`): each passes over those another one holds."""
    path = variant.run_dir(lang) / "driver.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Busy(f"{lang}: another driver is building it ({path} is locked)") from None
        yield


def build(study: Study, lang: str, variant: Variant, device: str = "", train_only: bool = False) -> Path | None:
    """Train what is missing (on `device` where given), export, quantize and score; the variant's bundle
    (models/<name>/1 for the rule-abiding models) when done, None where `train_only` stops after training."""
    with sole_driver(lang, variant):
        return _build(study, lang, variant, device, train_only)


def _build(study: Study, lang: str, variant: Variant, device: str = "", train_only: bool = False) -> Path | None:
    language = study.task.languages[lang]
    name, target, runs = study.name(lang, variant), study.bundle(lang, variant), variant.run_dir(lang)
    recipe = study.task.recipe_for(lang)
    seeds = variant.seeds or recipe.seeds
    wanted = [{"run": run_name(seed), "flags": member_flags(study, lang, seed, recipe, variant)} for seed in seeds]
    if (target / "manifest.json").exists() and built_as(json.loads((target / "manifest.json").read_text()), wanted):
        if variant.rules and with_memory(study, lang, target, trained_pairs(study, lang)):
            rescore(study, lang, variant, always=True)  # a memory added to the model as built: scored again
        return target  # done: the recipe asks for the members it was built from
    started = time.time()
    checkpoints = [train_seed(study, lang, seed, recipe, variant, device) for seed in seeds]
    if train_only:
        return None
    wanted = [{**w, "flags": recorded_flags(c.parent) or w["flags"]} for w, c in zip(wanted, checkpoints)]
    staging = runs / "bundle" / "1"
    shutil.rmtree(staging.parent, ignore_errors=True)
    manifest = build_bundle(checkpoints if len(checkpoints) > 1 else checkpoints[0], staging, name, "1",
                            parity_words=1000, save_checkpoint=runs / "checkpoint.pt")
    if not parity_ok(manifest["parity"]):
        raise SystemExit(f"{lang}: parity check failed: {manifest['parity']}")
    if variant.rules:
        with_memory(study, lang, staging, trained_pairs(study, lang))
    precision = served_precision(keep_int8_if_free(staging), "auto")
    scores = task_scores(study, staging, lang, precision)
    manifest = {k: v for k, v in load_bundle(staging).manifest.items() if k != "files"}
    manifest["task_scores"] = {
        "scorer": "SIGMORPHON 2021 Task 1: WER %, a word right when its segments equal the gold ones; "
                  "through the engine, lexicon not consulted", "precision": precision, **scores,
        "baseline_test_wer": language.baseline, "subtask": language.subtask, "language": lang,
        "members": len(checkpoints), "runs": wanted, "minutes": round((time.time() - started) / 60, 1)}
    if variant.outside_data:
        manifest["outside_data"] = variant.outside_data
    manifest["language"] = lang  # the task's tag: what the server's text rules key on (service/answering/textrules.py)
    root = study.paths.root
    where = runs.relative_to(root) if runs.is_relative_to(root) else runs
    manifest["checkpoint"] = (f"not shipped: python -m experiments.sigmorphon {variant.command} --langs {lang} "
                              f"writes it to {where}/checkpoint.pt")
    write_manifest(staging, manifest)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(staging, target)
    print(json.dumps({"lang": lang, "model": name, **scores, "precision": precision,
                      "minutes": manifest["task_scores"]["minutes"]}), flush=True)
    return target
