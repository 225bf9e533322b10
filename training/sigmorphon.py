"""SIGMORPHON 2021 Task 1: a G2P model for each of its 21 languages, on the task's own splits.

    python -m training.sigmorphon                      # every language whose model is missing (`make sigmorphon`)
    python -m training.sigmorphon --langs fre bul      # these only
    python -m training.sigmorphon --table              # docs/sigmorphon.md from the models' manifests

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

DATA = REPO / "data" / "sigmorphon-2021"
RUNS = REPO / "runs" / "sigmorphon"
MODELS = REPO / "models"
DOC = REPO / "docs" / "sigmorphon.md"

# file prefix: (subtask, model name, the task baseline's test WER %)
LANGS = {
    "arm_e": ("medium", "g2p-hye", 7.00), "bul": ("medium", "g2p-bul", 18.30), "dut": ("medium", "g2p-nld", 14.70),
    "fre": ("medium", "g2p-fra", 8.50), "geo": ("medium", "g2p-kat", 0.00),
    "hbs_latn": ("medium", "g2p-hbs-latn", 32.10), "hun": ("medium", "g2p-hun", 1.80),
    "jpn_hira": ("medium", "g2p-jpn-hira", 5.20), "kor": ("medium", "g2p-kor", 16.30),
    "vie_hanoi": ("medium", "g2p-vie-hanoi", 2.50),
    "ady": ("low", "g2p-ady", 22.00), "gre": ("low", "g2p-ell", 21.00), "ice": ("low", "g2p-isl", 12.00),
    "ita": ("low", "g2p-ita", 19.00), "khm": ("low", "g2p-khm", 34.00), "lav": ("low", "g2p-lav", 55.00),
    "mlt_latn": ("low", "g2p-mlt-latn", 19.00), "rum": ("low", "g2p-ron", 10.00), "slv": ("low", "g2p-slv", 49.00),
    "wel_sw": ("low", "g2p-cym-sw", 10.00),
    "eng_us": ("high", "g2p-eng-us-ipa", 41.94),
}
SUBTASKS = ("high", "medium", "low")  # the table's order
TRAIN_ORDER = ("low", "medium", "high")  # the quickest first
TARGETS = {"high": 37.0, "medium": 10.0, "low": 24.0}  # macro test WER % to reach
BASELINE_MACRO = {"high": 41.94, "medium": 10.64, "low": 25.10}
BEAM = 5


@dataclass(frozen=True)
class Recipe:
    """One subtask's training: the flags of python -m training.train, and the seeds (several: an ensemble)."""
    flags: tuple[str, ...]
    seeds: tuple[int, ...]
    cmudict_ipa: bool = False  # eng_us only: CMUdict in the task's IPA as extra training pairs
    alt_flags: tuple[str, ...] = ()  # each seed trained again with these flags too, as more members
    # The dev pairs train too, once every choice was made on dev without them: each member is its run's last
    # epoch (dev picks nothing), and the model's dev figures are training figures (the table says so).
    train_on_dev: bool = False
    decoding: str = ""  # where dev cannot choose (train_on_dev): the decoding it chose before it trained

    def members(self, variant: "Variant") -> list[tuple[int, bool]]:
        """(seed, alt) of each member: the seeds, then (where the variant takes them) the seeds again with alt_flags."""
        alts = (False, True) if self.alt_flags and variant.alt_members else (False,)
        return [(seed, alt) for alt in alts for seed in self.seeds]


COSINE = ("--lr-schedule", "cosine", "--min-lr", "1e-5", "--patience-epochs", "1000", "--threads", "1",
          "--device", "cpu")
