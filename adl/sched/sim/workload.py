"""Workload files: one row per job submitted to the simulated cluster."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkloadJob:
    """A job as the workload generator wrote it.

    ``num_replicas`` and ``batch_size`` are hand-tuned static settings, used only by the
    non-adaptive baselines; an adaptive job ignores them.
    """

    name: str
    submit_time: int
    application: str
    num_replicas: int
    batch_size: int


COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def load_workload(path: Path | str) -> list[WorkloadJob]:
    """Parse ``name,time,application,num_replicas,batch_size``, sorted by submission time.

    Raises ``ValueError`` naming the file, line and column of anything it cannot use."""
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        jobs = [_job(row, path, reader.line_num) for row in reader]
    if not jobs:
        raise ValueError(f"{path}: no jobs")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate job names")
    return sorted(jobs, key=lambda j: j.submit_time)  # stable: file order breaks ties


def _job(row: dict[str, str], path: Path | str, line: int) -> WorkloadJob:
    def number(column: str, lowest: float) -> float:
        try:
            value = float(row[column])
        except (TypeError, ValueError):
            raise ValueError(f"{path}:{line}: {column} {row[column]!r} is not a number") from None
        if not value >= lowest:
            raise ValueError(f"{path}:{line}: {column} must be >= {lowest:g}, got {value:g}")
        return value

    return WorkloadJob(
        name=row["name"],
        submit_time=int(number("time", 0)),
        application=row["application"],
        num_replicas=int(number("num_replicas", 1)),
        batch_size=int(number("batch_size", 1)),
    )


def workload_paths(target: Path | str) -> list[Path]:
    """A single CSV, or every ``workload-*.csv`` in a directory (natural order); a traces root
    whose ``workloads/`` folder holds them is accepted too. A name that is no file here but one
    of the published workloads packaged with adl (``workload-1`` .. ``workload-4``, or
    ``workloads`` for all four) means that packaged copy, so a bare install can replay them."""
    p = Path(target)
    if not p.exists() and p.parent == Path("."):
        from adl.sched.sim.traces import PACKAGED_TRACES

        packaged = PACKAGED_TRACES / "workloads"
        if p.name == "workloads":
            p = packaged
        elif (packaged / f"{p.stem}.csv").is_file() and p.suffix in ("", ".csv"):
            p = packaged / f"{p.stem}.csv"
    if p.is_dir() and not any(p.glob("workload-*.csv")) and (p / "workloads").is_dir():
        p = p / "workloads"
    if p.is_dir():
        found = sorted(
            p.glob("workload-*.csv"),
            key=lambda q: (len(q.stem), q.stem),
        )
        if not found:
            raise FileNotFoundError(f"no workload-*.csv in {p}")
        return found
    if not p.exists():
        raise FileNotFoundError(f"workload not found: {p}")
    return [p]
