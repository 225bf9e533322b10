"""Data-parallel training across processes: `torchrun --nproc_per_node=N -m training.train ...`.

torchrun starts N copies of the training script and sets RANK, LOCAL_RANK and
WORLD_SIZE (and where to meet). Each rank holds a full model replica inside
DistributedDataParallel, which averages gradients in backward, so the replicas
stay equal. Run without torchrun, everything here is a no-op (world size 1).

- Batches: every rank builds the same epoch order from the same seed, then takes
  a disjoint shard of it (see `shard`).
- Metrics: the train loss is reduced across ranks; dev decoding is split across
  ranks and the hypotheses gathered, so every rank scores the same and takes the
  same early-stopping decision.
- Files: rank 0 alone writes checkpoints, history and plots.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes files and prints."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> Dist:
    """Join the process group torchrun describes (gloo on CPU, nccl on GPU), or run alone."""
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Dist(device=torch.device("cuda" if use_cuda else "cpu"))
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return Dist(dist.get_rank(), world_size, torch.device(f"cuda:{local_rank}" if use_cuda else "cpu"))


def teardown(d: Dist) -> None:
    """After a run that ended normally on every rank. The barrier first: a rank that destroys its
    process group while another still has gloo work in flight can abort at exit ("terminate called
    without an active exception", seen once in CI's DDP test, rank 0 exit code -6)."""
    if d.enabled and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def shard(batches: list, d: Dist) -> list:
    """This rank's batches: every world_size-th, after dropping the remainder, so all ranks
    take the same number of steps (DDP synchronises every backward) and no batch is seen twice."""
    n = len(batches) // d.world_size * d.world_size
    if n == 0:
        raise SystemExit(f"{len(batches)} batches cannot feed {d.world_size} ranks: lower --batch-size")
    return batches[d.rank:n:d.world_size]


def sum_all(values: list[float], d: Dist) -> list[float]:
    """Element-wise sum over ranks."""
    if not d.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(t)
    return t.tolist()


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every rank when it is true on any: decisions taken by wall clock (time budgets),
    which differs between ranks, still agree."""
    return bool(sum_all([float(flag)], d)[0])


def gather_dict(part: dict, d: Dist) -> dict:
    """The union of every rank's dict, on every rank."""
    if not d.enabled:
        return part
    parts = [None] * d.world_size
    dist.all_gather_object(parts, part)
    return {k: v for p in parts for k, v in p.items()}


def gather(value, d: Dist) -> list:
    """Every rank's value, in rank order, on every rank."""
    if not d.enabled:
        return [value]
    values = [None] * d.world_size
    dist.all_gather_object(values, value)
    return values


def weights_sha256(model: torch.nn.Module) -> str:
    """A digest of the parameters and buffers, in state_dict order: equal across ranks iff the replicas are."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
