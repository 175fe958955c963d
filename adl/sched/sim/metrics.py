"""Summary figures of a replay (the fields ``adl simulate --json`` writes per workload)."""

from __future__ import annotations

from typing import Any

import numpy as np

from adl.sched.sim.simulator import SimResult

#: issue 34's bound: a job resumed more often than this within an hour flaps
FLAPPING_RESUMES_PER_HOUR = 5


def summarize(result: SimResult) -> dict[str, Any]:
    """avg/p99 JCT, makespan (first submission to last completion), restarts per job, and the
    policy's per-round latency (p50/p95, milliseconds); restarts per job of each application,
    the most resumes of one job within an hour, and how many jobs were resumed more than
    :data:`FLAPPING_RESUMES_PER_HOUR` times within an hour (``jobs_flapping``)."""
    done = [j for j in result.jobs if j.jct_s is not None]
    jcts = np.array([j.jct_s for j in done], dtype=np.float64)
    rounds_ms = np.array(result.round_s, dtype=np.float64) * 1e3
    first_submit = min((j.submit_s for j in result.jobs), default=0)
    last_done = max((j.completion_s or 0 for j in done), default=first_submit)
    return {
        "avg_jct_s": float(jcts.mean()) if len(jcts) else None,
        "p99_jct_s": float(np.percentile(jcts, 99)) if len(jcts) else None,
        "makespan_s": float(last_done - first_submit),
        "restarts_per_job": (
            float(np.mean([j.restarts for j in result.jobs])) if result.jobs else 0.0
        ),
        "round_ms_p50": float(np.percentile(rounds_ms, 50)) if len(rounds_ms) else 0.0,
        "round_ms_p95": float(np.percentile(rounds_ms, 95)) if len(rounds_ms) else 0.0,
        "jobs": len(result.jobs),
        "finished": len(done),
        "rounds": len(result.round_s),
        "restarts_per_job_by_app": restarts_by_app(result),
        "max_resumes_per_hour": max(
            (max_resumes_within(j.resume_times) for j in result.jobs), default=0
        ),
        "jobs_flapping": sum(
            max_resumes_within(j.resume_times) > FLAPPING_RESUMES_PER_HOUR for j in result.jobs
        ),
    }


def restarts_by_app(result: SimResult) -> dict[str, float]:
    """Mean restarts per job of each application (the first start is not a restart)."""
    apps: dict[str, list[int]] = {}
    for job in result.jobs:
        apps.setdefault(job.application, []).append(job.restarts)
    return {app: float(np.mean(v)) for app, v in sorted(apps.items())}


def max_resumes_within(times: tuple[int, ...] | list[int], window_s: int = 3600) -> int:
    """The most resumes (GPUs given again after a preemption) of one job within any window of
    ``window_s`` seconds (issue 34: at most 5 within an hour)."""
    ordered = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(ordered):
        while t - ordered[lo] >= window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def per_job(result: SimResult) -> list[dict[str, Any]]:
    """One record per job, for detailed JSON output."""
    return [
        {
            "name": j.name,
            "application": j.application,
            "submit_s": j.submit_s,
            "completion_s": j.completion_s,
            "jct_s": j.jct_s,
            "restarts": j.restarts,
            "gpu_seconds": j.gpu_seconds,
        }
        for j in result.jobs
    ]


def gpu_hours(result: SimResult) -> dict[str, Any]:
    """Where a replay's GPU-time went, in GPU-hours: held by each application's jobs (their
    attained service, restarts included) and idle. ``makespan x GPUs = held + idle`` exactly,
    so on a cluster busy to the end the makespan follows the GPU-hours the policy spends on
    the same work (docs/results.md, "Where the makespan goes")."""
    done = [j for j in result.jobs if j.completion_s is not None]
    first = min((j.submit_s for j in result.jobs), default=0)
    last = max((j.completion_s or 0 for j in done), default=first)
    held: dict[str, float] = {}
    for job in result.jobs:
        held[job.application] = held.get(job.application, 0.0) + job.gpu_seconds / 3600.0
    total = result.total_gpus * (last - first) / 3600.0
    return {
        "held_by_app": dict(sorted(held.items())),
        "held": sum(held.values()),
        "idle": total - sum(held.values()),
        "makespan_s": float(last - first),
    }
