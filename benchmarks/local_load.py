"""Load on the local backend: many short jobs submitted at once to one daemon.

The daemon (``adl.local.daemon``, the real one, with ``AdlPolicy``) runs in this process so the
benchmark can read its scheduling-round log and time its ticks; jobs are submitted through
``LocalBackend`` exactly as ``adl submit`` does, all at once, and run a torch-free worker that
sleeps a little, writes a checkpoint file and exits 0. Reports the total time from the first
submission to the last job finished, the scheduling round latency (policy time, p50/p95/max),
the daemon's tick time (observe + lifecycle + actions for every job, p50/p95/max) and how many
jobs ended in each phase.

    .venv/bin/python benchmarks/local_load.py [--jobs 200] [--slots 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from adl.controller.lifecycle import Timing
from adl.local.client import LocalBackend
from adl.local.daemon import Daemon, Settings
from adl.models import AdaptiveJobSpec, Phase

#: The worker: ``--work-s`` seconds of "training", a checkpoint, exit 0 (no torch, no adl).
WORKER = (
    "import json, os, sys, time; time.sleep(float(sys.argv[1])); "
    "d = os.environ.get('ADL_CHECKPOINT_DIR', '.'); "
    "open(os.path.join(d, 'state.json'), 'w').write(json.dumps({'done': True})); "
    "print('done', os.environ.get('ADL_JOB'), flush=True)"
)


class TimedDaemon(Daemon):
    """The daemon with each tick's wall time recorded."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.ticks_s: list[float] = []

    def tick(self) -> None:
        t0 = time.perf_counter()
        super().tick()
        self.ticks_s.append(time.perf_counter() - t0)


def quantiles(xs: list[float]) -> dict[str, float]:
    """p50, p95 and max of ``xs`` (zeros when empty)."""
    if not xs:
        return {"count": 0, "p50_s": 0.0, "p95_s": 0.0, "max_s": 0.0}
    s = sorted(xs)
    return {
        "count": len(s),
        "p50_s": statistics.median(s),
        "p95_s": s[min(len(s) - 1, round(0.95 * (len(s) - 1)))],
        "max_s": s[-1],
    }


def job_spec(work_s: float, max_replicas: int) -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate(
        {
            "template": {"spec": {"containers": [
                {"name": "t", "command": [sys.executable, "-c", WORKER, str(work_s)]}
            ]}},
            "minReplicas": 1,
            "maxReplicas": max_replicas,
            "maxRestarts": 0,
            "terminationGracePeriodSeconds": 5,
        }
    )  # fmt: skip


def run(
    jobs: int, slots: int, work_s: float, max_replicas: int, round_s: float, timeout_s: float
) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="adl-load-"))
    settings = Settings(home=home, slots=slots, round_s=round_s, tick_s=0.2, api=True,
                        timing=Timing())  # fmt: skip
    daemon = TimedDaemon(settings)
    thread = threading.Thread(target=daemon.run, name="adl-daemon", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while daemon.store.get_meta("daemon_pid") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    backend = LocalBackend(home, autostart=False)
    spec = job_spec(work_s, max_replicas)
    try:
        t0 = time.monotonic()
        for i in range(jobs):
            backend.submit(f"load-{i:04d}", "default", spec)
        submitted_s = time.monotonic() - t0
        phases: dict[str, int] = {}
        timed_out = False
        while True:
            views = backend.list("default")
            phases = {}
            for v in views:
                phases[v.status.phase.value] = phases.get(v.status.phase.value, 0) + 1
            if all(v.status.phase.finished for v in views):
                break
            if time.monotonic() - t0 > timeout_s:
                timed_out = True
                break
            time.sleep(0.2)
        total_s = time.monotonic() - t0
        groups = daemon.store.groups()
        restarts = sum(v.status.restart_count() for v in views)
    finally:
        backend.close()
        daemon.stop()
        thread.join(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
    return {
        "jobs": jobs,
        "slots": slots,
        "work_s": work_s,
        "max_replicas": max_replicas,
        "submit_s": submitted_s,
        "total_s": total_s,
        "timed_out": timed_out,
        "phases": phases,
        "all_succeeded": phases.get(Phase.SUCCEEDED.value, 0) == jobs,
        "groups_launched": len(groups),
        "restarts": restarts,
        "round": quantiles(list(daemon.rounds.durations_s)),
        "tick": quantiles(daemon.ticks_s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--slots", type=int, default=8, help="CPU slots of the daemon")
    parser.add_argument("--work-s", type=float, default=0.5, help="seconds each job runs")
    parser.add_argument("--max-replicas", type=int, default=1)
    parser.add_argument("--round-s", type=float, default=5.0, help="periodic round interval")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    out = run(args.jobs, args.slots, args.work_s, args.max_replicas, args.round_s, args.timeout)
    r, t = out["round"], out["tick"]
    heads: list[tuple[str, int]] = [("jobs", 6), ("slots", 5), ("total", 8), ("submit", 7)]
    heads += [("rounds", 6), ("round p50", 10), ("round p95", 10), ("round max", 10)]
    heads += [("tick p50", 9), ("tick p95", 9)]
    print(" ".join(f"{h:>{w}}" for h, w in heads))
    print(
        f"{out['jobs']:>6} {out['slots']:>5} {out['total_s']:>7.1f}s {out['submit_s']:>6.2f}s "
        f"{r['count']:>6} {r['p50_s'] * 1e3:>8.1f}ms {r['p95_s'] * 1e3:>8.1f}ms "
        f"{r['max_s'] * 1e3:>8.1f}ms {t['p50_s'] * 1e3:>7.1f}ms {t['p95_s'] * 1e3:>7.1f}ms"
    )
    print(
        f"phases: {out['phases']}; groups launched {out['groups_launched']}; "
        f"restarts {out['restarts']}; all succeeded: {out['all_succeeded']}"
        + ("; TIMED OUT" if out["timed_out"] else "")
    )
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return 0 if out["all_succeeded"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
