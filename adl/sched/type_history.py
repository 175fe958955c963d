"""Per-type speed of a job on GPU types it has not run on, estimated from jobs of its kind.

A job's speed on a type is known only once it has run there (``JobInfo.type_speed``: its
measured models compared). Jobs of one kind (application, image or user label) gain alike
from a faster GPU, so the driver keeps a :class:`TypeSpeedHistory` of the ratios between types
that jobs have measured, by kind, and fills a job's unmeasured types with the mean ratio its
kind showed (the issue's "ratio learned from other jobs of the same kind"): a job measured on
a K80 whose kind ran 4x faster on V100s is valued at 4.0 there before it ever ran on one.

Ratios are averaged in log space (a 2x and a 0.5x cancel out). Each job counts once per pair
of types (its latest measurement), jobs kept per kind are bounded, and a job's own
measurements always win over the estimate. Pure: the driver owns the instance.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from adl.sched.types import JobInfo

#: jobs remembered per kind (the most recently observed); older ones are dropped
MAX_JOBS_PER_KIND = 128
#: kinds remembered at most (least recently observed dropped first)
MAX_KINDS = 1024
#: estimates are kept within these bounds, as measured ratios are
MIN_RATIO, MAX_RATIO = 0.01, 100.0


class TypeSpeedHistory:
    """Measured per-type speeds of jobs, by kind; estimates for types a job has not run on."""

    def __init__(self) -> None:
        # kind -> job -> {type: speed relative to that job's own reference}
        self._kinds: OrderedDict[str, OrderedDict[str, dict[str, float]]] = OrderedDict()

    def observe(self, kind: str, job: str, speeds: Mapping[str, float]) -> None:
        """Record ``job``'s measured speeds (``JobInfo.type_speed``); fewer than two types
        say nothing about ratios and are ignored."""
        clean = {t: float(v) for t, v in speeds.items() if t and 0 < v < math.inf}
        if not kind or len(clean) < 2:
            return
        jobs = self._kinds.setdefault(kind, OrderedDict())
        self._kinds.move_to_end(kind)
        jobs[job] = clean
        jobs.move_to_end(job)
        while len(jobs) > MAX_JOBS_PER_KIND:
            jobs.popitem(last=False)
        while len(self._kinds) > MAX_KINDS:
            self._kinds.popitem(last=False)

    def ratio(self, kind: str, have: str, want: str) -> float | None:
        """Mean speed on ``want`` over speed on ``have`` among jobs of ``kind`` that measured
        both, or None when none did."""
        logs = [
            math.log(s[want] / s[have])
            for s in self._kinds.get(kind, {}).values()
            if have in s and want in s
        ]
        if not logs:
            return None
        return min(max(math.exp(sum(logs) / len(logs)), MIN_RATIO), MAX_RATIO)

    def fill(
        self, kind: str, measured: Mapping[str, float], types: list[str] | tuple[str, ...]
    ) -> dict[str, float]:
        """``measured`` with each of ``types`` it lacks estimated from the kind's history:
        relative to the job's current type (the one at 1.0), or, for a job that has measured
        nothing, relative to the first of ``types`` that the kind's jobs compared with the
        others. A type nothing is known about stays absent (the policy counts it as 1.0)."""
        out = dict(measured)
        if measured:
            base = next((t for t, v in measured.items() if v == 1.0), next(iter(measured)))
            scale = measured[base]
        else:
            base = next(
                (t for t in types if any(self.ratio(kind, t, o) for o in types if o != t)), ""
            )
            scale = 1.0
            if base:
                out[base] = 1.0
        if not base:
            return out
        for gpu_type in types:
            if gpu_type in out:
                continue
            r = self.ratio(kind, base, gpu_type)
            if r is not None:
                out[gpu_type] = min(max(r * scale, MIN_RATIO), MAX_RATIO)
        return out


def with_type_estimates(
    history: TypeSpeedHistory,
    infos: Sequence[JobInfo],
    types: Sequence[str],
    *,
    eligible: Callable[[JobInfo], bool] | None = None,
) -> list[JobInfo]:
    """Each job's measured per-type speeds recorded by kind, then the types of ``types`` it has
    not measured filled from what jobs of its kind measured, named in
    ``JobInfo.estimated_types`` so that a decision says it is an estimate. Jobs ``eligible``
    rejects are recorded but not filled. All jobs are recorded before any is filled, so no job
    sees another's estimate as a measurement. Fewer than two named types: nothing to fill."""
    named = tuple(dict.fromkeys(t for t in types if t))
    if len(named) < 2:
        return list(infos)
    for info in infos:
        history.observe(info.kind, info.name, info.type_speed)
    out = []
    for info in infos:
        if eligible is not None and not eligible(info):
            out.append(info)
            continue
        filled = history.fill(info.kind, info.type_speed, named)
        if filled == info.type_speed:
            out.append(info)
            continue
        added = tuple(t for t in filled if t not in info.type_speed)
        out.append(replace(info, type_speed=filled, estimated_types=added))
    return out
