"""SIGMORPHON 2021 Task 1: a G2P model for each of its 21 languages, on the task's own splits.

    python -m training.sigmorphon                      # every language whose model is missing (`make sigmorphon`)
    python -m training.sigmorphon --langs fre bul      # these only
    python -m training.sigmorphon --table              # docs/sigmorphon.md from the models' manifests
    python -m training.sigmorphon --train-only --device cuda --langs bul   # the runs only, on a GPU (docs/training.md)

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

import argparse
import fcntl
import json
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from training.data import REPO, read_lines
from training.sigmorphon_flags import TRAIN_ON_DEV, built_as, recorded_flags, same_training
from training.sigmorphon_recipes import (BEAM, LANG_FLAGS, LANG_SEEDS, LANGS, PROSODY_MEMORY, RECIPES, TRAIN_ORDER,
                                         Recipe)

DATA = REPO / "data" / "sigmorphon-2021"
RUNS = REPO / "runs" / "sigmorphon"
MODELS = REPO / "models"
DOC = REPO / "docs" / "sigmorphon.md"


def recipe_for(lang: str) -> Recipe:
    """The language's subtask's recipe, with the language's own seeds where LANG_SEEDS has them."""
    recipe = RECIPES[LANGS[lang][0]]
    return replace(recipe, seeds=LANG_SEEDS[lang][0]) if lang in LANG_SEEDS else recipe


@dataclass(frozen=True)
class Variant:
    """How a language's models are made: the rule-abiding ones (the default: models/, runs/sigmorphon/) or
    otherwise (training/sigmorphon_transfer.py): where the runs and the bundle go, a suffix to the model's
    name, and flags added to the recipe's."""
    runs: Path | None = None  # None: RUNS
    models: Path | None = None  # None: MODELS
    suffix: str = ""
    flags: tuple[str, ...] = ()
    outside_data: str = ""  # what else its models learned from (the rules allow nothing), for their manifests
    seeds: tuple[int, ...] = ()  # its members' seeds in place of the recipe's, where given
    train_on_dev: bool = True  # whether its members take the recipe's train_on_dev

    def run_dir(self, lang: str) -> Path:
        return (self.runs or RUNS) / lang

    def name(self, lang: str) -> str:
        return LANGS[lang][1] + self.suffix

    def bundle(self, lang: str) -> Path:
        return (self.models or MODELS) / self.name(lang) / "1"


RULES = Variant()


def files(lang: str) -> dict[str, Path]:
    subtask = LANGS[lang][0]
    return {split: DATA / subtask / f"{lang}_{split}.tsv" for split in ("train", "dev", "test")}


def trains_on_dev(recipe: Recipe, variant: "Variant") -> bool:
    return recipe.train_on_dev and variant.train_on_dev


def _train_flags(lang: str, seed: int, recipe: Recipe, variant: "Variant", device: str = "") -> list[str]:
    """One member's python -m training.train flags but its files; `device` in place of the recipe's."""
    return ["--seed", str(seed), *recipe.flags, *LANG_FLAGS.get(lang, ((), ""))[0], *variant.flags,
            *(TRAIN_ON_DEV if trains_on_dev(recipe, variant) else ()),
            *(("--device", device) if device else ())]


def member_flags(lang: str, seed: int, recipe: Recipe, variant: "Variant" = RULES, device: str = "") -> list[str]:
    """_train_flags as its run and a model built from it record them, so that a changed recipe is noticed
    (paths inside the repository relative to it)."""
    return [str(Path(a).relative_to(REPO)) if Path(a).is_absolute() and Path(a).is_relative_to(REPO) else a
            for a in _train_flags(lang, seed, recipe, variant, device)] + (
        ["+cmudict_ipa"] if recipe.cmudict_ipa else []) + (["+cmudict_hints"] if recipe.cmudict_hints else [])


def run_name(seed: int) -> str:
    return f"seed{seed}"


