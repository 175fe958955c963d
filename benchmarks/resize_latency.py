"""Resize latency on the local backend: from the allocation change to the first training step
at the new size, for a small CPU model (benchmarks/resize_worker.py, real adl library, gloo).

A daemon runs in this process with a policy the benchmark steers; the job is resized
1 -> 2 -> 1 -> ... replicas ``--resizes`` times. Breakdown per resize:

- stop + checkpoint: allocation change -> the old group's last process exited
- launch: -> the new rank 0 process exists and has imported torch and adl
- rendezvous: -> init_process_group returned (gloo, TCP store)
- restore: -> checkpoint loaded, model wrapped
- first step: -> the first optimizer step at the new size finished

``python benchmarks/resize_latency.py [--resizes 6] [--json PATH]``; headline ``median_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adl.controller.lifecycle import Timing
from adl.local.daemon import Daemon, Settings
from adl.local.processes import GroupPaths, read_result
from adl.local.store import job_key
from adl.models import AdaptiveJobSpec
from adl.sched.types import Allocation, JobInfo, NodeInfo

WORKER = Path(__file__).with_name("resize_worker.py")
STAGES = ("stop_checkpoint", "launch", "rendezvous", "restore", "first_step")
SUBSTAGES = ("stop_signal", "stop_save", "stop_exit")


class SteeredPolicy:
    """Gives the job ``self.replicas`` slots; the benchmark changes it."""

    def __init__(self) -> None:
        self.replicas = 1

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        return {j.name: [nodes[0].name] * self.replicas for j in jobs}


def marks(log: str) -> list[dict[str, Any]]:
    out = []
    for line in log.splitlines():
        if line.startswith('{"t"'):
            out.append(json.loads(line)["t"])
    return out


def wait(cond: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(0.02)


#: What any PyTorch job pays before its first step, whatever the scheduler does: a fresh
#: interpreter importing torch and building an optimizer (which imports torch._dynamo).
FLOOR = (
    "import time; t = time.time(); import torch; from torch import nn; "
    "torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1); print(time.time() - t)"
)


def torch_floor_s(runs: int = 3) -> float:
    """Median seconds of :data:`FLOOR` in a fresh process (the same Python as the workers)."""
    import subprocess

    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", FLOOR], capture_output=True, text=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resizes", type=int, default=6)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--gap-s",
        type=float,
        default=8.0,
        help="seconds the job runs at each size before the next resize",
    )
    parser.add_argument(
        "--no-prewarm", action="store_true", help="the daemon starts every group cold"
    )
    parser.add_argument(
        "--fast-exit",
        action="store_true",
        help="the worker skips interpreter teardown after its checkpoint (os._exit), to measure "
        "what ending the library's stop path that way would save",
    )
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="adl-resize-"))
    policy = SteeredPolicy()
    settings = Settings(home=home, slots=4, round_s=3600, tick_s=0.02, api=True,
                        timing=Timing(backoff_base_s=0.5), prewarm=not args.no_prewarm)  # fmt: skip
    daemon = Daemon(settings, policy_factory=lambda: policy)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    wait(lambda: daemon.store.get_meta("daemon_pid") is not None)
    spec = AdaptiveJobSpec.model_validate(
        {
            "template": {"spec": {"containers": [
                {"name": "t", "command": [sys.executable, str(WORKER), "1000000"],
                 "env": [{"name": "ADL_BENCH_FAST_EXIT", "value": "1" if args.fast_exit else "0"}]}
            ]}},
            "minReplicas": 1,
            "maxReplicas": 4,
            "terminationGracePeriodSeconds": 30,
        }
    )  # fmt: skip
    daemon.store.add_job("default", "bench", spec)
    key = job_key("default", "bench")
    paths = GroupPaths.for_job(home, "default", "bench")
    log = paths.log(0)

    def first_step_of(group: int) -> dict[str, Any] | None:
        text = log.read_text() if log.exists() else ""
        return next(
            (m for m in marks(text) if m["group"] == group and m["event"] == "first_step"), None
        )

    rows: list[dict[str, float]] = []
    try:
        wait(lambda: first_step_of(1) is not None)
        time.sleep(args.gap_s)  # a few steps in, and a checkpoint to come back to
        for i in range(args.resizes):
            old = daemon.jobs[key].status.group
            policy.replicas = 2 if policy.replicas == 1 else 1
            t_change = time.time()
            daemon._round_due = True
            wait(lambda old=old: first_step_of(old + 1) is not None)
            new = old + 1
            all_marks = marks(log.read_text())
            ms = {m["event"]: m for m in all_marks if m["group"] == new}
            old_ms = {m["event"]: m for m in all_marks if m["group"] == old}
            result = read_result(paths.result(old)) or {}
            t_exit = float(result.get("ended", t_change))
            stop_marker = paths.pidfile(old).with_suffix(".stop")
            t_signal = stop_marker.stat().st_mtime if stop_marker.exists() else t_change
            t_saved = old_ms.get("checkpointed", {}).get("time", t_exit)
            t_first = ms["first_step"]["time"]
            row = {
                "resize": float(i + 1),
                "to_replicas": float(policy.replicas),
                "total_s": t_first - t_change,
                "stop_checkpoint": t_exit - t_change,
                "launch": ms["imported"]["time"] - t_exit,
                "rendezvous": ms["rendezvous"]["time"] - ms["imported"]["time"],
                "restore": ms["restored"]["time"] - ms["rendezvous"]["time"],
                "first_step": t_first - ms["restored"]["time"],
                "python_start": ms["process"]["time"] - t_exit,
                # stop_checkpoint split: daemon reaction, worker stop + save, process exit
                "stop_signal": t_signal - t_change,
                "stop_save": t_saved - t_signal,
                "stop_exit": t_exit - t_saved,
                "load_avg_1m": os.getloadavg()[0],
            }
            rows.append(row)
            time.sleep(args.gap_s)
    finally:
        daemon.store.mark_deleted(key)
        wait(lambda: key not in daemon.store.revisions(), timeout=60)
        daemon.stop()
        thread.join(timeout=10)
        shutil.rmtree(home, ignore_errors=True)

    floor = torch_floor_s()
    print(f"{'#':>2} {'to':>3} {'total':>7} " + " ".join(f"{s:>15}" for s in STAGES))
    for r in rows:
        print(
            f"{int(r['resize']):>2} {int(r['to_replicas']):>3} {r['total_s']:>6.2f}s "
            + " ".join(f"{r[s]:>14.2f}s" for s in STAGES)
        )
    med = {s: statistics.median(r[s] for r in rows) for s in STAGES}
    median_total = statistics.median(r["total_s"] for r in rows)
    sub = {s: statistics.median(r[s] for r in rows) for s in SUBSTAGES}
    print(
        "stop_checkpoint median split: "
        + ", ".join(f"{s.removeprefix('stop_')} {sub[s]:.2f}s" for s in SUBSTAGES)
        + f"; python start {statistics.median(r['python_start'] for r in rows):.2f}s"
        + f"; 1-min load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"floor: a fresh python importing torch and building an SGD optimizer takes {floor:.2f}s")
    print(
        f"median {median_total:.2f}s = "
        + " + ".join(f"{s} {med[s]:.2f}s" for s in STAGES)
        + f"  (goal <= 5 s: {'met' if median_total <= 5.0 else 'NOT met'})"
    )
    if args.json is not None:
        payload = {
            "median_s": median_total,
            "median_breakdown_s": med,
            "median_stop_split_s": sub,
            "torch_import_floor_s": floor,
            "cpus": os.cpu_count(),
            "load_avg_1m_end": os.getloadavg()[0],
            "resizes": rows,
            "goal_s": 5.0,
            "fast_exit": args.fast_exit,
            "prewarm": not args.no_prewarm,
            "gap_s": args.gap_s,
        }
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
