"""The SIGMORPHON 2021 task as data: its languages (their subtask, served model and baseline), each subtask's
recipe (the flags of `python -m training.train`, the seeds of its ensemble), a language's own flags, seeds and
prosody memory, each with the reason the table prints beside it, and the pretrained variant's settings. Read
from the TOML files of a recipes folder (recipes/ beside this module: driver.py passes it); a `[... .train]`
table holds training.train's flags by name, in order (`hidden-size = 128` is `--hidden-size 128`; a later
flag wins, as on its command line). Nothing here trains: build.py does."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path


def spelled(value: bool | int | float | str) -> str:
    """A TOML value as a command-line word: true/false, an int or a string as it is, a float in the shorter of
    its two spellings (0.3, 3e-3; Python's own on a tie), as the recipes have always written them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        mantissa, exponent = f"{value:e}".split("e")
        short = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return short if len(short) < len(repr(value)) and float(short) == value else repr(value)
    return str(value)


def argv(flags: dict) -> tuple[str, ...]:
    """A `[... .train]` table as training.train's flags, in the table's order."""
    return tuple(word for name, value in flags.items() for word in (f"--{name}", spelled(value)))


@dataclass(frozen=True)
class Recipe:
    """One subtask's training: the flags of python -m training.train, and the seeds (several: an ensemble)."""
    flags: tuple[str, ...]
    seeds: tuple[int, ...]
    cmudict_ipa: bool = False  # eng_us only: CMUdict in the task's IPA as extra training pairs
    cmudict_hints: bool = False  # eng_us only: each word read with CMUdict's transcription after it, where it has one
    # The dev pairs train too, once every choice was made on dev without them: each member is its run's last
    # epoch (dev picks nothing), and the model's dev figures are training figures (the table says so).
    train_on_dev: bool = False
    decoding: str = ""  # where dev cannot choose (train_on_dev): the decoding it chose before it trained
    decoding_chosen_on: str = "dev"  # what chose `decoding`, in the table's words


@dataclass(frozen=True)
class ProsodyMemory:
    """A language's prosody memory (attnserve/bundle/prosody.py), written into its bundle from the pairs its model
    trained on (training/prosody_memory.py): `mark` on the output's first segment that can carry it, as most
    trained words beginning with the same characters have it, as many as `prefixes` allows, longest first."""
    mark: str
    prefixes: tuple[int, ...]
    segment_pairs: tuple[tuple[str, str], ...]  # bare -> marked, where they differ by more than the mark
    why: str


@dataclass(frozen=True)
class Language:
    """One of the task's languages, by its files' prefix (`fre`: fre_train.tsv)."""
    subtask: str
    model: str  # the served model's name
    baseline: float  # the task baseline's test WER %
    flags: tuple[str, ...] = ()  # its own flags after its subtask's recipe's (the later flag wins)
    why: str = ""  # why it has them
    seeds: tuple[int, ...] = ()  # its own seeds in place of the recipe's (several: one ensemble), each with its flags
    seeds_why: str = ""
    prosody_memory: ProsodyMemory | None = None


@dataclass(frozen=True)
class Subtask:
    recipe: Recipe
    target: float  # macro test WER % to reach
    baseline_macro: float  # the task baseline's macro test WER %


@dataclass(frozen=True)
class Transfer:
    """The low languages again, each first pretrained on the task's other languages (transfer.py)."""
    pretrain_flags: tuple[str, ...]  # the pretrained model's training.train flags
    flags: tuple[str, ...]  # each member's, after the recipe's and --init-from the pretrained checkpoint
    seeds: tuple[int, ...]  # its members' in place of the recipe's
    left_out: tuple[str, ...]  # languages whose train files the pretraining leaves out
    suffix: str  # to the model's name
    outside_data: str  # what else its models learned from, for their manifests
    train_on_dev: bool = False  # whether its members take the recipe's train_on_dev


@dataclass(frozen=True)
class Task:
    languages: dict[str, Language]  # in listing order
    subtasks: dict[str, Subtask]  # in the table's order
    train_order: tuple[str, ...]
    beam: int
    transfer: Transfer

    def recipe_for(self, lang: str) -> Recipe:
        """The language's subtask's recipe, with the language's own seeds where it has them."""
        language = self.languages[lang]
        recipe = self.subtasks[language.subtask].recipe
        return replace(recipe, seeds=language.seeds) if language.seeds else recipe

    def of(self, subtask: str) -> list[str]:
        """The subtask's languages, in listing order."""
        return [lang for lang, language in self.languages.items() if language.subtask == subtask]


def _known(data: dict, keys: set[str], where: str) -> dict:
    """`data`, refused where it has a key the experiment does not read (a misspelt one would be ignored)."""
    if unknown := set(data) - keys:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(keys)}")
    return data


RECIPE_KEYS = {"train", "seeds", "cmudict_ipa", "cmudict_hints", "train_on_dev", "decoding", "decoding_chosen_on"}
LANGUAGE_KEYS = {"model", "baseline", "train", "why", "seeds", "seeds_why", "prosody_memory"}


def _recipe(data: dict) -> Recipe:
    return Recipe(flags=argv(data.get("train", {})), seeds=tuple(data["seeds"]),
                  **{k: data[k] for k in ("cmudict_ipa", "cmudict_hints", "train_on_dev", "decoding",
                                          "decoding_chosen_on") if k in data})


def _language(subtask: str, data: dict) -> Language:
    memory = data.get("prosody_memory")
    return Language(subtask=subtask, model=data["model"], baseline=float(data["baseline"]),
                    flags=argv(data.get("train", {})), why=data.get("why", ""), seeds=tuple(data.get("seeds", ())),
                    seeds_why=data.get("seeds_why", ""),
                    prosody_memory=memory and ProsodyMemory(memory["mark"], tuple(memory["prefixes"]),
                                                            tuple(map(tuple, memory["segment_pairs"])), memory["why"]))


def load(folder: Path) -> Task:
    """The task from a recipes folder: task.toml, <subtask>.toml for each subtask, transfer.toml."""
    def read(name: str) -> dict:
        with (folder / f"{name}.toml").open("rb") as f:
            return tomllib.load(f)

    task = read("task")
    subtasks = {name: read(name) for name in task["table_order"]}
    transfer = read("transfer")
    return Task(languages={lang: _language(name, _known(data, LANGUAGE_KEYS, f"{name}.toml [languages.{lang}]"))
                           for name in task["listing_order"]
                           for lang, data in subtasks[name].get("languages", {}).items()},
                subtasks={name: Subtask(_recipe(_known(data["recipe"], RECIPE_KEYS, f"{name}.toml [recipe]")),
                                        float(data["target"]), float(data["baseline_macro"]))
                          for name, data in subtasks.items()},
                train_order=tuple(task["train_order"]), beam=int(task["beam"]),
                transfer=Transfer(pretrain_flags=argv(transfer["pretrain"]["train"]),
                                  flags=argv(transfer["member"]["train"]), seeds=tuple(transfer["seeds"]),
                                  left_out=tuple(transfer["left_out"]), suffix=transfer["suffix"],
                                  outside_data=transfer["outside_data"], train_on_dev=transfer["train_on_dev"]))
