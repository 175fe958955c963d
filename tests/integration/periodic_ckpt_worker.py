"""Training worker for the periodic-checkpoint test (run as a script, 2 ranks).

Records, per rank and process, every optimizer step (its global number, epoch and sample ids)
and, on rank 0, every periodic checkpoint (the step it holds and when it was taken). With
``--die-at N`` rank 1 kills itself with SIGKILL right after step N: a hard failure, with no
chance to checkpoint. ``--step-s`` paces the steps (so a 1 s interval spans several of them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from client_worker import Indexed  # the script's folder is on sys.path
from torch import nn

import adl


class Steps:
    """The global optimizer-step count, kept in the checkpoint."""

    name = "test.steps"

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = int(state["n"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=400)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--step-s", type=float, default=0.02)
    args = p.parse_args()

    ctx = adl.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    net = adl.AdaptiveDataParallel(model, opt, report=False)
    loader = adl.AdaptiveDataLoader(Indexed(args.size), batch_size=args.batch, shuffle=True)
    steps = Steps()
    ctx.register(steps)
    samples = adl.Accumulator("samples")
    args.record.mkdir(parents=True, exist_ok=True)
    out = (args.record / f"rank{ctx.rank}-pid{os.getpid()}.jsonl").open("a", buffering=1)

    def saved() -> None:
        if ctx.rank == 0:
            out.write(json.dumps({"ckpt": steps.n, "t": time.time()}) + "\n")

    ctx.checkpoint_hooks.append(saved)
    for epoch in adl.remaining_epochs_until(args.epochs):
        for ids, x, y in loader:
            nn.functional.mse_loss(net(x).squeeze(1), y).backward()
            opt.step()
            opt.zero_grad()
            steps.n += 1
            samples[f"e{epoch}"] += len(ids)
            row = {"step": steps.n, "epoch": epoch, "ids": ids.tolist(), "t": time.time()}
            out.write(json.dumps(row) + "\n")
            if ctx.rank == 1 and steps.n == args.die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(args.step_s)  # allowed: pacing the steps, not waiting for anything
    with samples.synchronized():
        totals = {k: samples[k] for k in (f"e{e}" for e in range(args.epochs))}
    if ctx.rank == 0:
        out.write(json.dumps({"done": steps.n, "samples": totals}) + "\n")
    out.close()


if __name__ == "__main__":
    main()
