"""An ordinary PyTorch training script made elastic with adl (CPU, synthetic data).

Compared with a plain DDP script, the changes are the lines marked ``# adl``: join the job,
load data through ``AdaptiveDataLoader``, wrap the model in ``AdaptiveDataParallel`` and loop
over ``remaining_epochs_until``. The job then picks its batch size and gradient accumulation
for the best goodput, rescales the learning rate (AdaScale), reports hints when run under the
scheduler, and on SIGTERM (or a stop file) checkpoints and exits 143; started again, at any
number of replicas, it resumes at the sample where it stopped.

    python examples/train_synthetic.py --epochs 3                         # one process
    adl launch --nproc 2 --checkpoint-dir /tmp/ckpt -- python examples/train_synthetic.py

Rank 0 prints one JSON line per epoch: ``{"epoch", "loss", "accuracy", "samples",
"batch_size", "local_bsz", "accum_steps", "progress", "world"}`` and ``--out PATH`` writes the
last one (plus the final parameters' checksum) as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import adl


def synthetic_dataset(size: int, dim: int, classes: int, seed: int = 0) -> TensorDataset:
    """A fixed teacher (a random linear map) labels Gaussian inputs, with some label noise."""
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(dim, classes, generator=gen)
    x = torch.randn(size, dim, generator=gen)
    logits = x @ teacher + 0.5 * torch.randn(size, classes, generator=gen)
    return TensorDataset(x, logits.argmax(dim=1))


def build_model(dim: int, classes: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--size", type=int, default=4096, help="samples in the synthetic dataset")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=32, help="initial global batch size B0")
    p.add_argument("--max-batch", type=int, default=256, help="largest global batch allowed")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate at B0")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (CPU)")
    p.add_argument("--out", type=Path, default=None, help="write the final record as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)  # the same initial model on every replica
    ctx = adl.init_process_group()  # adl: gloo on CPU; standalone without the ADL_* variables

    dataset = synthetic_dataset(args.size, args.dim, args.classes)
    loader = adl.AdaptiveDataLoader(dataset, batch_size=args.batch, shuffle=True)  # adl
    loader.autoscale_batch_size(args.max_batch, local_bsz_bounds=(8, 128))  # adl

    model = build_model(args.dim, args.classes, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # The schedule is written for B0; adl steps it once per scale-invariant step. An epoch at
    # B0 is ceil(size / B0) steps (its last one short), and at larger batches progress can pass
    # that by a fraction of a step per epoch: adl then holds the cosine at its floor.
    total = args.epochs * math.ceil(args.size / args.batch)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(total, 1))
    model = adl.AdaptiveDataParallel(model, optimizer, scheduler)  # adl
    stats = adl.Accumulator("stats")  # adl: sums over replicas, kept across restarts
    loss_fn = nn.CrossEntropyLoss()

    record: dict[str, float | int] = {}
    for epoch in adl.remaining_epochs_until(args.epochs):  # adl: resumes mid-run
        for x, y in loader:
            autocast = (
                torch.autocast("cpu", dtype=torch.bfloat16)
                if args.bf16
                else contextlib.nullcontext()
            )
            with autocast:
                out = model(x)
                loss = loss_fn(out.float(), y)
            loss.backward()
            if ctx.is_sync_step:  # adl: the last micro-batch of a step (gradient accumulation)
                optimizer.step()
                optimizer.zero_grad()
            # Per-epoch keys: totals are only ever added to, so a restart mid-epoch keeps them.
            stats[f"loss{epoch}"] += float(loss.detach()) * len(y)
            stats[f"correct{epoch}"] += int((out.argmax(dim=1) == y).sum())
            stats[f"samples{epoch}"] += len(y)
            stats["samples"] += len(y)
        with stats.synchronized():
            n = max(stats[f"samples{epoch}"], 1.0)
            record = {
                "epoch": epoch,
                "loss": stats[f"loss{epoch}"] / n,
                "accuracy": stats[f"correct{epoch}"] / n,
                "samples": int(stats["samples"]),
                "batch_size": loader.current_batch_size,
                "local_bsz": loader.current_local_bsz,
                "accum_steps": loader.accumulation_steps,
                "progress": model.progress.progress,
                "world": ctx.world_size,
            }
        if ctx.rank == 0:
            print(json.dumps(record), flush=True)
    if ctx.rank == 0 and args.out is not None and record:
        checksum = float(sum(p.double().sum() for p in model.parameters()))
        args.out.write_text(json.dumps({**record, "param_checksum": checksum}))


if __name__ == "__main__":
    main()
