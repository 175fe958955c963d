"""Training worker for the multi-process client tests (run as a script by the tests).

A tiny MLP on synthetic data, with every sample's id recorded per micro-batch, so the tests can
check exactly which samples each rank consumed, and the final parameters written by rank 0.
``--stop-at K --stop-rank R`` makes rank R send itself SIGTERM before its K-th micro-batch.
``--adp`` trains through AdaptiveDataParallel instead of plain DDP.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

import adl
from adl.client_lib.tracked import track


class Indexed(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        gen = torch.Generator().manual_seed(1234)
        self.x = torch.randn(size, 8, generator=gen)
        self.y = self.x @ torch.linspace(-1, 1, 8) + 0.1 * torch.randn(size, generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return i, self.x[i], self.y[i]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--params-out", type=Path)
    p.add_argument("--stop-at", type=int, default=-1)
    p.add_argument("--stop-rank", type=int, default=0)
    p.add_argument("--adp", action="store_true")
    p.add_argument("--autoscale", type=int, default=0, help="max batch size (0: fixed)")
    p.add_argument("--local-max", type=int, default=8, help="largest micro-batch (autoscale)")
    p.add_argument("--adp-b0", type=int, default=0, help="B0 for AdaptiveDataParallel")
    p.add_argument("--eval-each-step", action="store_true", help="a validation pass per step")
    p.add_argument("--exact", action="store_true", help="B0 exactly at any world (exact_batch)")
    args = p.parse_args()

    ctx = adl.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = adl.AdaptiveDataLoader(Indexed(args.size), batch_size=args.batch, shuffle=args.shuffle)
    loader.exact_batch = args.exact
    if args.autoscale:
        loader.autoscale_batch_size(args.autoscale, local_bsz_bounds=(2, args.local_max))
    if args.adp:
        b0 = args.adp_b0 or None
        net: nn.Module = adl.AdaptiveDataParallel(model, opt, init_batch_size=b0, report=False)
    else:
        track("model", model)
        track("optimizer", opt)
        net = nn.parallel.DistributedDataParallel(model) if dist.is_initialized() else model
    metrics = adl.Accumulator("metrics")
    val = adl.AdaptiveDataLoader(Indexed(5), batch_size=4, name="val")

    args.record.mkdir(parents=True, exist_ok=True)
    out = (args.record / f"rank{ctx.rank}-pid{os.getpid()}.jsonl").open("a", buffering=1)
    micro = 0
    for epoch in adl.remaining_epochs_until(args.epochs):
        for ids, x, y in loader:
            if micro == args.stop_at and ctx.rank == args.stop_rank:
                os.kill(os.getpid(), signal.SIGTERM)
            micro += 1
            out.write(
                json.dumps(
                    {
                        "epoch": epoch,
                        "rank": ctx.rank,
                        "world": ctx.world_size,
                        "ids": ids.tolist(),
                        "local_bsz": ctx.local_bsz,
                        "sync": ctx.is_sync_step,
                        "progress": getattr(getattr(net, "progress", None), "progress", None),
                    }
                )
                + "\n"
            )
            sync = ctx.is_sync_step
            if args.eval_each_step:  # inside the step, before its forward
                net.eval()
                with torch.no_grad():
                    for _ids, vx, _vy in val:
                        net(vx)
                net.train()
            if isinstance(net, nn.parallel.DistributedDataParallel) and not sync:
                with net.no_sync():
                    loss = nn.functional.mse_loss(net(x).squeeze(1), y)
                    loss.backward()
            else:
                loss = nn.functional.mse_loss(net(x).squeeze(1), y)
                loss.backward()
            metrics["samples"] += len(ids)
            if sync:
                opt.step()
                opt.zero_grad()
    totals = metrics.sync()
    if ctx.rank == 0 and args.params_out is not None:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        progress = net.progress.progress if isinstance(net, adl.AdaptiveDataParallel) else None
        torch.save(
            {"params": state, "samples": totals["samples"], "progress": progress}, args.params_out
        )
    out.close()


if __name__ == "__main__":
    main()
