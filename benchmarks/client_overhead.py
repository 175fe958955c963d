"""Step-time overhead of AdaptiveDataParallel over plain DistributedDataParallel.

Same model (an MLP of a few million parameters), same data, same optimizer, same number of
processes. Both variants live side by side and are timed in short alternating chunks (ABBA...)
so that changes in the machine's load hit both alike; a repeat's step time per variant is the
median over its chunks, its overhead the median over adjacent chunk pairs of
``100 * (t_adp / t_ddp - 1)``, and the headline ``overhead_pct`` the median over repeats.
A third variant, a second identical DDP (``control_pct``), measures the same way what the
machine's noise alone makes of two equal programs; ``best_chunk_overhead_pct`` compares each
variant's least disturbed chunk, and ``cpu_overhead_pct`` the processes' CPU time.
ADP does everything it does in training: comm-hook capture of the local gradient, batched
norms, noise-estimate update, LR scaling, step profiling. On a GPU machine with one GPU use
``--nproc 1``: ADP then takes its single-replica path (two consecutive steps).

    .venv/bin/python benchmarks/client_overhead.py [--repeats 7] [--json out.json]
    .venv/bin/python benchmarks/client_overhead.py --model cnn --batch 16   # a small CNN
    .venv/bin/python benchmarks/client_overhead.py --stats-interval 4   # statistics every 4 steps
    python benchmarks/client_overhead.py --device cuda --backend nccl --nproc 1   # GPU machine
    .venv/bin/python benchmarks/client_overhead.py --sharded   # FSDP2: ASDP against plain FSDP2

``--sharded`` shards every layer with FSDP2's ``fully_shard``; the baseline is then plain FSDP2
and the adaptive variant AdaptiveShardedDataParallel (noise statistics from the reduce-scatter
buffers and the local shards, one small all-reduce per step), all else as above.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.sharded import AdaptiveShardedDataParallel


def build_model(args: argparse.Namespace) -> nn.Module:
    """The MLP (``--model mlp``: the worst case, ~6 x batch FLOPs per parameter per step) or a
    small VGG-style CNN on 32x32 inputs (``--model cnn``: far more compute per parameter)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    if args.model == "cnn":  # 32 -> 2 pixels over four conv stages, then two dense layers
        channels = [3, args.width // 16, args.width // 8, args.width // 4, args.width // 2]
        for c_in, c_out in itertools.pairwise(channels):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        layers += [nn.Flatten(), nn.Linear(channels[-1] * 4, args.width // 2), nn.ReLU()]
        layers.append(nn.Linear(args.width // 2, 10))
        return nn.Sequential(*layers)
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    layers.append(nn.Linear(args.width, 10))
    return nn.Sequential(*layers)


def input_shape(args: argparse.Namespace) -> tuple[int, ...]:
    return (3, 32, 32) if args.model == "cnn" else (args.width,)


class Variant:
    """One model + optimizer + wrapper, stepped in short timed chunks."""

    def __init__(self, kind: str, args: argparse.Namespace, device: torch.device) -> None:
        self.device = device
        model = build_model(args).to(device)
        if args.sharded:  # every layer with parameters its own FSDP2 unit, then the root
            mesh = init_device_mesh(device.type, (dist.get_world_size(),))
            for layer in model:
                if any(True for _ in layer.parameters()):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        self.wrapped: nn.Module
        if kind == "adp":
            wrapper = AdaptiveShardedDataParallel if args.sharded else AdaptiveDataParallel
            self.wrapped = wrapper(
                model,
                self.opt,
                init_batch_size=args.batch,
                report=False,
                stats_interval=args.stats_interval,
            )
        elif args.sharded:  # plain FSDP2 ("ddp" names the baseline in every mode)
            self.wrapped = model
        elif dist.get_world_size() > 1:  # "ddp", or "control": a second, identical DDP
            self.wrapped = nn.parallel.DistributedDataParallel(model)
        else:
            self.wrapped = model
        gen = torch.Generator(device="cpu").manual_seed(dist.get_rank())
        self.xs = torch.randn(8, args.batch, *input_shape(args), generator=gen).to(device)
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
        kinds = ("ddp", "adp", "control") if args.control else ("ddp", "adp")
        variants = {kind: Variant(kind, args, device) for kind in kinds}
        for v in variants.values():
            for _ in range(args.warmup):
                v.step()
        rows = []
        for _ in range(args.repeats):
            # Short alternating chunks: load changes on the machine hit every variant alike.
            chunks: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
            for c in range(args.chunks):
                order = kinds[c % len(kinds) :] + kinds[: c % len(kinds)]
                for kind in order if c % 2 == 0 else order[::-1]:
                    chunks[kind].append(variants[kind].timed_chunk(args.chunk_steps))
            row = {kind: statistics.median(t[0] for t in ts) for kind, ts in chunks.items()}
            # Chunks of one round ran under nearly the same load: their ratio is the fair
            # comparison. The control (DDP against an identical DDP) shows the noise floor.
            for kind, key in (("adp", ""), ("control", "control_")):
                if kind not in chunks:
                    continue
                pairs = list(zip(chunks[kind], chunks["ddp"], strict=True))
                row[f"{key}ratio"] = statistics.median(a[0] / d[0] for a, d in pairs)
                row[f"{key}cpu_ratio"] = statistics.median(a[1] / d[1] for a, d in pairs)
                # Best chunk against best chunk: the least disturbed runs of each variant.
                row[f"{key}best_ratio"] = min(a[0] for a in chunks[kind]) / min(
                    d[0] for d in chunks["ddp"]
                )
            rows.append(row)
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        # every rank done with the group before any tears it down (gloo aborts at exit else)
        with contextlib.suppress(Exception):
            dist.monitored_barrier(timeout=timedelta(seconds=30))
        dist.destroy_process_group()


def summarize(rows: list[dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    def pct(key: str) -> list[float]:
        return [100.0 * (r[key] - 1.0) for r in rows if key in r]

    overheads, cpu_overheads, best = pct("ratio"), pct("cpu_ratio"), pct("best_ratio")
    control, control_cpu = pct("control_ratio"), pct("control_cpu_ratio")
    model = build_model(args)
    return {
        "overhead_pct": statistics.median(overheads),
        "overhead_pct_per_repeat": overheads,
        "cpu_overhead_pct": statistics.median(cpu_overheads),
        "cpu_overhead_pct_per_repeat": cpu_overheads,
        "best_chunk_overhead_pct": statistics.median(best),
        "best_chunk_overhead_pct_per_repeat": best,
        "control_pct": statistics.median(control) if control else None,
        "control_pct_per_repeat": control,
        "control_cpu_pct": statistics.median(control_cpu) if control_cpu else None,
        "ddp_step_ms_median": 1e3 * statistics.median(r["ddp"] for r in rows),
        "adp_step_ms_median": 1e3 * statistics.median(r["adp"] for r in rows),
        "ddp_step_ms": [1e3 * r["ddp"] for r in rows],
        "adp_step_ms": [1e3 * r["adp"] for r in rows],
        "params": sum(p.numel() for p in model.parameters()),
        "config": {
            k: getattr(args, k)
            for k in (
                "model",
                "nproc",
                "device",
                "backend",
                "batch",
                "width",
                "depth",
                "chunks",
                "chunk_steps",
                "warmup",
                "repeats",
                "threads",
                "control",
                "stats_interval",
                "sharded",
            )
        },
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
    }


def print_table(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"client overhead: {cfg['nproc']} x {cfg['backend']} on {result['device_name']}, "
        f"{cfg['model'].upper()} {result['params'] / 1e6:.2f}M params, "
        f"batch {cfg['batch']}/replica, "
        f"{cfg['repeats']} repeats x {cfg['chunks']} chunks x {cfg['chunk_steps']} steps"
        + (
            f", noise statistics every {cfg['stats_interval']} steps"
            if cfg["stats_interval"] > 1
            else ""
        )
    )
    base, ours = ("FSDP2", "ASDP") if cfg["sharded"] else ("DDP", "ADP")
    head = f"{'repeat':>6} | {base + ' ms/step':>11} | {ours + ' ms/step':>11} | {'overhead %':>10}"
    print(head + f" | {'CPU-time %':>10} | {'best-chunk %':>12} | {'control %':>9}")
    print("-" * 87)
    control = result["control_pct_per_repeat"] or [float("nan")] * len(result["ddp_step_ms"])
    for i, (d, a, o, c, b, n) in enumerate(
        zip(
            result["ddp_step_ms"],
            result["adp_step_ms"],
            result["overhead_pct_per_repeat"],
            result["cpu_overhead_pct_per_repeat"],
            result["best_chunk_overhead_pct_per_repeat"],
            control,
            strict=True,
        )
    ):
        cells = f"{d:>11.2f} | {a:>11.2f} | {o:>10.2f} | {c:>10.2f} | {b:>12.2f} | {n:>9.2f}"
        print(f"{i:>6} | {cells}")
    print("-" * 87)
    median_control = result["control_pct"]
    print(
        f"{'median':>6} | {result['ddp_step_ms_median']:>11.2f} | "
        f"{result['adp_step_ms_median']:>11.2f} | {result['overhead_pct']:>10.2f} | "
        f"{result['cpu_overhead_pct']:>10.2f} | {result['best_chunk_overhead_pct']:>12.2f} | "
        f"{median_control if median_control is not None else float('nan'):>9.2f}"
    )
    print(
        "overhead: median over repeats of the median ratio of adjacent chunks; control: the "
        f"same for {base} against an identical {base} (the measurement's noise floor)"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--batch", type=int, default=128, help="per-replica micro-batch")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--width", type=int, default=1024, help="MLP width; CNN: last width")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=8, help="timed chunks per variant")
    parser.add_argument("--chunk-steps", type=int, default=5, help="steps per timed chunk")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument(
        "--stats-interval",
        type=int,
        default=1,
        help="ADP measures the noise statistics every N optimizer steps (the library's default: 1)",
    )
    parser.add_argument(
        "--no-control",
        dest="control",
        action="store_false",
        help="skip the DDP-against-DDP control (it shows the noise floor of a shared machine)",
    )
    parser.add_argument(
        "--sharded",
        action="store_true",
        help="FSDP2 (fully_shard per layer): AdaptiveShardedDataParallel against plain FSDP2",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    os.environ.pop("ADL_API_URL", None)  # never report from a benchmark
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.start_processes(
            _worker,
            args=(args, os.path.join(tmp, "store"), out),
            nprocs=args.nproc,
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