RECIPES = {
    # 800 words: a small model (on ita's dev, hidden 128 beat 256, and a 2-layer additive-attention encoder),
    # many short epochs; hard monotonic attention (on the ten dev files it beat the soft attention's
    # ensembles, which the earlier models had, and the 0th-order mixture). Six members: three seeds, and the
    # same three at dropout 0.5 (on dev, 23.5 against 24.6 for the three alone, 24.3 for five seeds and 24.5
    # for dropout 0.5 alone); one shape, so they step as one (training/stacked.py). Chosen so, it then
    # trains on the train and dev files together: on a held-out eighth of each train file, that beat the
    # same recipe on train alone, early-stopped on dev (docs/sigmorphon.md, Tried); beam 5 was dev's choice
    "low": Recipe(("--hidden-size", "128", "--enc-layers", "1", "--emb-dim", "64", "--dropout", "0.3",
                   "--batch-size", "16", "--lr", "3e-3", "--warmup-steps", "50", "--max-epochs", "60",
                   "--max-output-len", "40", "--output", "monotonic", *COSINE), seeds=(1, 2, 3),
                  alt_flags=("--dropout", "0.5"), train_on_dev=True, decoding=f"beam{BEAM}"),
    # 8,000 words: 60 epochs (25 in 9 minutes ended still learning; 60 were better on the dev of 7 of the 10
    # languages, LANG_FLAGS the others); the budget only bounds a busy machine, where the cosine ends early.
    # The monotonic output, on the two languages furthest behind at the full schedule: one better, one worse
    "medium": Recipe(("--hidden-size", "256", "--enc-layers", "1", "--emb-dim", "64", "--dropout", "0.3",
                      "--batch-size", "32", "--lr", "3e-3", "--warmup-steps", "100", "--max-epochs", "60",
                      "--max-output-len", "50", "--max-minutes", "25", *COSINE), seeds=(1,)),
    # 33,344 words plus about 117,000 of CMUdict: a 2-layer model, as many epochs as one core affords; two
    # seeds as one ensemble (dev 43.91 with beam 5, against 44.60 for seed 1 alone, 44.48 for seed 2)
    "high": Recipe(("--hidden-size", "256", "--enc-layers", "2", "--emb-dim", "64", "--dropout", "0.3",
                    "--batch-size", "64", "--lr", "3e-3", "--warmup-steps", "300", "--max-epochs", "12",
                    "--max-output-len", "50", "--max-minutes", "75", *COSINE), seeds=(1, 2), cmudict_ipa=True),
}


# A language's own flags beside its subtask's recipe (the later flag wins), each with why: the table
# prints both. Korean: a Hangul syllable is two or three jamo (letters); trained on whole syllables, a
# test word with a syllable no training word has cannot be read at all, so its sources are decomposed
# (NFD) and the model reads the letters. Dutch, Japanese and Georgian keep the medium recipe's earlier
# schedule (25 epochs, 9 minutes). Serbo-Croatian: a 2-layer encoder. Korean, Dutch, Armenian, Vietnamese,
# Georgian and Hungarian: the monotonic output too.
SHORT_MEDIUM = (("--max-epochs", "25", "--max-minutes", "9"),
                "the earlier, shorter schedule: better on its dev than 60 epochs")
LANG_FLAGS = {"kor": (("--source-form", "nfd", "--output", "monotonic", "--max-minutes", "200"),
                      "Hangul syllables decomposed into their jamo: a syllable no training word has is letters the "
                      "model has seen; the monotonic output, run to the end of its 60 epochs: on its dev 20.1 with "
                      "beam 5 against 20.3 (on fre's dev, 8.6 against 8.3: not kept). Its int8 costs nothing on "
                      "dev, so it is served int8: a lone word takes 0.7x as long as the fp32 model it replaced"),
              "dut": (("--max-epochs", "25", "--output", "monotonic", "--max-minutes", "200"),
                      "the earlier, shorter schedule (better on its dev than 60 epochs), with the monotonic output, "
                      "run to the end of its 25 epochs: on its dev 10.4 with beam 5 against 11.0. Its cost: served "
                      "in fp32 (int8 lost a dev word), a lone word takes 1.8x as long as the int8 model it replaced"),
              "arm_e": (("--output", "monotonic", "--max-minutes", "200"),
                        "the monotonic output, run to the end of its 60 epochs: on its dev 5.0 with beam 5 against 6.0. "
                        "Its cost: a lone word takes about 1.2x as long (int8 both)"),
              "vie_hanoi": (("--output", "monotonic", "--max-minutes", "200"),
                            "the monotonic output, run to the end of its 60 epochs: on its dev 1.7 with beam 5 against 2.0. "
                            "Its cost: a lone word takes about 1.1x as long (int8 both)"),
              "geo": (("--max-epochs", "25", "--output", "monotonic", "--max-minutes", "200"),
                      "the earlier, shorter schedule (better on its dev than 60 epochs), with the monotonic output, "
                      "run to the end of its 25 epochs: on its dev 0.2 with beam 5 against 0.3. Its cost: a lone word "
                      "takes about 1.1x as long (int8 both)"),
              "hun": (("--output", "monotonic", "--max-minutes", "200"),
                      "the monotonic output, run to the end of its 60 epochs: on its dev 1.9 with beam 5 against 2.4. Its "
                      "int8 costs nothing on dev, so it is served int8: a lone word takes about 0.9x as long as the "
                      "fp32 model it replaced"),
              "jpn_hira": SHORT_MEDIUM,
              "hbs_latn": (("--enc-layers", "2", "--max-minutes", "200"),
                           "a 2-layer encoder, run to the end of its 60 epochs: on its dev 36.0 with beam 5 against "
                           "36.5 for one layer, cut at epoch 41 by 25 minutes (on fre's dev, 8.5 against 8.3: not kept). "
                           "Its cost: served in fp32 (int8 lost two dev words), a lone word takes 1.6x as long")}


