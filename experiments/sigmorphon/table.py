"""docs/sigmorphon.md's generated parts: each SIGMORPHON 2021 language's dev and test WER beside the task's
baseline, from the task_scores that build.py writes into each model's manifest, and the recipes they were
built from. A function of the manifests and the recipes (`regions`); write_table reads them from the paths
it is given and fills the doc's marked regions (`<!-- table:NAME -->` ... `<!-- /table:NAME -->`), leaving
its prose, which is written by hand, as it is."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from experiments.sigmorphon.flags import TRAIN_ON_DEV, trained_on_dev
from experiments.sigmorphon.layout import Study, Variant
from experiments.sigmorphon.task import Task
from training.data import read_lines


@dataclass(frozen=True)
class Built:
    """What the table reads of a built model: its manifest, and its bundle's size."""
    manifest: dict
    mb: float


def read_built(bundle: Path) -> Built | None:
    """The model built at `bundle` (a version folder), None where there is none."""
    path = bundle / "manifest.json"
    if not path.exists():
        return None
    return Built(json.loads(path.read_text(encoding="utf-8")), sum(f.stat().st_size for f in bundle.iterdir()) / 1e6)


def scores(built: Built | None) -> dict | None:
    """A built model's row: its task scores and what the table says of it; None where it was never scored."""
    if built is None or "task_scores" not in built.manifest:
        return None
    manifest = built.manifest
    return {**manifest["task_scores"], "parameters": manifest["parameters"],
            "train_on_dev": trained_on_dev(manifest), "train_minutes": train_minutes(manifest), "mb": built.mb}


def train_minutes(manifest: dict) -> float:
    """What the model's runs took, each member's minutes as its own history recorded them (one CPU thread a
    run, the recipes' `--threads 1`)."""
    training = manifest.get("training") or {}
    return sum(m["history"][-1]["minutes"] for m in training.get("members") or [training] if m.get("history"))


def sampling_error(test_pct: dict[str, float], test_words: dict[str, int]) -> float:
    """One standard error of a macro test WER (in points) from the test words' draw alone: each language's words
    right or wrong independently at its measured rate, the languages independent. A target within about this of
    the figure is within what another draw of test words would move it by; the baseline's figures have the same."""
    rates = [(test_pct[lang] / 100, test_words[lang]) for lang in test_pct]
    return 100 * sum(p * (1 - p) / n for p, n in rates) ** 0.5 / len(rates)


def decoding_chosen(task: Task, rows: list[dict], subtask: str) -> tuple[str, str]:
    """The subtask's decoding and what chose it: greedy or beam, whichever has the lower dev macro-average over
    the models that did not train on dev; where all did, the one its recipe chose before they trained on dev."""
    beam, held_out = f"beam{task.beam}", [r for r in rows if not r["train_on_dev"]]
    if not held_out:
        recipe = task.subtasks[subtask].recipe
        return recipe.decoding, recipe.decoding_chosen_on
    better = sum(r["dev"][beam] for r in held_out) < sum(r["dev"]["greedy"] for r in held_out)
    return (beam if better else "greedy"), "dev"


def dev_cell(s: dict, decoding: str) -> str:
    return f"({s['dev'][decoding]:.2f})" if s["train_on_dev"] else f"{s['dev'][decoding]:.2f}"


