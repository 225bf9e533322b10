"""What a SIGMORPHON run's flags train, and whether a built model is the one its recipe asks for.

A run records the flags it trained with (flags.json) and a model its members' (manifest `task_scores.runs`):
comparing them with what the recipe now asks, by the settings they give python -m training.train rather than by
their text, is how build.py notices a changed recipe without training anything again, and how a manifest built
before a flag moved between a recipe and a language's own flags, or ran on another device, still counts as built.
"""
from __future__ import annotations

import json
from pathlib import Path

from training.train import parse_args

TRAIN_ON_DEV = ("--train-on-dev", "true", "--save-last", "true")


def trained_on_dev(manifest: dict) -> bool:
    """Whether a built model learned from its dev file too (its dev figures are then training figures)."""
    return bool(manifest.get("data", {}).get("train_on_dev"))


def recorded_flags(run: Path) -> list[str] | None:
    """The flags a finished run recorded (its device among them), None for runs from before they were."""
    return json.loads((run / "flags.json").read_text()) if (run / "flags.json").exists() else None


WHERE_IT_RAN = ("device", "threads")  # how a run was carried out, not what it trained


def parsed(flags: list[str]) -> dict:
    """python -m training.train's settings from a member's recorded flags (a later flag wins); markers such
    as +cmudict_ipa are not flags."""
    return vars(parse_args(["--corpus", "tsv", "--train-tsv", "-", "--dev-tsv", "-", "--out", "-",
                            *(f for f in flags if not f.startswith("+"))]))


def training_settings(flags: list[str]) -> tuple[list[str], dict]:
    """What a member's recorded flags train: its markers (+cmudict_ipa) and its settings, where it ran aside."""
    return (sorted(f for f in flags if f.startswith("+")),
            {k: v for k, v in parsed(flags).items() if k not in WHERE_IT_RAN})


def same_training(recorded: list[str], wanted: list[str]) -> bool:
    """Whether a run's recorded flags train what `wanted` asks: a flag moved from a language's own flags into
    its subtask's recipe changes nothing, nor does the device or the threads it ran on."""
    return recorded == wanted or training_settings(recorded) == training_settings(wanted)


def built_as(manifest: dict, wanted: list[dict]) -> bool:
    """Whether a built model's members are the runs `wanted` lists, with their flags."""
    done = manifest.get("task_scores", {})
    if "runs" in done:
        return len(done["runs"]) == len(wanted) and all(
            d["run"] == w["run"] and same_training(d["flags"], w["flags"]) for d, w in zip(done["runs"], wanted))
    # Built before models recorded their runs: as many members, trained on dev or not as asked, and the
    # settings it records (a lone member's seed among them).
    on_dev = any(TRAIN_ON_DEV[0] in w["flags"] for w in wanted)
    if done.get("members") != len(wanted) or on_dev != trained_on_dev(manifest):
        return False
    if ("+cmudict_hints" in wanted[0]["flags"]) != bool(manifest.get("data", {}).get("source_hints")):
        return False  # a marker is no flag of python -m training.train: _configured_as cannot see it
    return _configured_as(manifest, wanted[0], with_seed=len(wanted) == 1)


def _configured_as(manifest: dict, member: dict, with_seed: bool) -> bool:
    """Whether the model and training settings a manifest records are those the member's flags give, so that
    a changed flag is noticed without `runs`; the seed only `with_seed` (an ensemble's manifest records one
    member's)."""
    args = parsed(member["flags"])
    recorded = {**manifest.get("model_config", {}), **manifest.get("train_config", {})}
    if with_seed and recorded.get("seed") != args["seed"]:
        return False
    return all(args[k] == v for k, v in recorded.items() if k in args and k != "seed")
