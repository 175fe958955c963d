"""One job alone on an empty cluster: adl's JCT against the best fixed allocation (issue 34).

Replays a single job of ``--app`` (default imagenet, submitted at 0 with its workload-1 batch
size) on 16 nodes x 4 GPUs, first under adl, then under a fixed allocation of N GPUs (packed 4
per node, the job adaptive within it: its batch re-picked by its own model) for each N in
``--fixed``; prints each JCT and adl's ratio to the best fixed one. ``--peer-conditions``
replays in the peer-conditions mode (per-model restart delays, 60 s rounds only).

    .venv/bin/python benchmarks/lone_job.py [--app imagenet] [--fixed 8,16,32,48,64]
        [--peer-conditions] [--policy-knob NAME=VALUE ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from adl.sched.policy_knobs import parse_knobs  # noqa: E402
from adl.sched.sim.policies import make_policy  # noqa: E402
from adl.sched.sim.simulator import SimConfig, peer_conditions, simulate  # noqa: E402
from adl.sched.sim.traces import load_traces  # noqa: E402
from adl.sched.sim.workload import WorkloadJob  # noqa: E402
from adl.sched.types import Allocation, JobInfo, NodeInfo  # noqa: E402


class Fixed:
    """Every job on ``gpus`` GPUs, packed on the first nodes, from its first round on."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        slots = [n.name for n in nodes for _ in range(n.gpus)]
        return {j.name: slots[: min(self.gpus, j.max_replicas)] for j in jobs[:1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--app", default="imagenet")
    ap.add_argument("--batch", type=int, default=3200)
    ap.add_argument("--fixed", default="8,16,32,48,64")
    ap.add_argument("--peer-conditions", action="store_true")
    ap.add_argument("--policy-knob", action="append", metavar="NAME=VALUE")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    knobs = parse_knobs(args.policy_knob or [])
    config = peer_conditions() if args.peer_conditions else SimConfig(rounds_on_events=True)
    fixed_config = peer_conditions() if args.peer_conditions else SimConfig()
    apps = load_traces(None)
    work = [WorkloadJob(f"{args.app}-0", 0, args.app, 1, args.batch)]
    rows: dict[str, dict[str, float]] = {}
    result = simulate(work, make_policy("adl", 0, knobs), traces=apps, config=config)
    (job,) = result.jobs
    gpus = [max(alloc.values(), default=0) for _, alloc in result.timeline]
    rows["adl"] = {
        "jct_s": float(job.jct_s or 0),
        "restarts": job.restarts,
        "max_gpus": max(gpus, default=0),
    }
    for n in (int(x) for x in args.fixed.split(",") if x.strip()):
        (job,) = simulate(work, Fixed(n), traces=apps, config=fixed_config).jobs
        rows[f"fixed {n}"] = {"jct_s": float(job.jct_s or 0), "restarts": job.restarts}
    best = min((r["jct_s"] for k, r in rows.items() if k != "adl"), default=float("nan"))
    mode = "peer conditions" if args.peer_conditions else "today's mode"
    print(f"{args.app} alone on 16 x 4 GPUs ({mode}, knobs {knobs or 'default'})")
    for name, r in rows.items():
        print(f"  {name:<10} JCT {r['jct_s'] / 3600:6.2f} h  restarts {r['restarts']}")
    print(f"adl / best fixed: {rows['adl']['jct_s'] / best:.3f}")
    if args.json is not None:
        doc = {"app": args.app, "mode": mode, "knobs": knobs, "rows": rows, "best_fixed_s": best}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
