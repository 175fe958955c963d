"""A small elastic training job for ``adl demo`` (synthetic data, CPU friendly).

Three flavours with different scaling behaviour, chosen with ``--kind``:

- ``compute``: a wide MLP on noisy labels. Much compute per sample, few parameters to
  all-reduce, noisy gradients: more replicas (and a larger batch) pay off.
- ``sync``: a large linear layer on a tiny batch. Little compute, many parameters to all-reduce:
  extra replicas mostly add communication, so it scales poorly.
- ``small``: a short logistic regression.

The job trains until it has done ``--steps`` scale-invariant steps (so its length does not depend
on how many replicas the scheduler gives it), checkpoints and exits 143 when asked to stop, and
resumes from the last checkpoint at whatever size it is restarted with. Rank 0 prints one JSON
line per logging step: ``{"demo": {"step", "progress", "loss", "world", "group"}}``.

Run alone: ``python examples/demo_train.py --kind compute --steps 50``; under adl:
``adl submit demo -- python examples/demo_train.py --kind compute``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import adl
from adl.client_lib.env import shutdown
from adl.client_lib.preemption import check_preemption
from adl.sched.goodput import BatchBounds

KINDS: dict[str, dict[str, Any]] = {
    "compute": {"dim": 64, "hidden": 384, "depth": 3, "out": 10, "bsz": 32, "noise": 0.3},
    "sync": {"dim": 1024, "hidden": 1024, "depth": 1, "out": 1024, "bsz": 4, "noise": 0.05},
    "small": {"dim": 16, "hidden": 0, "depth": 0, "out": 2, "bsz": 16, "noise": 0.2},
}


def build_model(cfg: dict[str, Any]) -> nn.Module:
    if not cfg["hidden"]:
        return nn.Linear(cfg["dim"], cfg["out"])
    layers: list[nn.Module] = []
    width = cfg["dim"]
    for _ in range(cfg["depth"]):
        layers += [nn.Linear(width, cfg["hidden"]), nn.ReLU()]
        width = cfg["hidden"]
    layers.append(nn.Linear(width, cfg["out"]))
    return nn.Sequential(*layers)


class Teacher:
    """The synthetic task: a fixed random map (same on every rank) plus label noise."""

    def __init__(self, cfg: dict[str, Any], seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.cfg = cfg
        self.w = torch.randn(cfg["dim"], cfg["out"], generator=g) / cfg["dim"] ** 0.5
        self.classify = cfg["out"] <= 10

    def batch(self, step: int, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1_000_003 * step + rank)
        x = torch.randn(n, self.cfg["dim"], generator=g)
        y = x @ self.w
        if self.classify:
            y = y + self.cfg["noise"] * torch.randn(y.shape, generator=g)
            return x, y.argmax(dim=1)
        return x, y + self.cfg["noise"] * torch.randn(y.shape, generator=g)


class Counter:
    """The loop's own position, checkpointed with the model."""

    name = "demo_loop"

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


def finished(local_done: bool, world: int) -> bool:
    """All ranks leave the loop at the same step (their progress may differ in the last bits)."""
    if world == 1:
        return local_done
    flag = torch.tensor([1.0 if local_done else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=sorted(KINDS), default="compute")
    parser.add_argument("--steps", type=float, default=200, help="scale-invariant steps")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--max-scale", type=int, default=8, help="largest batch / B0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds per step")
    parser.add_argument(
        "--declare-length", action="store_true", help="report --steps as the run's total work"
    )
    args = parser.parse_args()
    cfg = KINDS[args.kind]

    torch.manual_seed(args.seed)
    ctx = adl.init_process_group("gloo")
    model = build_model(cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    adp = adl.AdaptiveDataParallel(model, optimizer, init_batch_size=cfg["bsz"])
    # The loop keeps a fixed per-replica batch, so the global batch grows with the replicas:
    # declare that range to the scheduler (AdaptiveDataLoader does this for loader-driven jobs).
    ctx.batch_bounds = BatchBounds(
        init_batch_size=cfg["bsz"],
        max_batch_size=cfg["bsz"] * args.max_scale,
        local_bsz_bounds=(cfg["bsz"], cfg["bsz"]),
        gradient_accumulation=False,
    )
    if args.declare_length:
        # one "epoch" of --steps batches at B0: the scheduler then knows how much work is left
        # (it resizes a short job less, since a restart would not pay back)
        ctx.total_epochs, ctx.dataset_size = 1, int(args.steps * cfg["bsz"])
        ctx.init_batch_size = ctx.init_batch_size or cfg["bsz"]
    loop = Counter()
    ctx.register(loop)
    teacher = Teacher(cfg, args.seed)
    loss_fn: nn.Module = nn.CrossEntropyLoss() if teacher.classify else nn.MSELoss()
    rank, world = ctx.rank, ctx.world_size
    group = int(os.environ.get("ADL_GROUP", "0"))
    if rank == 0:
        print(json.dumps({"demo": {"event": "start", "step": loop.step, "world": world,
                                   "group": group, "time": time.time()}}), flush=True)  # fmt: skip
    while not finished(float(adp.progress.progress) >= args.steps, world):
        check_preemption()
        x, y = teacher.batch(loop.step, rank, cfg["bsz"])
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(adp(x), y)
        loss.backward()
        optimizer.step()
        loop.step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if rank == 0 and (loop.step % args.log_every == 0 or loop.step == 1):
            record = {
                "step": loop.step,
                "progress": round(float(adp.progress.progress), 2),
                "loss": round(float(loss.detach()), 5),
                "world": world,
                "group": group,
                "time": time.time(),
            }
            print(json.dumps({"demo": record}), flush=True)
    # A final checkpoint: a stop that lands while the process exits resumes here and ends at
    # once, instead of redoing the steps since the last resize.
    ctx.save()
    adp.close()
    if rank == 0:
        print(json.dumps({"demo": {"event": "done", "step": loop.step}}), flush=True)
    shutdown()


if __name__ == "__main__":
    main()