# A language's own seeds in place of its subtask's recipe's, where its dev chose them (several: one
# ensemble), each with why (the table prints it). Every seed takes the language's LANG_FLAGS.
LANG_SEEDS: dict[str, tuple[tuple[int, ...], str]] = {
    "kor": ((2,), "seed 2 of its LANG_FLAGS: on its dev 19.1 with beam 5 against 20.1 for seed 1 and 19.5 for the "
                  "two as one ensemble; a seed picked on 1,000 dev words, so partly luck"),
              "dut": ((1, 2), "seeds 1 and 2 of its LANG_FLAGS as one ensemble: on its dev 10.3 with beam 5 against "
                              "10.4 for seed 1 alone (one word of 1,000) and 10.5 for seed 2. Its cost: a lone word takes "
                              "about 2x as long"),
              "hbs_latn": ((1, 2), "seeds 1 and 2 of its LANG_FLAGS as one ensemble: on its dev 34.9 with beam 5 "
                                   "against 36.0 for seed 1 alone and 36.7 for seed 2. Its cost: a lone word takes about 2x as long "
                                   "(fp32 both), and the model's weights are twice one member's")}


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
    alt_members: bool = True  # whether its ensembles take the recipe's alt_flags members
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


TRAIN_ON_DEV = ("--train-on-dev", "true", "--save-last", "true")


def trains_on_dev(recipe: Recipe, variant: "Variant") -> bool:
    return recipe.train_on_dev and variant.train_on_dev


def trained_on_dev(manifest: dict) -> bool:
    """Whether a built model learned from its dev file too (its dev figures are then training figures)."""
    return bool(manifest.get("data", {}).get("train_on_dev"))


def _train_flags(lang: str, seed: int, recipe: Recipe, variant: "Variant", alt: bool) -> list[str]:
    """One member's python -m training.train flags but its files."""
    return ["--seed", str(seed), *recipe.flags, *LANG_FLAGS.get(lang, ((), ""))[0], *variant.flags,
            *(recipe.alt_flags if alt else ()), *(TRAIN_ON_DEV if trains_on_dev(recipe, variant) else ())]


def member_flags(lang: str, seed: int, recipe: Recipe, variant: "Variant" = RULES, alt: bool = False) -> list[str]:
    """_train_flags as its run and a model built from it record them, so that a changed recipe is noticed
    (paths inside the repository relative to it)."""
    return [str(Path(a).relative_to(REPO)) if Path(a).is_absolute() and Path(a).is_relative_to(REPO) else a
            for a in _train_flags(lang, seed, recipe, variant, alt)] + (["+cmudict_ipa"] if recipe.cmudict_ipa else [])


def run_name(seed: int, alt: bool) -> str:
    return f"seed{seed}" + ("-alt" if alt else "")


