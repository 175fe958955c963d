"""A model sharded with FSDP2 and made elastic with adl (CPU or GPU, synthetic data).

The script is an ordinary FSDP2 one (``fully_shard`` on each block, then on the root) with the
lines marked ``# adl``: join the job, build the mesh over its replicas, wrap the sharded model in
``AdaptiveShardedDataParallel``, load data through ``AdaptiveDataLoader`` and loop over
``remaining_epochs_until``. On SIGTERM (a resize or a suspend) every rank writes its shards and
the job exits 143; started again, at any number of replicas, each rank loads the parts of the
checkpoint its new shards cover and training resumes at the sample where it stopped.

    python examples/sharded_train.py --epochs 2 --out /tmp/run.json      # one process
    adl submit mlp --min 1 --max 3 -- python examples/sharded_train.py --out /tmp/run.json

Rank 0 prints one JSON line per optimizer step: ``{"step", "epoch", "loss", "lr", "batch_size",
"accum_steps", "progress", "world"}`` (``loss`` is the mean over the step's global batch).
``--out`` writes every step's line (kept across restarts in the checkpoint) and the final
parameters' norm. See docs/sharded-training.md.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.data import TensorDataset

import adl


def synthetic_dataset(size: int, dim: int, classes: int, seed: int = 0) -> TensorDataset:
    """A fixed random teacher (a 2-layer map) labels Gaussian inputs."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(dim, 2 * dim, generator=gen) / math.sqrt(dim)
    out = torch.randn(2 * dim, classes, generator=gen)
    x = torch.randn(size, dim, generator=gen)
    return TensorDataset(x, (torch.tanh(x @ hidden) @ out).argmax(dim=1))


class Block(nn.Module):
    """A pre-norm residual MLP block: the unit FSDP2 shards (and all-gathers) at once."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, dim: int, width: int, depth: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(dim, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class History:
    """Every step's log line, in the checkpoint, so ``--out`` covers the whole run however
    often the job was stopped. Each rank holds the same lines (the losses are all-reduced)."""

    name = "sharded_train.history"

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def state_dict(self) -> dict[str, Any]:
        return {"rows": [dict(row) for row in self.rows]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows = [dict(row) for row in state["rows"]]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--size", type=int, default=2048, help="samples in the synthetic dataset")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--width", type=int, default=65, help="odd: shards are padded at any size")
    p.add_argument("--depth", type=int, default=3, help="blocks, each sharded on its own")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="initial global batch size B0")
    p.add_argument("--max-batch", type=int, default=None, help="let adl grow the batch to this")
    p.add_argument("--lr", type=float, default=3e-3, help="learning rate at B0")
    p.add_argument("--bf16", action="store_true", help="bf16 parameters, fp32 gradient reduction")
    p.add_argument("--min-replicas", type=int, default=None, help="fewest replicas that fit")
    p.add_argument("--out", type=Path, default=None, help="write every step and the end as JSON")
    a = p.parse_args(argv)
    for name in ("epochs", "size", "dim", "width", "depth", "classes", "batch"):
        if not 1 <= getattr(a, name) <= 1 << 20:  # bound what the command line hands over
            p.error(f"--{name} must be in [1, 2**20]")
    return a


def shard(model: Net, mesh: Any, bf16: bool) -> None:
    """FSDP2: each block is one all-gather unit, the root holds the embedding and the head."""
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def full(param: torch.Tensor) -> torch.Tensor:
    """The whole parameter on every rank (collective: all-gathers its shards)."""
    value = param.detach()
    return value.full_tensor() if isinstance(value, DTensor) else value


def main(argv: Sequence[str] | None = None, on_step: Callable[[int], None] | None = None) -> None:
    """Train; ``on_step(step)`` runs on every rank after each optimizer step (tests hook it)."""
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ctx = adl.init_process_group()  # adl: join the job (standalone without ADL_* variables)
    if device.type == "cuda":
        torch.cuda.set_device(ctx.local_rank)
        device = torch.device("cuda", ctx.local_rank)
    mesh = adl.job_mesh(device.type)  # adl: a 1-D mesh over the job's replicas

    torch.manual_seed(0)  # the same initial model on every rank, before sharding
    model = Net(args.dim, args.width, args.depth, args.classes).to(device)
    shard(model, mesh, args.bf16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # after sharding
    # The schedule is written in steps at B0; adl steps it once per scale-invariant step.
    total = args.epochs * math.ceil(args.size / args.batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 4) * max(0.0, 1 - s / total)
    )
    net = adl.AdaptiveShardedDataParallel(  # adl: instead of AdaptiveDataParallel
        model, optimizer, scheduler, min_replicas=args.min_replicas
    )
    loader = adl.AdaptiveDataLoader(  # adl: shards, shuffles and resumes mid-epoch
        synthetic_dataset(args.size, args.dim, args.classes), batch_size=args.batch, shuffle=True
    )
    if args.max_batch is not None:
        loader.autoscale_batch_size(args.max_batch, local_bsz_bounds=(4, 256))  # adl
    history = History()
    ctx.register(history)  # adl: the log lines travel in the checkpoint
    loss_fn = nn.CrossEntropyLoss()
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss x samples, samples

    for epoch in adl.remaining_epochs_until(args.epochs):  # adl: resumes mid-run
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(net(x).float(), y)
            loss.backward()
            totals += torch.stack([loss.detach().double() * len(y), totals.new_tensor(len(y))])
            if not ctx.is_sync_step:  # adl: a micro-batch before the last of a step
                continue
            scheduled = optimizer.param_groups[0]["lr"]  # adl steps the scheduler in step()
            optimizer.step()
            optimizer.zero_grad()
            dist.all_reduce(totals)  # the step's mean loss over every replica's samples
            row = {
                "step": len(history.rows) + 1,
                "epoch": epoch,
                "loss": float(totals[0] / totals[1]),
                "lr": scheduled * net.lr_factors[0],  # what the step applied
                "batch_size": loader.current_batch_size,
                "accum_steps": loader.accumulation_steps,
                "progress": net.progress.progress,
                "world": ctx.world_size,
            }
            totals.zero_()
            history.rows.append(row)
            if ctx.rank == 0:
                print(json.dumps(row), flush=True)
            if on_step is not None:
                on_step(row["step"])

    # the full parameters' norm (an all-gather per parameter: fine for a check at the end)
    norm = math.sqrt(sum(float(full(p).double().square().sum()) for p in model.parameters()))
    if ctx.rank == 0 and args.out is not None:
        args.out.write_text(json.dumps({"history": history.rows, "param_norm": norm}, indent=1))


if __name__ == "__main__":
    main()