def train_seed(lang: str, seed: int, recipe: Recipe, variant: Variant = RULES, device: str = "") -> Path:
    """One training run (skipped when its result.json exists), on `device` where given (else the recipe's);
    returns its checkpoint (best.pt, or last.pt where it trains on dev). A run that records flags training
    something else is refused, not reused."""
    runs = variant.run_dir(lang)
    run = run_name(seed)
    out = runs / run
    checkpoint = out / ("last.pt" if trains_on_dev(recipe, variant) else "best.pt")
    flags = member_flags(lang, seed, recipe, variant, device)
    if (out / "result.json").exists():
        recorded = out / "flags.json"  # runs from before it was written record nothing: taken as they are
        if recorded.exists() and not same_training(json.loads(recorded.read_text()), flags):
            raise SystemExit(f"{out} was trained with other flags than {lang}'s recipe now asks ({recorded}): "
                             "move it aside to train this member again")
        return checkpoint
    f = files(lang)
    argv = [sys.executable, "-m", "training.train", "--corpus", "tsv", "--train-tsv", str(f["train"]),
            "--dev-tsv", str(f["dev"]), "--test-tsv", str(f["test"]), "--out", str(out),
            *_train_flags(lang, seed, recipe, variant, device), *cmudict_flags(lang, recipe, runs, f["train"])]
    print(f"{lang} {run}: training, log {runs / run}.log", flush=True)
    run_training(argv, out, flags)
    return checkpoint


def cmudict_flags(lang: str, recipe: Recipe, runs: Path, train: Path, held_out: tuple[Path, ...] = ()) -> list[str]:
    """The training flags of the recipe's CMUdict extras (eng_us), their files written into `runs`: the targets
    file of `train`'s pairs and CMUdict's, none of a dev, test or `held_out` word; the hints file."""
    argv = []
    if recipe.cmudict_ipa:
        from training.sigmorphon_english import write_targets

        f, targets = files(lang), runs / "train_plus_cmudict_ipa.tsv"
        print(f"{lang}: {write_targets(train, [f['dev'], f['test'], *held_out], targets)} in {targets}", flush=True)
        argv += ["--train-targets", str(targets)]
    if recipe.cmudict_hints:
        from training.sigmorphon_english import write_hints

        hints = runs / "cmudict_hints.tsv"
        print(f"{lang}: {write_hints(hints)} in {hints}", flush=True)
        argv += ["--source-hints", str(hints)]
    return argv


def run_training(argv: list[str], out: Path, flags: list[str] | None = None) -> None:
    """python -m training.train's argv into `out`, its log beside it (<out>.log); then the flags it records
    (where given) and its last line as out/result.json, which marks the run finished."""
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    with log.open("w") as f:
        subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=True, cwd=REPO)
    if flags is not None:
        (out / "flags.json").write_text(json.dumps(flags) + "\n")
    (out / "result.json").write_text(log.read_text().strip().splitlines()[-1] + "\n")


def task_wer(bundle: Path, split_file: Path, beam: int, precision: str) -> float:
    """The task scorer's WER (%) of the bundle's engine on one of the language's files."""
    from training.evaluate import hyps_from_bundle
    from training.metrics import gold_wer

    rows = read_lines(split_file)
    hyps = hyps_from_bundle(str(bundle), sorted({s for s, _ in rows}), 256, beam, 0.0, precision, texts=True)
    return round(gold_wer([(hyps[s], g.split()) for s, g in rows])[0], 2)


def with_memory(lang: str, bundle: Path, trained: list[tuple[str, str]]) -> bool:
    """Write the language's prosody memory (PROSODY_MEMORY) from the pairs its model `trained` on into a bundle
    that lacks it as the recipe asks; whether it did. The memory is the model's: the task's scores read it."""
    from training.prosody_memory import add_memory

    spec = PROSODY_MEMORY.get(lang)
    if spec is None:
        return False
    has = json.loads((bundle / "manifest.json").read_text()).get("prosody_memory", {})
    pairs = dict(spec.segment_pairs)
    if (has.get("mark"), has.get("prefixes"), has.get("pairs"), has.get("trained_words"), has.get("why")) == (
            spec.mark, list(spec.prefixes), pairs, len(trained), spec.why):
        return False
    add_memory(bundle, trained, spec.mark, spec.prefixes, pairs, spec.why)
    return True


