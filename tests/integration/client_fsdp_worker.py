"""Training worker for the sharded (FSDP2) client tests, run as a script by the tests.

A small MLP, each Linear sharded with ``fully_shard`` and then the root, trained through
AdaptiveShardedDataParallel on the synthetic data of ``client_worker``; ``--replicated`` trains
the same model unsharded through AdaptiveDataParallel (DDP) for comparison. Rank 0 records one
line per optimizer step (loss over the job, noise estimate) and, at the end, the full parameters,
the full optimizer state and the noise statistics; a resumed run also dumps what it restored
(``restored-<world>.pt``), to compare with the checkpoint it came from. ``--save-every N`` saves
in the background every N steps, as periodic checkpoints do, and dumps the full state as it was
at each save (``saved-<steps>.pt``); ``--die-at N`` kills every rank with SIGKILL after step N.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from client_worker import Indexed
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

import adl
from adl.client_lib.scaling import LinearScale

WIDTH = 33  # not a multiple of 2, 3 or 4: every world size shards it unevenly (padding)


class Block(nn.Module):
    """Linear + tanh, optionally recomputed in backward (activation checkpointing)."""

    def __init__(self, n_in: int, n_out: int, recompute: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)
        self.recompute = recompute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and self.training:
            return checkpoint(self._run, x, use_reentrant=False)
        return self._run(x)

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


def build(args: argparse.Namespace) -> nn.Module:
    torch.manual_seed(0)
    rc = args.recompute
    return nn.Sequential(Block(8, WIDTH, rc), Block(WIDTH, WIDTH, rc), nn.Linear(WIDTH, 1))


def shard(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    mesh = adl.job_mesh("cpu")
    kw: dict[str, Any] = {"mesh": mesh}
    if args.bf16:
        kw["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for layer in model:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def full_state(net: nn.Module, model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Full (unsharded) parameters and optimizer state on rank 0 (collective)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    ctx = net.passthrough() if hasattr(net, "passthrough") else _null()
    with ctx:
        msd, osd = get_state_dict(model, opt, options=options)
    return {"params": msd, "optim": osd.get("state", {})}


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _hold_background_writes() -> threading.Event:
    """Make every DCP file write wait until the training has taken a step after the save
    (the event): a background save that did not copy the state first would then write the
    changed parameters, deterministically rather than by the luck of the timing."""
    stepped = threading.Event()
    original = FileSystemWriter.write_data

    def held(self: FileSystemWriter, plan: Any, planner: Any) -> Any:
        stepped.wait(timeout=120)  # bounded: a run that stops stepping still writes
        return original(self, plan, planner)

    FileSystemWriter.write_data = held  # type: ignore[method-assign]
    return stepped


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--stop-at", type=int, default=-1, help="SIGTERM before this optimizer step")
    p.add_argument("--replicated", action="store_true", help="DDP instead of FSDP2")
    p.add_argument("--bf16", action="store_true", help="bf16 parameters, fp32 reduction")
    p.add_argument("--recompute", action="store_true", help="activation checkpointing")
    p.add_argument("--optim", choices=("adam", "sgd"), default="adam")
    p.add_argument("--autoscale", type=int, default=0, help="max batch size (0: fixed)")
    p.add_argument("--local-max", type=int, default=4, help="largest micro-batch (autoscale)")
    p.add_argument("--budget", type=int, default=0, help="memory budget per replica (bytes)")
    p.add_argument("--b0", type=int, default=0)
    p.add_argument("--linear-lr", action="store_true", help="LR x batch scale (no noise term)")
    p.add_argument("--save-every", type=int, default=0, help="background save every N steps")
    p.add_argument("--die-at", type=int, default=-1, help="SIGKILL every rank after this step")
    args = p.parse_args()

    ctx = adl.init_process_group("gloo")
    model = build(args)
    if not args.replicated:
        model = shard(model, args)
    if args.optim == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    common: dict[str, Any] = {"init_batch_size": args.b0 or None, "report": False}
    if args.linear_lr:
        common["scaling_rule"] = LinearScale()
    net: nn.Module
    if args.replicated:
        net = adl.AdaptiveDataParallel(model, opt, **common)
    else:
        budget = {"memory_budget_bytes": args.budget} if args.budget else {}
        net = adl.AdaptiveShardedDataParallel(model, opt, **common, **budget)
    loader = adl.AdaptiveDataLoader(Indexed(args.size), batch_size=args.batch, shuffle=True)
    if args.autoscale:
        loader.autoscale_batch_size(args.autoscale, local_bsz_bounds=(2, args.local_max))
    args.record.mkdir(parents=True, exist_ok=True)
    stepped = _hold_background_writes() if args.save_every else None
    if ctx.restored:  # what the checkpoint gave this world size, for the bit-exact comparison
        restored = full_state(net, model, opt)
        if ctx.rank == 0:
            torch.save(restored, args.record / f"restored-{ctx.world_size}.pt")
    out = (args.record / f"rank{ctx.rank}-pid{os.getpid()}.jsonl").open("a", buffering=1)
    loss_sum = torch.zeros(2)
    for epoch in adl.remaining_epochs_until(args.epochs):
        for _ids, x, y in loader:
            step = net.progress.steps
            if step == args.stop_at and ctx.rank == 0 and ctx.is_sync_step:
                os.kill(os.getpid(), signal.SIGTERM)
            loss = nn.functional.mse_loss(net(x).squeeze(1).float(), y)
            loss.backward()
            loss_sum += torch.tensor([loss.item() * len(y), len(y)])
            if ctx.is_sync_step:
                opt.step()
                opt.zero_grad()
                if stepped is not None:
                    stepped.set()  # the parameters changed in place since the last save
                if dist.is_initialized():
                    dist.all_reduce(loss_sum)
                if hasattr(net, "settle"):  # sharded: the step's statistics are folded lazily
                    net.settle()
                sqr_tr = net.gns.sqr_tr(wait=True)
                row = {
                    "epoch": epoch,
                    "step": step,
                    "world": ctx.world_size,
                    "loss": float(loss_sum[0] / loss_sum[1]),
                    "local_bsz": ctx.local_bsz,
                    "accum": ctx.accum_steps,
                    "sqr_tr": sqr_tr,
                    "min_replicas": net.hints().min_replicas,
                }
                loss_sum.zero_()
                out.write(json.dumps(row) + "\n")
                done = net.progress.steps
                if args.save_every and done % args.save_every == 0:
                    # what the periodic checkpoint does, at known steps: the ranks go on training
                    # (mutating the parameters in place) while DCP writes the shards
                    assert stepped is not None
                    stepped.clear()
                    ctx.save(background=True)
                    saved = full_state(net, model, opt)  # the state as it was at the save
                    if ctx.rank == 0:
                        torch.save(saved, args.record / f"saved-{done}.pt")
                    parts = {"saved": done, "parts": len(ctx.checkpoint_parts)}
                    out.write(json.dumps(parts) + "\n")
                if done == args.die_at:
                    os.kill(os.getpid(), signal.SIGKILL)  # no stop, no final save
    if hasattr(net, "settle"):
        net.settle()
    final = full_state(net, model, opt)
    if ctx.rank == 0 and args.out is not None:
        final["gns"] = net.gns.state_dict()
        final["progress"] = net.progress.progress
        final["sharded"] = isinstance(model, FSDPModule)
        torch.save(final, args.out)
    out.close()


if __name__ == "__main__":
    main()
