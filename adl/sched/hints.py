"""Turn a job's reported hints into what the policy consumes (shared by every backend)."""

from __future__ import annotations

from collections.abc import Mapping

from adl.models import Hints, PerfParamsModel
from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams, PerfParams
from adl.sched.speedup import SpeedupFunction
from adl.sched.types import SpeedupFn, linear_speedup


def goodput_from_hints(hints: Hints) -> GoodputFunction | None:
    """The job's goodput model, or None until it has reported a throughput model."""
    if hints.perf_params is None:
        return None
    perf = PerfParams(**hints.perf_params.model_dump())
    grad = (
        GradParams(hints.grad_params.sqr, hints.grad_params.var)
        if hints.grad_params is not None
        else None
    )
    if grad is None or not grad.usable:  # none yet, or degenerate (sqr 0: from older workers)
        grad = GradParams(sqr=1.0, var=0.0)  # unknown noise: batch size neither helps nor hurts
    b0 = hints.init_batch_size
    max_bsz = hints.max_batch_size or b0
    lo, hi = hints.local_bsz_bounds or (b0, b0)
    bounds = BatchBounds(
        init_batch_size=b0,
        max_batch_size=max_bsz,
        local_bsz_bounds=(lo, hi),
        gradient_accumulation=hints.gradient_accumulation,
    )
    return GoodputFunction(perf, grad, bounds)


def speedup_from_hints(hints: Hints | None) -> SpeedupFn:
    """Speedup function for the policy; linear (optimistic) before the first report."""
    if hints is None:
        return linear_speedup
    fn = goodput_from_hints(hints)
    return linear_speedup if fn is None else SpeedupFunction(fn)


def _base_rate(hints: Hints, speedup: SpeedupFn | None) -> float | None:
    """Scale-invariant steps per second on one replica at the best batch size: the job's own
    model's, or None before it reported one."""
    if hints.perf_params is None:
        return None
    if isinstance(speedup, SpeedupFunction):  # already computed for the round: no second model
        return speedup.base_goodput
    fn = goodput_from_hints(hints)
    return None if fn is None else float(fn.optimize(1, 1).goodput[0])


def remaining_seconds(hints: Hints | None, speedup: SpeedupFn | None = None) -> float | None:
    """Seconds of work left on one replica at its best batch size, when the job declared its
    length; None otherwise (the policy then falls back to length-agnostic decisions)."""
    if hints is None or hints.total_progress is None:
        return None
    left = max(hints.total_progress - hints.progress, 0.0)
    rate = _base_rate(hints, speedup)
    if rate is None:
        return None
    return left / rate if rate > 0 else None


def done_seconds(hints: Hints | None, speedup: SpeedupFn | None = None) -> float | None:
    """Work the job has done, in the unit of ``remaining_seconds`` (seconds on one replica at
    its best batch size): its reported progress over its own model's single-replica goodput.
    0 before it has progressed (whatever it reported), None when it has progressed but has no
    model to convert with. The history of completed jobs (``adl.sched.work_history``) counts
    work in this unit, so that a running job's done work compares with completed totals."""
    if hints is None or hints.progress <= 0:
        return 0.0
    rate = _base_rate(hints, speedup)
    return hints.progress / rate if rate is not None and rate > 0 else None


def min_replicas_from_hints(declared: int, hints: Hints | None) -> int:
    """The fewest replicas the policy may give a running job: the spec's ``minReplicas`` or,
    when larger, the number its sharded model needs to fit in memory (reported in the hints).
    Running it on fewer would only fail with out-of-memory at its first step."""
    need = hints.min_replicas if hints is not None and hints.min_replicas else 0
    return max(int(declared), int(need))


#: bounds of a per-type speed ratio: a model fitted on a few steps must not make one type look
#: a hundred times faster than another
MIN_TYPE_SPEED, MAX_TYPE_SPEED = 0.01, 100.0


def type_speed_from_models(
    hints: Hints | None, type_models: Mapping[str, PerfParamsModel]
) -> dict[str, float]:
    """The job's speed on each GPU type it has measured, relative to the type its current
    model (``hints``) was measured on: the ratio of that model's time for one replica's
    micro-batch to each type's, at the same micro-batch (the job's current one, else its
    initial batch). Compute is what the type changes; sync is compared by the placement, not
    here. The current type is 1.0; types it never measured are absent (the policy counts them
    as 1.0, an estimate); with no current type or model, nothing is known."""
    if hints is None or hints.perf_params is None or not hints.gpu_type:
        return {}
    batch = hints.local_bsz or hints.init_batch_size
    if hints.local_bsz_bounds is not None:
        lo, hi = hints.local_bsz_bounds
        batch = min(max(batch, lo), hi)

    def step_s(perf: PerfParamsModel) -> float:
        return perf.alpha_c + perf.beta_c * batch

    here = step_s(hints.perf_params)
    out = {hints.gpu_type: 1.0}  # the current type is the model itself
    for gpu_type, perf in type_models.items():
        if gpu_type == hints.gpu_type:
            continue
        ratio = here / max(step_s(perf), 1e-12)
        out[gpu_type] = min(max(ratio, MIN_TYPE_SPEED), MAX_TYPE_SPEED)
    return out
