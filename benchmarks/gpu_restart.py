"""What a restart costs a job on a GPU: the stop (SIGTERM -> checkpoint committed -> process
gone) and the start (process -> torch and adl imported -> checkpoint restored onto the GPU ->
first step), for a replicated model (AdaptiveDataParallel) and an FSDP2-sharded one
(AdaptiveShardedDataParallel, DCP checkpoint), through the real library.

Each variant runs ``--cycles`` times: a worker process trains ``--steps`` steps at one replica
(the standalone path; sharded: the single-process NCCL group ``adl.job_mesh`` makes), gets
SIGTERM, saves through the library's stop path and exits; the next worker restores from that
checkpoint. The first start restores nothing; the others load it. Timestamps come from the
worker (``{"t": {...}}`` lines, as in resize_worker.py) and from this process (the signal, the
exit). Without a GPU the same runs on the CPU (``--device cpu``), to check the script.

    python benchmarks/gpu_restart.py --json restart.json            # GPU machine
    .venv/bin/python benchmarks/gpu_restart.py --device cpu --width 256 --depth 2 --cycles 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T_PROC = time.time()  # the worker's process exists (before its heavy imports)
CHILD = "--child"


def mark(event: str, **extra: object) -> None:
    print(json.dumps({"t": {"event": event, "time": time.time(), **extra}}), flush=True)


def child(mode: str, device_name: str, width: int, depth: int, batch: int) -> None:
    """One worker: train until SIGTERM, checkpoint through the library, exit."""
    mark("process", time=T_PROC)
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    import adl
    from adl.client_lib.preemption import check_preemption

    mark("imported")
    adl.init_process_group()
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        torch.cuda.init()
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(depth):
        blocks += [nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)]
    model = nn.Sequential(*blocks, nn.Linear(width, 10)).to(device)
    mark("model", params=sum(p.numel() for p in model.parameters()))
    net: Any
    if mode == "sharded":
        mesh = adl.job_mesh(device.type)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        net = adl.AdaptiveShardedDataParallel(model, opt, min_replicas=1)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        net = adl.AdaptiveDataParallel(model, opt, init_batch_size=batch, report=False)
    if device.type == "cuda":
        torch.cuda.synchronize()
    mark("restored", resumed_at_step=int(net.progress.steps))
    gen = torch.Generator(device="cpu").manual_seed(1)
    xs = torch.randn(4, batch, width, generator=gen).to(device)
    ys = torch.randint(0, 10, (4, batch), generator=gen).to(device)
    step = 0
    while True:
        try:
            check_preemption()
        except SystemExit:
            mark("checkpointed", steps=step)
            raise
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(xs[step % 4]), ys[step % 4]).backward()
        opt.step()
        step += 1
        if step == 1:
            if device.type == "cuda":
                torch.cuda.synchronize()
            mark("first_step")
        if step % 5 == 0:
            if device.type == "cuda":
                torch.cuda.synchronize()
            mark("steps", steps=step)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cycle(args: argparse.Namespace, mode: str, ckpt: Path, group: int) -> dict[str, Any]:
    """One start, ``--steps`` steps, one stop; the stages' durations in seconds."""
    env = dict(os.environ)
    env.update(
        ADL_CHECKPOINT_DIR=str(ckpt),
        ADL_CHECKPOINT_INTERVAL_S="0",  # only the stop's checkpoint
        ADL_GROUP=str(group),
        ADL_SCHEDULED_SINCE=str(time.time()),
        PYTHONUNBUFFERED="1",
    )
    cmd = [sys.executable, __file__, CHILD, mode, args.device, str(args.width), str(args.depth),
           str(args.batch)]  # fmt: skip
    spawned = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    t: dict[str, float] = {"spawned": spawned}
    info: dict[str, Any] = {}
    signalled = False
    for line in proc.stdout:
        if not line.startswith('{"t"'):
            continue
        rec = json.loads(line)["t"]
        event = rec.pop("event")
        t.setdefault(event, rec.pop("time"))
        info.update({k: v for k, v in rec.items() if k != "steps"})
        if event == "steps" and rec["steps"] >= args.steps and not signalled:
            t["signal"] = time.time()
            proc.send_signal(signal.SIGTERM)
            signalled = True
    code = proc.wait(timeout=600)
    t["exited"] = time.time()
    missing = {"imported", "restored", "first_step", "signal", "checkpointed"} - t.keys()
    if missing:
        raise RuntimeError(f"{mode} cycle {group}: no {sorted(missing)} (exit {code})")
    return {
        "group": group,
        "resumed_at_step": info.get("resumed_at_step"),
        "exit_code": code,
        "params": info.get("params"),
        "import_s": t["imported"] - t["spawned"],
        "init_restore_s": t["restored"] - t["imported"],
        "first_step_s": t["first_step"] - t["restored"],
        "start_s": t["first_step"] - t["spawned"],
        "save_s": t["checkpointed"] - t["signal"],
        "stop_s": t["exited"] - t["signal"],
        "checkpoint_bytes": dir_bytes(ckpt),
    }


def run_mode(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"adl-restart-{mode}-") as tmp:
        for g in range(args.cycles):
            rows.append(cycle(args, mode, Path(tmp) / "ckpt", g))
            print(json.dumps({"mode": mode, **rows[-1]}), flush=True)  # as it comes
    resumed = [r for r in rows if r["resumed_at_step"]] or rows
    keys = ("import_s", "init_restore_s", "first_step_s", "start_s", "save_s", "stop_s")
    return {
        "mode": mode,
        "cycles": rows,
        "median_resumed": {k: statistics.median(r[k] for r in resumed) for k in keys},
        "restart_s": statistics.median(r["stop_s"] + r["start_s"] for r in resumed),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--modes", default="replicated,sharded")
    p.add_argument("--width", type=int, default=4096, help="blocks of width x 2 width x width")
    p.add_argument("--depth", type=int, default=6, help="blocks (each 4 width^2 parameters)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="steps before each SIGTERM")
    p.add_argument("--cycles", type=int, default=3, help="starts per mode (the first is cold)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    result: dict[str, Any] = {
        "config": {k: getattr(args, k) for k in ("device", "width", "depth", "batch", "steps")},
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "modes": [run_mode(args, m) for m in args.modes.split(",")],
    }
    params = result["modes"][0]["cycles"][0]["params"]
    print(f"restart cost on {result['device_name']} (torch {result['torch']}), "
          f"{params / 1e6:.0f}M params, AdamW, median of the resumed starts")  # fmt: skip
    head = ("mode", "ckpt GB", "import", "init+restore", "1st step", "start", "save", "stop")
    print(" | ".join(f"{h:>12}" for h in head))
    for m in result["modes"]:
        med = m["median_resumed"]
        gb = m["cycles"][-1]["checkpoint_bytes"] / 1e9
        cells = [m["mode"], f"{gb:.2f}"] + [
            f"{med[k]:.2f} s"
            for k in ("import_s", "init_restore_s", "first_step_s", "start_s", "save_s", "stop_s")
        ]
        print(" | ".join(f"{c:>12}" for c in cells))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