def train_seed(lang: str, seed: int, recipe: Recipe, variant: Variant = RULES, alt: bool = False) -> Path:
    """One training run (skipped when its result.json exists), with the recipe's alt_flags where `alt`;
    returns its checkpoint (best.pt, or last.pt where it trains on dev). A run that records other flags
    than these is refused, not reused."""
    runs = variant.run_dir(lang)
    run = run_name(seed, alt)
    out = runs / run
    checkpoint = out / ("last.pt" if trains_on_dev(recipe, variant) else "best.pt")
    flags = member_flags(lang, seed, recipe, variant, alt)
    if (out / "result.json").exists():
        recorded = out / "flags.json"  # runs from before it was written record nothing: taken as they are
        if recorded.exists() and json.loads(recorded.read_text()) != flags:
            raise SystemExit(f"{out} was trained with other flags than {lang}'s recipe now asks ({recorded}): "
                             "move it aside to train this member again")
        return checkpoint
    f = files(lang)
    argv = [sys.executable, "-m", "training.train", "--corpus", "tsv", "--train-tsv", str(f["train"]),
            "--dev-tsv", str(f["dev"]), "--test-tsv", str(f["test"]), "--out", str(out),
            *_train_flags(lang, seed, recipe, variant, alt)]
    if recipe.cmudict_ipa:
        from training.sigmorphon_english import write_targets

        targets = runs / "train_plus_cmudict_ipa.tsv"
        print(f"{lang}: {write_targets(f['train'], [f['dev'], f['test']], targets)} in {targets}", flush=True)
        argv += ["--train-targets", str(targets)]
    out.mkdir(parents=True, exist_ok=True)
    with (runs / f"{run}.log").open("w") as log:
        print(f"{lang} {run}: training, log {log.name}", flush=True)
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=REPO)
    last = (runs / f"{run}.log").read_text().strip().splitlines()[-1]
    (out / "flags.json").write_text(json.dumps(flags) + "\n")
    (out / "result.json").write_text(last + "\n")
    return checkpoint


def task_wer(bundle: Path, split_file: Path, beam: int, precision: str) -> float:
    """The task scorer's WER (%) of the bundle's engine on one of the language's files."""
    from training.evaluate import hyps_from_bundle
    from training.metrics import gold_wer

    rows = read_lines(split_file)
    hyps = hyps_from_bundle(str(bundle), sorted({s for s, _ in rows}), 256, beam, 0.0, precision, texts=True)
    return round(gold_wer([(hyps[s], g.split()) for s, g in rows])[0], 2)


def keep_int8_if_free(bundle: Path) -> dict:
    """Quantize; keep the int8 graphs only where their dev WER is no worse than fp32's. A model that trained
    on dev has no held-out words to show that, so it stays fp32."""
    from service.engine.bundle import load_bundle, write_manifest
    from training.quantize import quantize_bundle

    built = load_bundle(bundle).manifest
    if trained_on_dev(built):
        return built
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


def build(lang: str, variant: Variant = RULES) -> Path:
    """Train what is missing, export, quantize and score; the variant's bundle (models/<name>/1 for the
    rule-abiding models) when done."""
    with sole_driver(lang, variant):
        return _build(lang, variant)


def _built_as(manifest: dict, wanted: list[dict]) -> bool:
    """Whether a built model's members are the runs `wanted` lists, with their flags."""
    done = manifest.get("task_scores", {})
    if "runs" in done:
        return done["runs"] == wanted
    # Built before models recorded their runs: as many members, trained on dev or not as asked, and a
    # lone member's seed.
    on_dev = any(TRAIN_ON_DEV[0] in w["flags"] for w in wanted)
    if done.get("members") != len(wanted) or on_dev != trained_on_dev(manifest):
        return False
    return len(wanted) > 1 or str(manifest.get("train_config", {}).get("seed")) == wanted[0]["flags"][1]  # --seed N


def _build(lang: str, variant: Variant) -> Path:
    from service.engine.bundle import load_bundle, write_manifest
    from training.export import build_bundle, parity_ok

    subtask, _, baseline = LANGS[lang]
    name, target, runs = variant.name(lang), variant.bundle(lang), variant.run_dir(lang)
    recipe = recipe_for(lang)
    members = recipe.members(variant)
    wanted = [{"run": run_name(seed, alt), "flags": member_flags(lang, seed, recipe, variant, alt)}
              for seed, alt in members]
    if (target / "manifest.json").exists() and _built_as(json.loads((target / "manifest.json").read_text()), wanted):
        return target  # done: the recipe asks for the members it was built from
    started = time.time()
    checkpoints = [train_seed(lang, seed, recipe, variant, alt) for seed, alt in members]
    staging = runs / "bundle" / "1"
    shutil.rmtree(staging.parent, ignore_errors=True)
    manifest = build_bundle(checkpoints if len(checkpoints) > 1 else checkpoints[0], staging, name, "1",
                            parity_words=1000)
    if not parity_ok(manifest["parity"]):
        raise SystemExit(f"{lang}: parity check failed: {manifest['parity']}")
    from service.engine.engine import served_precision

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
                build(lang)
            except Busy as busy:
                print(f"{busy}: passed over", flush=True)
                continue
            write_table(DOC)
    write_table(DOC)


if __name__ == "__main__":
    main()
