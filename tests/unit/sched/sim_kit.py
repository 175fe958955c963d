"""Helpers for the simulator tests: a tiny synthetic application whose numbers are known exactly,
and the location of the real traces."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from adl.sched.sim.job import JobMode, SimJob
from adl.sched.sim.traces import AppTrace, default_traces_dir
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import Allocation, JobInfo, NodeInfo

TRACES = default_traces_dir()
WORKLOADS = TRACES / "workloads"


def linear_step(n: float, k: float, m: float) -> float:
    """Step time of the synthetic app (linear, so linear interpolation reproduces it)."""
    return 0.3 + 0.1 * n + 0.02 * k + 0.05 * m


def linear_sync(n: float, k: float) -> float:
    return 0.1 * n + 0.01 * k


#: placements measured in the toy app: (n, k) pairs of the grid the fallback interpolates over
TOY_PLACEMENTS = ("2", "4", "11", "13", "22", "44", "1111", "2222")
#: "13" is measured 0.1 s slower than the linear law and "22" 0.1 s faster (same averages)
TOY_OFFSET = {"13": 0.1, "22": -0.1}
TOY_SCALABILITY = ((8, 8), (8, 32), (16, 16), (16, 64))


def write_app(
    root: Path,
    name: str = "toy",
    *,
    single_step: float = 1.0,
    single_sync: float = 0.0,
    overrides: dict[str, float] | None = None,
    sqr: tuple[float, float] = (1.0, 3.0),
    var: tuple[float, float] = (0.0, 0.0),
    epoch_ends: tuple[Iterable[float], Iterable[float]] = ((45, 100, 150), (50, 110, 160)),
) -> Path:
    """Write an application directory: micro-batches 8 and 16, validated B = 8 and 32.

    Placement ``1`` takes ``single_step`` seconds at m=8 (0.4 s more at m=16, the slope of the
    linear law) with ``single_sync`` of it syncing; other
    placements follow :func:`linear_step` (plus ``TOY_OFFSET``, or ``overrides[placement]``
    seconds at both micro-batches)."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    lines = ["placement,local_bsz,step_time,sync_time", f"1,8,{single_step},{single_sync}"]
    lines.append(f"1,16,{single_step + 0.4},{single_sync}")
    for p in TOY_PLACEMENTS:
        n, k = len(p), sum(int(c) for c in p)
        for m in (8, 16):
            if overrides and p in overrides:
                step = overrides[p]
            else:
                step = linear_step(n, k, m) + TOY_OFFSET.get(p, 0.0)
            lines.append(f"{p},{m},{step},{linear_sync(n, k)}")
    (d / "placements.csv").write_text("\n".join(lines) + "\n")
    rows = ["num_nodes,num_replicas,local_bsz,step_time,sync_time"]
    for n, k in TOY_SCALABILITY:
        for m in (8, 16):
            rows.append(f"{n},{k},{m},{linear_step(n, k, m)},{linear_sync(n, k)}")
    (d / "scalability.csv").write_text("\n".join(rows) + "\n")
    for b, ends, s, v in zip((8, 32), epoch_ends, sqr, var, strict=True):
        ends = list(ends)
        text = ["progress,iteration,metric,grad_sqr,grad_var"]
        for e, p in enumerate(ends):
            text.append(f"{p},{int(p * 8 / b)},{0.1 * e},{s},{v}")
        (d / f"validation-{b}.csv").write_text("\n".join(text) + "\n")
    return d


def write_workload(path: Path, rows: Iterable[tuple[str, int, str, int, int]]) -> Path:
    lines = ["name,time,application,num_replicas,batch_size"]
    lines += [",".join(str(x) for x in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def fixed_job(app: AppTrace, batch: int = 8, replicas: int = 1) -> SimJob:
    spec = WorkloadJob("j", 0, app.name, replicas, batch)
    return SimJob(spec=spec, app=app, mode=JobMode.FIXED, order=0)


def adaptive_job(app: AppTrace) -> SimJob:
    spec = WorkloadJob("a", 0, app.name, 4, 32)
    return SimJob(spec=spec, app=app, mode=JobMode.ADAPTIVE, order=0)


class Recorder:
    """Adaptive-mode policy that gives every job one GPU on its own node and keeps the infos."""

    def __init__(self) -> None:
        self.seen: list[list[JobInfo]] = []

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        self.seen.append(list(jobs))
        return {j.name: [nodes[i].name] for i, j in enumerate(jobs)}
