"""Where a training step's time goes: torch.profiler over a few steps of one run's model and batches.

    python -m training.profile_step -- --corpus tsv --train-tsv T --dev-tsv D --out /dev/null [flags]
    python -m experiments.sigmorphon profile --lang arm_e      # a SIGMORPHON recipe's member, one thread

Builds the model `python -m training.train` would train with those flags (one member: each member trains
alone; only their exported graphs step as one, training/stacked.py), takes batches of its train file as
training does, and prints the mean step time and the operators that take it.
What it answers: whether a recipe's hours are arithmetic (the RNNs' forward and backward), which only less
arithmetic or a GPU shortens, or Python and small operators, which a leaner loop would.
"""
from __future__ import annotations

import argparse
import random
import time

import torch

from training.data import Vocab, file_record, load_given
from training.model import ModelConfig, Seq2Seq
from training.train import TrainConfig, collate, learn_from, make_batches, parse_args


def profile(train_argv: list[str], steps: int, warm: int = 5) -> tuple[float, str]:
    """(mean ms a step, the profiler's table) for `steps` steps after `warm` untimed ones of the model and
    batches python -m training.train's `train_argv` (a tsv corpus) trains."""
    args = parse_args(train_argv)
    torch.set_num_threads(args.threads or 1)
    torch.manual_seed(1)
    given = {"train": file_record(args.train_tsv), "dev": file_record(args.dev_tsv)}
    splits = load_given(given, args.src_tokens, args.tgt_tokens, args.source_form)
    src_vocab, tgt_vocab = (Vocab.build(getattr(p, side) for p in splits["train"]) for side in ("src", "tgt"))
    kwargs = {f: getattr(args, f) for f in ModelConfig.__dataclass_fields__ if not f.endswith("vocab_size")}
    model = Seq2Seq(ModelConfig(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), **kwargs))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    ids = [(src_vocab.encode(p.src), tgt_vocab.encode(p.tgt)) for p in splits["train"]]
    batches = make_batches(ids, args.batch_size, random.Random(0))[:warm + 2 * steps]

    tcfg = TrainConfig(**{f: getattr(args, f) for f in TrainConfig.__dataclass_fields__})

    def step(idx):
        learn_from(model, opt, tcfg, *collate([ids[i] for i in idx]))

    model.train()
    for idx in batches[:warm]:
        step(idx)
    started = time.perf_counter()
    for idx in batches[warm:warm + steps]:
        step(idx)
    mean_ms = (time.perf_counter() - started) / steps * 1000
    with torch.profiler.profile() as prof:
        for idx in batches[warm + steps:]:
            step(idx)
    return mean_ms, prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("train_argv", nargs="+", help="after --: python -m training.train's arguments")
    args = p.parse_args(argv)
    mean_ms, table = profile(args.train_argv, args.steps)
    print(f"{mean_ms:.1f} ms a step (mean of {args.steps})\n{table}")


if __name__ == "__main__":
    main()