def trained_pairs(lang: str, train: Path | None = None) -> list[tuple[str, str]]:
    """The pairs the language's model learned from: its train file (or `train`, a held-out question's rest of
    it), and dev where the recipe trains on it."""
    f = files(lang)
    dev = read_lines(f["dev"]) if trains_on_dev(recipe_for(lang), RULES) else []
    return read_lines(train or f["train"]) + dev


def keep_int8_if_free(bundle: Path) -> dict:
    """Quantize; keep the int8 graphs only where their dev WER is no worse than fp32's. A model that trained
    on dev takes the same check, on words it learned: on words held out from such models (four medium
    languages), int8's WER equalled fp32's on every one (docs/sigmorphon.md, Tried)."""
    from service.engine.bundle import load_bundle, write_manifest
    from training.quantize import quantize_bundle

    manifest = quantize_bundle(bundle)
    fp32, int8 = manifest["metrics"]["dev"]["wer"], manifest["int8"]["metrics"]["dev"]["wer"]
    if int8 <= fp32:
        return manifest
    for role in ("encoder.int8", "decoder_step.int8"):
        (bundle / manifest["graphs"].pop(role)).unlink()
    manifest["int8_dropped"] = {**manifest.pop("int8"), "why": f"dev WER {int8:.4f} > fp32's {fp32:.4f}"}
    write_manifest(bundle, {k: v for k, v in manifest.items() if k != "files"})
    return load_bundle(bundle).manifest


def task_scores(bundle: Path, lang: str, precision: str) -> dict:
    f = files(lang)
    return {split: {"greedy": task_wer(bundle, f[split], 1, precision),
                    f"beam{BEAM}": task_wer(bundle, f[split], BEAM, precision)} for split in ("dev", "test")}


def requantize(lang: str, variant: Variant = RULES) -> dict:
    """A built model's int8 graphs made again by training/quantize.py's current method, kept as
    build() keeps them, and the task's scores taken again in the precision `--precision auto` serves."""
    from service.engine.bundle import load_bundle, write_manifest

    target = variant.bundle(lang)
    manifest = {k: v for k, v in load_bundle(target).manifest.items() if k not in ("files", "int8", "int8_dropped")}
    for role in ("encoder.int8", "decoder_step.int8"):
        if role in manifest["graphs"]:
            (target / manifest["graphs"].pop(role)).unlink()
    write_manifest(target, manifest)
    keep_int8_if_free(target)
    return rescore(lang, always=True, variant=variant)


def rescore(lang: str, always: bool = False, variant: Variant = RULES) -> dict:
    """A built model's task scores taken again in the precision `--precision auto` serves it in, where
    that has changed (after `python -m training.quantize --speed` timed it, say) or always; no training."""
    from service.engine.bundle import load_bundle, write_manifest
    from service.engine.engine import served_precision

    target = variant.bundle(lang)
    manifest = {k: v for k, v in load_bundle(target).manifest.items() if k != "files"}
    precision = served_precision(manifest, "auto")
    if always or manifest["task_scores"].get("precision") != precision:
        manifest["task_scores"] = {**manifest["task_scores"], "precision": precision,
                                   **task_scores(target, lang, precision)}
        write_manifest(target, manifest)
    print(json.dumps({"lang": lang, "precision": precision, **{k: manifest["task_scores"][k] for k in ("dev", "test")},
                      "batch_independence": manifest.get("int8", {}).get("batch_independence", {}).get("independent")}),
          flush=True)
    return manifest


class Busy(Exception):
    """Another driver is building this language."""


@contextmanager
def sole_driver(lang: str, variant: Variant = RULES):
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


def build(lang: str, variant: Variant = RULES, device: str = "", train_only: bool = False) -> Path | None:
    """Train what is missing (on `device` where given), export, quantize and score; the variant's bundle
    (models/<name>/1 for the rule-abiding models) when done, None where `train_only` stops after training."""
    with sole_driver(lang, variant):
        return _build(lang, variant, device, train_only)