def subtask_lines(task: Task, subtask: str, rows: dict[str, dict], test_words: dict[str, int], suffix: str = "",
                  rules: bool = True) -> list[str]:
    """A subtask's section but its heading: its models' `rows` (scores), the name `suffix` of their variant, and
    whether they are under the subtask's rules (the target is theirs)."""
    langs, beam = task.of(subtask), f"beam{task.beam}"
    rows = {lang: rows[lang] for lang in langs if lang in rows}
    if not rows:
        return ["No model yet.", ""]
    pick, chosen_on = decoding_chosen(task, list(rows.values()), subtask)
    lines = []
    if any(s["train_on_dev"] for s in rows.values()):
        lines += ["These models trained on the train and dev files together, once every choice had been made on dev "
                  "without them (the recipe's `train_on_dev`; each member is its run's last epoch, so dev picks "
                  "nothing): their dev figures, in parentheses, are figures on words they learned.", ""]
    lines += [f"Decoding chosen on {chosen_on}: **{pick}**.", "",
              "| language | model | members | parameters | MB | precision | dev greedy | dev beam 5 | test greedy | "
              "test beam 5 | baseline | ours - baseline |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lang in langs:
        name, baseline = task.languages[lang].model + suffix, task.languages[lang].baseline
        s = rows.get(lang)
        if s is None:
            lines.append(f"| `{lang}` | `{name}` | | | | | | | (not yet) | | {baseline:.2f} | |")
            continue
        diff = s["test"][pick] - baseline
        mark = " (more than 1 point behind)" if diff > 1.0 else ""
        lines.append(f"| `{lang}` | `{name}` | {s['members']} | {s['parameters']:,} | {s['mb']:.1f} | {s['precision']} | "
                     f"{dev_cell(s, 'greedy')} | {dev_cell(s, beam)} | {s['test']['greedy']:.2f} | "
                     f"{s['test'][beam]:.2f} | {baseline:.2f} | {diff:+.2f}{mark} |")
    done = len(rows)
    macro = {k: sum(r["test"][k] for r in rows.values()) / done for k in ("greedy", beam)}
    base = sum(task.languages[lang].baseline for lang in rows) / done
    partial = ("" if done == len(langs) else
               f" (partial: {done} of {len(langs)} languages; the baseline over the same: {base:.2f})")
    target = task.subtasks[subtask].target
    miss = macro[pick] - target
    verdict = f"target <= {target:.2f} met" if miss <= 0 else f"target <= {target:.2f} missed by {miss:.2f}"
    if not rules:  # the subtask's target is the rule-abiding models'
        verdict = f"beside the target of <= {target:.2f} for models under the subtask's rules ({miss:+.2f})"
    se = sampling_error({lang: s["test"][pick] for lang, s in rows.items()}, {lang: test_words[lang] for lang in rows})
    lines += ["", f"Macro test WER{partial}: **{macro[pick]:.2f}** ({pick}; greedy {macro['greedy']:.2f}, "
              f"beam 5 {macro[beam]:.2f}), ± {se:.2f}: one standard error of the test words' draw "
              f"(`sampling_error`); baseline {task.subtasks[subtask].baseline_macro:.2f}; {verdict}.", ""]
    if rules:  # the transfer row's runs start from a pretrained model, whose time is elsewhere
        lines += [f"Training: {sum(r['members'] for r in rows.values())} runs, "
                  f"{sum(r['train_minutes'] for r in rows.values()) / 60:.1f} hours in all, each on one CPU thread.", ""]
    return lines


def cost_text(rows: dict[str, dict]) -> str:
    """What training every rule-abiding model from scratch takes, from the runs' own minutes."""
    minutes = sum(s["train_minutes"] for s in rows.values())
    return (f"**{minutes / 60:.1f} hours** of runs on one CPU thread each (the runs' own minutes, from the "
            f"manifests), so about {minutes / 120:.1f} hours")


def _table(intro: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A paragraph's lines: its intro, then a markdown table of one row per language."""
    return ["", intro, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def recipe_lines(task: Task) -> list[str]:
    recipes = "experiments/sigmorphon/recipes"
    lines = ["## Recipes", "", f"Each subtask's `python -m training.train` flags ({recipes}/<subtask>.toml "
             "`[recipe.train]`); several seeds are exported as their ensemble (a model's `members`); each manifest "
             "keeps its own train_config.", ""]
    for subtask, s in task.subtasks.items():
        r = s.recipe
        extra = "; plus CMUdict in the task's IPA, marked (experiments/sigmorphon/english.py)" if r.cmudict_ipa else ""
        if r.cmudict_hints:
            extra += ("; each word read with CMUdict's first transcription after it, where CMUdict has it, dev and "
                      "test words included, as the subtask's rules allow (`--source-hints`, docs/g2p.md)")
        on_dev = (f"; on the train and dev files together, each member its run's last epoch: "
                  f"`{' '.join(TRAIN_ON_DEV)}`" if r.train_on_dev else "")
        lines.append(f"- **{subtask}** (seeds {', '.join(map(str, r.seeds))}{extra}{on_dev}): `{' '.join(r.flags)}`")
    t = task.transfer
    lines.append(f"- **low, pretrained** (its own row; experiments/sigmorphon/transfer.py, {recipes}/transfer.toml): "
                 f"one model pretrained with `{' '.join(t.pretrain_flags)}`, then seeds {', '.join(map(str, t.seeds))} "
                 f"from it with `--init-from`, `--init-vocab by-symbol` and `--output context` (made before the low "
                 f"recipe's monotonic output)")
    langs = sorted(task.languages.items())
    lines += _table(f"A language's own flags beside its subtask's ({recipes}/<subtask>.toml "
                    "`[languages.<lang>.train]`; the later flag wins):", ("language", "own flags", "why"),
                    [(f"`{lang}`", f"`{' '.join(g.flags)}`", g.why) for lang, g in langs if g.flags])
    lines += _table(f"A language's prosody memory ({recipes}/<subtask>.toml `[languages.<lang>.prosody_memory]`; "
                    "attnserve/bundle/prosody.py):", ("language", "mark", "by its first ... characters", "why"),
                    [(f"`{lang}`", f"`{m.mark}`", ", else ".join(map(str, m.prefixes)), m.why)
                     for lang, g in langs if (m := g.prosody_memory)])
    seeds = [(f"`{lang}`", ", ".join(map(str, g.seeds)), g.seeds_why) for lang, g in langs if g.seeds]
    if seeds:
        lines += _table(f"A language's own seeds in place of its subtask's ({recipes}/<subtask>.toml "
                        "`[languages.<lang>] seeds`; several are one ensemble):", ("language", "seeds", "why"), seeds)
    return lines + [""]


def regions(task: Task, rules: dict[str, Built], transfer: dict[str, Built],
            test_words: dict[str, int]) -> dict[str, str]:
    """The doc's generated regions from the rule-abiding models and the pretrained variant's, by language."""
    rows = {lang: s for lang, built in rules.items() if (s := scores(built))}
    transfer_rows = {lang: s for lang, built in transfer.items() if (s := scores(built))}
    results = []
    for subtask in task.subtasks:
        results += [f"## {subtask}", "", *subtask_lines(task, subtask, rows, test_words)]
    return {"results": block(results), "cost": cost_text(rows),
            "transfer": block(subtask_lines(task, "low", transfer_rows, test_words, task.transfer.suffix, rules=False)),
            "recipes": block(recipe_lines(task))}


def block(lines: list[str]) -> str:
    """Lines as a region of whole lines between its markers."""
    return "\n" + "\n".join(lines).rstrip("\n") + "\n"


def fill(doc: str, regions: dict[str, str]) -> str:
    """The doc with each marked region's text replaced; a region the doc lacks is an error, not skipped."""
    for name, text in regions.items():
        pattern = re.compile(rf"(<!-- table:{name} -->).*?(<!-- /table:{name} -->)", re.DOTALL)
        doc, found = pattern.subn(lambda m: m.group(1) + text + m.group(2), doc)
        if found != 1:
            raise ValueError(f"the doc has {found} regions named {name!r}, not one")
    return doc


def built_models(study: Study, variant: Variant, langs: list[str]) -> dict[str, Built]:
    return {lang: built for lang in langs if (built := read_built(study.bundle(lang, variant)))}


def write_table(study: Study, doc: Path) -> None:
    """Fill `doc`'s regions from the models built under `study`'s paths."""
    rules = built_models(study, study.rules(), list(study.task.languages))
    transfer = built_models(study, study.transfer(), study.low_langs())
    test_words = {lang: len(read_lines(study.files(lang)["test"])) for lang in {**rules, **transfer}}
    doc.write_text(fill(doc.read_text(encoding="utf-8"), regions(study.task, rules, transfer, test_words)),
                   encoding="utf-8")
