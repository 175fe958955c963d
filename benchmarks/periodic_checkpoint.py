"""What periodic checkpoints cost a training loop: step time with and without them.

Trains an MLP through AdaptiveDataLoader and AdaptiveDataParallel in one process for a fixed
number of steps, once with periodic checkpoints off (``ADL_CHECKPOINT_INTERVAL_S=0``) and once
at each interval asked for. It prints the saves, their mean duration and the time spent saving
as a share of the wall time, beside the wall time against the run without them (which varies
by several percent from run to run on a shared machine). The default interval (unset) is 5
minutes, or 50 save durations when a save is slow, so at most 2% of training time goes to
saving; short intervals here make the cost measurable in a short run. Each interval runs with
periodic saves written synchronously and in the background (``--modes``): the pause measured is
the time the training loop waited (the whole write, or only the copy to host memory).
``--sharded`` runs the model sharded with FSDP2 (over a one-process group), so a save goes
through DCP: ``dcp.save`` on every rank, or ``dcp.async_save`` in the background.

    .venv/bin/python benchmarks/periodic_checkpoint.py --json periodic_checkpoint.json
    .venv/bin/python benchmarks/periodic_checkpoint.py --sharded --widths 1024 --intervals 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHILD = "--child"


def child(width: int, steps: int, sharded: bool) -> None:
    """One run (its environment says the interval); prints its figures as JSON."""
    import time

    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.utils.data import TensorDataset

    import adl

    torch.set_num_threads(1)
    ctx = adl.init_process_group()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
    net: nn.Module
    if sharded:  # FSDP2 over a one-process group: the DCP save path, sync or dcp.async_save
        mesh = adl.job_mesh("cpu")
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        net = adl.AdaptiveShardedDataParallel(model, opt, report=False)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        net = adl.AdaptiveDataParallel(model, opt, report=False)
    data = TensorDataset(torch.randn(steps * 8, width))
    loader = adl.AdaptiveDataLoader(data, batch_size=8)
    saves: list[float] = []
    monitor = ctx.preemption
    assert monitor is not None
    ctx.checkpoint_hooks.append(lambda: saves.append(monitor._save_s))
    start = time.perf_counter()
    for (x,) in loader:
        net(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    wall = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"wall_s": wall, "saves": saves, "params": params}))


def run(width: int, steps: int, interval: float, mode: str, sharded: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env.update(
            ADL_CHECKPOINT_DIR=str(Path(tmp) / "ckpt"),
            ADL_CHECKPOINT_INTERVAL_S=str(interval),
            ADL_CHECKPOINT_ASYNC="1" if mode == "background" else "0",
            OMP_NUM_THREADS="1",
        )
        cmd = [sys.executable, __file__, CHILD, str(width), str(steps), str(int(sharded))]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def median_run(
    width: int, steps: int, interval: float, repeats: int, mode: str = "sync", sharded: bool = False
) -> dict[str, Any]:
    """The run of median wall time out of ``repeats`` (wall time varies by several percent from
    run to run on a shared machine; the time spent saving is measured directly)."""
    runs = sorted(
        (run(width, steps, interval, mode, sharded) for _ in range(repeats)),
        key=lambda r: r["wall_s"],
    )
    return runs[len(runs) // 2]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1")
        return
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--widths", default="256,1024", help="MLP widths (2 layers of width^2)")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--intervals", default="2,5", help="seconds between checkpoints")
    p.add_argument("--repeats", type=int, default=3, help="runs per row (the median is shown)")
    p.add_argument(
        "--modes",
        default="sync,background",
        help="how periodic saves are written: sync (the ranks wait for the file) or background "
        "(they wait for a copy in host memory; ADL_CHECKPOINT_ASYNC)",
    )
    p.add_argument(
        "--sharded",
        action="store_true",
        help="an FSDP2 model through AdaptiveShardedDataParallel (DCP saves; in the background "
        "with dcp.async_save) instead of a replicated one",
    )
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    rows = []
    modes = a.modes.split(",")
    if not set(modes) <= {"sync", "background"}:
        p.error(f"--modes: sync and/or background, not {a.modes!r}")
    print(
        "| params | interval s | saves written | wall s (median) | saves | mean pause s "
        "| paused/wall | vs off |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for width in (int(w) for w in a.widths.split(",")):
        base = median_run(width, a.steps, 0.0, a.repeats, sharded=a.sharded)
        print(
            f"| {base['params']:,} | off | - | {base['wall_s']:.2f} | 0 | - | - | - |", flush=True
        )
        rows.append({"width": width, "interval_s": 0.0, **base})
        for interval, mode in itertools.product((float(i) for i in a.intervals.split(",")), modes):
            got = median_run(width, a.steps, interval, a.repeats, mode, a.sharded)
            saves = got["saves"]
            mean = sum(saves) / len(saves) if saves else 0.0
            share = sum(saves) / got["wall_s"]
            overhead = got["wall_s"] / base["wall_s"] - 1.0
            print(
                f"| {got['params']:,} | {interval:g} | {mode} | {got['wall_s']:.2f} | "
                f"{len(saves)} | {mean:.3f} | {share:.1%} | {overhead:+.1%} |",
                flush=True,
            )
            rows.append(
                {"width": width, "interval_s": interval, "mode": mode, "saving_share": share,
                 "overhead": overhead, **got}
            )  # fmt: skip
    if a.json is not None:
        a.json.write_text(json.dumps({"args": {**vars(a), "json": str(a.json)}, "rows": rows}))


if __name__ == "__main__":
    main()