def _build(lang: str, variant: Variant, device: str = "", train_only: bool = False) -> Path | None:
    from service.engine.bundle import load_bundle, write_manifest
    from training.export import build_bundle, parity_ok

    subtask, _, baseline = LANGS[lang]
    name, target, runs = variant.name(lang), variant.bundle(lang), variant.run_dir(lang)
    recipe = recipe_for(lang)
    seeds = variant.seeds or recipe.seeds
    wanted = [{"run": run_name(seed), "flags": member_flags(lang, seed, recipe, variant)} for seed in seeds]
    if (target / "manifest.json").exists() and built_as(json.loads((target / "manifest.json").read_text()), wanted):
        if variant == RULES and with_memory(lang, target, trained_pairs(lang)):
            rescore(lang, always=True, variant=variant)  # a memory added to the model as built: scored again
        return target  # done: the recipe asks for the members it was built from
    started = time.time()
    checkpoints = [train_seed(lang, seed, recipe, variant, device) for seed in seeds]
    if train_only:
        return None
    wanted = [{**w, "flags": recorded_flags(c.parent) or w["flags"]} for w, c in zip(wanted, checkpoints)]
    staging = runs / "bundle" / "1"
    shutil.rmtree(staging.parent, ignore_errors=True)
    manifest = build_bundle(checkpoints if len(checkpoints) > 1 else checkpoints[0], staging, name, "1",
                            parity_words=1000)
    if not parity_ok(manifest["parity"]):
        raise SystemExit(f"{lang}: parity check failed: {manifest['parity']}")
    from service.engine.engine import served_precision

    if variant == RULES:
        with_memory(lang, staging, trained_pairs(lang))
    precision = served_precision(keep_int8_if_free(staging), "auto")
    scores = task_scores(staging, lang, precision)
    manifest = {k: v for k, v in load_bundle(staging).manifest.items() if k != "files"}
    shutil.move(staging / "checkpoint.pt", runs / "checkpoint.pt")
    manifest["task_scores"] = {
        "scorer": "SIGMORPHON 2021 Task 1: WER %, a word right when its segments equal the gold ones; "
                  "through the engine, lexicon not consulted", "precision": precision, **scores,
        "baseline_test_wer": baseline, "subtask": subtask, "language": lang,
        "members": len(checkpoints), "runs": wanted, "minutes": round((time.time() - started) / 60, 1)}
    if variant.outside_data:
        manifest["outside_data"] = variant.outside_data
    manifest["language"] = lang  # the task's tag: what the server's text rules key on (service/answering/textrules.py)
    where = runs.relative_to(REPO) if runs.is_relative_to(REPO) else runs
    driver = "sigmorphon" if variant == RULES else "sigmorphon_transfer"
    manifest["checkpoint"] = (f"not shipped: python -m training.{driver} --langs {lang} writes it to "
                              f"{where}/checkpoint.pt")
    write_manifest(staging, manifest)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(staging, target)
    print(json.dumps({"lang": lang, "model": name, **scores, "precision": precision,
                      "minutes": manifest["task_scores"]["minutes"]}), flush=True)
    return target


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--langs", nargs="+", choices=sorted(LANGS), help="default: every language, low, medium, then high")
    p.add_argument("--table", action="store_true", help="only write docs/sigmorphon.md from the models' manifests")
    p.add_argument("--requantize", action="store_true",
                   help="make the built models' int8 graphs again and score them again; no training")
    p.add_argument("--rescore", action="store_true",
                   help="score the built models again where the precision served has changed; no training")
    p.add_argument("--device", choices=["cpu", "cuda"], help="train on this in place of the recipe's device "
                   "(recorded in each run's flags; a model is compared with its recipe where it ran aside)")
    p.add_argument("--train-only", action="store_true",
                   help="train the missing runs only (on a lent GPU, say); a later run here builds from them")
    args = p.parse_args(argv)
    from training.sigmorphon_table import write_table

    built = sorted(lang for lang in LANGS if (MODELS / LANGS[lang][1] / "1").exists())
    if args.requantize or args.rescore:
        for lang in args.langs or built:
            (requantize if args.requantize else rescore)(lang)
    elif not args.table:
        langs = args.langs or sorted(LANGS, key=lambda lang: TRAIN_ORDER.index(LANGS[lang][0]))
        for lang in langs:
            try:
                build(lang, device=args.device or "", train_only=args.train_only)
            except Busy as busy:
                print(f"{busy}: passed over", flush=True)
                continue
            if not args.train_only:
                write_table(DOC)
    if not args.train_only:
        write_table(DOC)


if __name__ == "__main__":
    main()
