"""The SIGMORPHON 2021 experiment's one driver: `python -m experiments.sigmorphon COMMAND`.

    python -m experiments.sigmorphon build                  # every language whose model is missing (`make sigmorphon`)
    python -m experiments.sigmorphon build --langs fre bul  # these only
    python -m experiments.sigmorphon build --train-only --device cuda --langs bul  # the runs only (docs/training.md)
    python -m experiments.sigmorphon build --requantize     # the built models' int8 graphs again; no training
    python -m experiments.sigmorphon table                  # docs/sigmorphon.md's tables from the models' manifests
    python -m experiments.sigmorphon transfer               # the low languages pretrained first (`make sigmorphon-transfer`)
    python -m experiments.sigmorphon heldout --langs kor --tag recipe   # a recipe question on held-out words
    python -m experiments.sigmorphon errors                     # docs/results/sigmorphon_errors.md
    python -m experiments.sigmorphon prefix-prosody --lang kor --tag recipe
    python -m experiments.sigmorphon profile --lang arm_e       # where a recipe's training step's time goes

The command-line edge: the repository's paths and the recipes folder are the defaults here, and everything
below is given them (--root, --recipes, --doc move them).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.sigmorphon import build, errors, heldout, prefix_prosody, table, transfer
from experiments.sigmorphon.layout import Paths, Study
from experiments.sigmorphon.task import Task, load
from training import profile_step

ROOT = Path(__file__).resolve().parents[2]
RECIPES = Path(__file__).resolve().with_name("recipes")


def study_of(root: Path = ROOT, recipes: Path = RECIPES) -> Study:
    """The experiment as the repository at `root` holds it, its recipes read from `recipes`."""
    return Study(load(recipes), Paths.under(root))


def cmd_build(study: Study, args) -> None:
    task, rules = study.task, study.rules()
    if args.requantize or args.rescore:
        built = sorted(lang for lang in task.languages if study.bundle(lang, rules).exists())
        for lang in args.langs or built:
            if args.requantize:
                build.requantize(study, lang, rules)
            else:
                build.rescore(study, lang, rules)
    else:
        order = task.train_order
        langs = args.langs or sorted(task.languages, key=lambda lang: order.index(task.languages[lang].subtask))
        for lang in langs:
            try:
                build.build(study, lang, rules, device=args.device or "", train_only=args.train_only)
            except build.Busy as busy:
                print(f"{busy}: passed over", flush=True)
                continue
            if not args.train_only:
                table.write_table(study, args.doc)
    if not args.train_only:
        table.write_table(study, args.doc)


def cmd_transfer(study: Study, args) -> None:
    variant = study.transfer()
    if args.requantize:
        for lang in args.langs or study.low_langs():
            build.requantize(study, lang, variant)
        table.write_table(study, args.doc)
        return
    transfer.pretrain(study)
    for lang in args.langs or study.low_langs():
        try:
            build.build(study, lang, variant)
        except build.Busy as busy:
            print(f"{busy}: passed over", flush=True)
    table.write_table(study, args.doc)
    models = variant.models
    print(json.dumps({"models": str(models), "built": sorted(d.name for d in models.iterdir() if d.is_dir())}))


def cmd_heldout(study: Study, args) -> None:
    runs = heldout.runs_of(study, args.eighth)
    for lang in args.langs:
        result = heldout.ask(study, lang, args.tag, args.seeds, args.flags, eighth=args.eighth)
        print(json.dumps(result), flush=True)
        if args.against:
            print(json.dumps(heldout.against(result, args.against, runs, study.task.beam)), flush=True)


def cmd_errors(study: Study, args) -> None:
    results = []
    for lang in args.langs or list(study.task.languages):
        results.append(errors.language(study, lang))
        r = results[-1]
        print(f"{lang}: {r['errors']} errors of {r['words']}, prosody only {r['prosody_only']}, "
              f"one segment {r['one_segment']}", flush=True)
    out = args.out or study.paths.root / "docs" / "results" / "sigmorphon_errors.md"
    out.write_text(errors.table(results, study.task.beam), encoding="utf-8")
    print(f"wrote {out}")


def member_argv(study: Study, lang: str, seed: int = 1) -> list[str]:
    """python -m training.train's arguments for one member of the language's rule-abiding model (files included)."""
    f = study.files(lang)
    return ["--corpus", "tsv", "--train-tsv", str(f["train"]), "--dev-tsv", str(f["dev"]), "--out", "/dev/null",
            *build.train_flags(study, lang, seed, study.task.recipe_for(lang), study.rules())]


def cmd_profile(study: Study, args) -> None:
    mean_ms, report = profile_step.profile(member_argv(study, args.lang), args.steps)
    print(f"{args.lang}: {mean_ms:.1f} ms a step (mean of {args.steps}, one thread)\n{report}")


def parser(task: Task) -> argparse.ArgumentParser:
    langs, low = list(task.languages), task.of("low")
    p = argparse.ArgumentParser(prog="python -m experiments.sigmorphon", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=ROOT, help="the repository: data/, runs/, models/ below it")
    p.add_argument("--recipes", type=Path, default=RECIPES, help="the folder of the recipes' TOML files")
    sub = p.add_subparsers(dest="command", required=True)
    doc = {"type": Path, "default": None,
           "help": "the doc whose tables are filled (default: <root>/docs/sigmorphon.md)"}
    b = sub.add_parser("build", help="train, export, quantize and score what is missing; write the table")
    b.add_argument("--langs", nargs="+", choices=sorted(langs), help="default: every language, low, medium, then high")
    b.add_argument("--requantize", action="store_true",
                   help="make the built models' int8 graphs again and score them again; no training")
    b.add_argument("--rescore", action="store_true",
                   help="score the built models again where the precision served has changed; no training")
    b.add_argument("--device", choices=["cpu", "cuda"], help="train on this in place of the recipe's device "
                   "(recorded in each run's flags; a model is compared with its recipe where it ran aside)")
    b.add_argument("--train-only", action="store_true",
                   help="train the missing runs only (on a lent GPU, say); a later run here builds from them")
    b.add_argument("--doc", **doc)
    t = sub.add_parser("table", help="only write the doc's tables from the models' manifests")
    t.add_argument("--doc", **doc)
    x = sub.add_parser("transfer", help="the low languages, each pretrained on the task's other languages first")
    x.add_argument("--langs", nargs="+", choices=low, help="default: every low language")
    x.add_argument("--requantize", action="store_true",
                   help="make the built models' int8 graphs again and score them again; no training")
    x.add_argument("--doc", **doc)
    h = sub.add_parser("heldout", help="a recipe question asked on a held-out eighth of the train files")
    h.add_argument("--langs", nargs="+", choices=sorted(langs), required=True)
    h.add_argument("--tag", required=True, help="the runs' folder name: one per question asked")
    h.add_argument("--seeds", nargs="+", type=int, default=[1], help="several: one ensemble")
    h.add_argument("--against", metavar="TAG", help="print each language's words wrong beside this tag's, asked "
                   "before on the same split (the recipe retrained the same session: --tag base)")
    h.add_argument("--eighth", type=int, choices=range(8), default=0,
                   help="hold out the sources whose md5 %% 8 is this (runs/sigmorphon-heldout-<K>/ but for 0): "
                   "another look at a question on words its first figures were not read on")
    h.add_argument("flags", nargs="*", help="after --: python -m training.train flags beside the recipe's")
    e = sub.add_parser("errors", help="sort each shipped model's dev errors")
    e.add_argument("--langs", nargs="+", choices=langs)
    e.add_argument("--out", type=Path, help="default: <root>/docs/results/sigmorphon_errors.md")
    q = sub.add_parser("prefix-prosody", help="would a memory of trained prefixes decide prosody better?")
    q.add_argument("--lang", choices=sorted(langs), required=True)
    q.add_argument("--tag", required=True, help="the held-out run's tag (the heldout command's)")
    q.add_argument("--prefix", type=int, default=2, help="source symbols a trained word must share")
    r = sub.add_parser("profile", help="where a recipe's training step's time goes (training/profile_step.py)")
    r.add_argument("--lang", choices=sorted(langs), required=True)
    r.add_argument("--steps", type=int, default=20)
    return p


def main(argv=None, study: Study | None = None) -> None:
    """Run a command; `study` in place of the one --root and --recipes give (tests pass their own)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--root", type=Path, default=ROOT)
    pre.add_argument("--recipes", type=Path, default=RECIPES)
    known, _ = pre.parse_known_args(argv)
    study = study or study_of(known.root, known.recipes)
    args = parser(study.task).parse_args(argv)
    if getattr(args, "doc", None) is None:
        args.doc = study.paths.root / "docs" / "sigmorphon.md"
    if args.command == "prefix-prosody":
        print(json.dumps(prefix_prosody.ask(study, args.lang, args.tag, args.prefix)))
        return
    if args.command == "table":
        table.write_table(study, args.doc)
        return
    {"build": cmd_build, "transfer": cmd_transfer, "heldout": cmd_heldout, "errors": cmd_errors,
     "profile": cmd_profile}[args.command](study, args)
