"""Where the SIGMORPHON experiment reads and writes, and how a language's models are made: every path is passed
in (driver.py gives the repository's own, tests a folder of their own)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from experiments.sigmorphon.task import Task


@dataclass(frozen=True)
class Paths:
    root: Path  # the repository: training runs in it, and runs record the paths inside it relative to it
    data: Path  # the task's files, <data>/<subtask>/<lang>_<split>.tsv
    runs: Path  # the rule-abiding models' runs, <runs>/<lang>/
    models: Path  # the model repository they are built into, <models>/<name>/1
    transfer_runs: Path  # the pretrained variant's (transfer.py)
    transfer_models: Path
    heldout_runs: Path  # the held-out questions' (heldout.py)

    @classmethod
    def under(cls, root: Path) -> Paths:
        """The repository's layout below `root`."""
        return cls(root=root, data=root / "data" / "sigmorphon-2021", runs=root / "runs" / "sigmorphon",
                   models=root / "models", transfer_runs=root / "runs" / "sigmorphon-transfer",
                   transfer_models=root / "models-transfer", heldout_runs=root / "runs" / "sigmorphon-heldout")

    def pretrained_checkpoint(self) -> Path:
        return self.transfer_runs / "pretrained" / "best.pt"


@dataclass(frozen=True)
class Variant:
    """How a language's models are made: under the subtask's rules (Study.rules: models/, runs/sigmorphon/) or
    otherwise (Study.transfer): where the runs and the bundle go, a suffix to the model's name, and flags added
    to the recipe's."""
    runs: Path
    models: Path
    suffix: str = ""
    flags: tuple[str, ...] = ()
    outside_data: str = ""  # what else its models learned from (the rules allow nothing), for their manifests
    seeds: tuple[int, ...] = ()  # its members' seeds in place of the recipe's, where given
    train_on_dev: bool = True  # whether its members take the recipe's train_on_dev
    rules: bool = True  # under the subtask's rules: the table's target is its, the prosody memory its models'
    command: str = "build"  # the driver's subcommand that builds it

    def run_dir(self, lang: str) -> Path:
        return self.runs / lang


@dataclass(frozen=True)
class Study:
    """The task's data and where its files are: what every step of the experiment is given."""
    task: Task
    paths: Paths

    def files(self, lang: str) -> dict[str, Path]:
        subtask = self.task.languages[lang].subtask
        return {split: self.paths.data / subtask / f"{lang}_{split}.tsv" for split in ("train", "dev", "test")}

    def rules(self) -> Variant:
        return Variant(runs=self.paths.runs, models=self.paths.models)

    def transfer(self) -> Variant:
        t = self.task.transfer
        return Variant(runs=self.paths.transfer_runs, models=self.paths.transfer_models, suffix=t.suffix,
                       flags=("--init-from", str(self.paths.pretrained_checkpoint()), *t.flags),
                       outside_data=t.outside_data, seeds=t.seeds, train_on_dev=t.train_on_dev, rules=False,
                       command="transfer")

    def name(self, lang: str, variant: Variant) -> str:
        return self.task.languages[lang].model + variant.suffix

    def bundle(self, lang: str, variant: Variant) -> Path:
        return variant.models / self.name(lang, variant) / "1"

    def low_langs(self) -> list[str]:
        return self.task.of("low")
