"""Step-time overhead of AdaptiveDataParallel over plain DistributedDataParallel.

Same model (an MLP of a few million parameters), same data, same optimizer, same number of
processes. Both variants live side by side and are timed in short alternating chunks (ABBA...)
so that changes in the machine's load hit both alike; a repeat's step time per variant is the
median over its chunks, its overhead the median over adjacent chunk pairs of
``100 * (t_adp / t_ddp - 1)``, and the headline ``overhead_pct`` the median over repeats.
ADP does everything it does in training: comm-hook capture of the local gradient, batched
norms, noise-estimate update, LR scaling, step profiling. On a GPU machine with one GPU use
``--nproc 1``: ADP then takes its single-replica path (two consecutive steps).

    .venv/bin/python benchmarks/client_overhead.py [--repeats 7] [--json out.json]
    python benchmarks/client_overhead.py --device cuda --backend nccl --nproc 1   # GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from adl.client_lib.parallel import AdaptiveDataParallel


def build_model(width: int, depth: int) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


class Variant:
    """One model + optimizer + wrapper, stepped in short timed chunks."""

    def __init__(self, kind: str, args: argparse.Namespace, device: torch.device) -> None:
        self.device = device
        model = build_model(args.width, args.depth).to(device)
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        self.wrapped: nn.Module
        if kind == "adp":
            self.wrapped = AdaptiveDataParallel(
                model, self.opt, init_batch_size=args.batch, report=False
            )
        elif dist.get_world_size() > 1:
            self.wrapped = nn.parallel.DistributedDataParallel(model)
        else:
            self.wrapped = model
        gen = torch.Generator(device="cpu").manual_seed(dist.get_rank())
        self.xs = torch.randn(8, args.batch, args.width, generator=gen).to(device)
        self.ys = torch.randint(0, 10, (8, args.batch), generator=gen).to(device)
        self.i = 0

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        k = self.i % 8
        nn.functional.cross_entropy(self.wrapped(self.xs[k]), self.ys[k]).backward()
        self.opt.step()
        self.i += 1

    def timed_chunk(self, steps: int) -> tuple[float, float]:
        """(wall, this process's CPU) seconds per step over ``steps`` steps.

        Wall time is the slowest rank's. CPU time is a second view that load from other
        processes on the machine disturbs much less (waiting in the all-reduce costs none).
        """
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(steps):
            self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        cpu = time.process_time() - cpu_start
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        elapsed = elapsed.to(self.device)  # nccl reduces device tensors only
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        return float(elapsed.item()) / steps, cpu / steps


def _worker(rank: int, args: argparse.Namespace, store: str, out: str) -> None:
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        args.backend, init_method=f"file://{store}", rank=rank, world_size=args.nproc
    )
    try:
        variants = {kind: Variant(kind, args, device) for kind in ("ddp", "adp")}
        for v in variants.values():
            for _ in range(args.warmup):
                v.step()
        rows = []
        for _ in range(args.repeats):
            # Short alternating chunks: load changes on the machine hit both variants alike.
            chunks: dict[str, list[tuple[float, float]]] = {"ddp": [], "adp": []}
            for c in range(args.chunks):
                order = ("ddp", "adp") if c % 2 == 0 else ("adp", "ddp")
                for kind in order:
                    chunks[kind].append(variants[kind].timed_chunk(args.chunk_steps))
            pairs = list(zip(chunks["adp"], chunks["ddp"], strict=True))
            row = {kind: statistics.median(t[0] for t in ts) for kind, ts in chunks.items()}
            # Adjacent chunks ran under nearly the same load: their ratio is the fair comparison.
            row["ratio"] = statistics.median(a[0] / d[0] for a, d in pairs)
            row["cpu_ratio"] = statistics.median(a[1] / d[1] for a, d in pairs)
            rows.append(row)
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def summarize(rows: list[dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    overheads = [100.0 * (r["ratio"] - 1.0) for r in rows]
    cpu_overheads = [100.0 * (r["cpu_ratio"] - 1.0) for r in rows]
    model = build_model(args.width, args.depth)
    return {
        "overhead_pct": statistics.median(overheads),
        "overhead_pct_per_repeat": overheads,
        "cpu_overhead_pct": statistics.median(cpu_overheads),
        "cpu_overhead_pct_per_repeat": cpu_overheads,
        "ddp_step_ms_median": 1e3 * statistics.median(r["ddp"] for r in rows),
        "adp_step_ms_median": 1e3 * statistics.median(r["adp"] for r in rows),
        "ddp_step_ms": [1e3 * r["ddp"] for r in rows],
        "adp_step_ms": [1e3 * r["adp"] for r in rows],
        "params": sum(p.numel() for p in model.parameters()),
        "config": {
            k: getattr(args, k)
            for k in ("nproc", "device", "backend", "batch", "width", "depth", "chunks",
                      "chunk_steps", "warmup", "repeats", "threads")
        },
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
    }


def print_table(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"client overhead: {cfg['nproc']} x {cfg['backend']} on {result['device_name']}, "
        f"MLP {result['params'] / 1e6:.2f}M params, batch {cfg['batch']}/replica, "
        f"{cfg['repeats']} repeats x {cfg['chunks']} chunks x {cfg['chunk_steps']} steps"
    )
    head = f"{'repeat':>6} | {'DDP ms/step':>11} | {'ADP ms/step':>11} | {'overhead %':>10}"
    print(head + f" | {'CPU-time overhead %':>19}")
    print("-" * 70)
    for i, (d, a, o, c) in enumerate(
        zip(result["ddp_step_ms"], result["adp_step_ms"], result["overhead_pct_per_repeat"],
            result["cpu_overhead_pct_per_repeat"], strict=True)
    ):
        print(f"{i:>6} | {d:>11.2f} | {a:>11.2f} | {o:>10.2f} | {c:>19.2f}")
    print("-" * 70)
    print(
        f"{'median':>6} | {result['ddp_step_ms_median']:>11.2f} | "
        f"{result['adp_step_ms_median']:>11.2f} | {result['overhead_pct']:>10.2f} | "
        f"{result['cpu_overhead_pct']:>19.2f}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--batch", type=int, default=128, help="per-replica micro-batch")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=8, help="timed chunks per variant")
    parser.add_argument("--chunk-steps", type=int, default=5, help="steps per timed chunk")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    os.environ.pop("ADL_API_URL", None)  # never report from a benchmark
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.start_processes(
            _worker, args=(args, os.path.join(tmp, "store"), out), nprocs=args.nproc,
            start_method="spawn",
        )
        rows = json.loads(Path(out).read_text())
    result = summarize(rows, args)
    print_table(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
