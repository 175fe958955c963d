"""Why a job was not grown into GPUs that stayed free (:meth:`AdlPolicy.explain_holds`, for the
``GrowthHeld`` condition): at its ramp cap, no faster at a larger size, a restart that its
remaining work does not repay, or a gain within the change margin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adl.sched.decisions import (
    HELD_AT_CAP,
    HELD_MARGIN,
    HELD_NO_FASTER,
    HELD_RESTART,
    Hold,
)
from adl.sched.placement import Cluster
from adl.sched.policy_job import RoundJob, packed_speedup, placement_speed, placement_type
from adl.sched.policy_moves import PolicyMoves
from adl.sched.types import JobInfo, NodeInfo


def holds_of(
    policy: PolicyMoves,
    jobs: Sequence[JobInfo],
    nodes: Sequence[NodeInfo],
    previous: Mapping[str, list[str]],
    allocation: Mapping[str, list[str]],
) -> dict[str, Hold]:
    """For each job ``allocation`` keeps as it was, below its maximum, while enough GPUs stay
    free to grow it, why ``policy`` valued growing it less than staying (:func:`why_held`)."""
    gpus = {job.name: max(job.gpus_per_replica, 1) for job in jobs}
    # free GPUs per type: a job grows on the type it runs on only
    kind = {n.name: n.gpu_type for n in nodes}
    free: dict[str, int] = {}
    for n in nodes:
        free[n.gpu_type] = free.get(n.gpu_type, 0) + n.gpus
    for k, v in allocation.items():
        for name in v:
            if name in kind:
                free[kind[name]] -= gpus.get(k, 1)
    held = [
        job
        for job in jobs
        if (kept := list(allocation.get(job.name) or []))
        and free.get(kind.get(kept[0], ""), 0) >= gpus[job.name]
        and sorted(kept) == sorted(previous.get(job.name) or [])
        and len(kept) < job.max_replicas
    ]
    if not held:
        return {}
    names = {job.name for job in held}
    cluster = Cluster(nodes)
    out = {}
    for job in policy._prepare(jobs, cluster, previous):
        if job.info.name in names and job.prev is not None:
            gpu_type = placement_type(job, job.prev)
            hold = why_held(policy, job, free[gpu_type], cluster.type_max[gpu_type])
            if hold is not None:
                out[job.info.name] = hold
    return out


def why_held(policy: PolicyMoves, job: RoundJob, free: int, max_gpus: int) -> Hold | None:
    """Why ``job`` (on its previous placement) was not grown into ``free`` GPUs; None when
    growing was worth more (the answer left it for another reason: placement, a tier)."""
    assert job.prev is not None
    k = policy.knobs
    now = job.prev_replicas
    per_node = max(max_gpus // job.gpr, 1)
    speed = placement_speed(job, job.prev)
    s_now = job.table.get(len(job.prev), now, job.cap) * speed
    stay = policy._value(job, len(job.prev), now, False, speed)
    top = min(job.cap, now + free // job.gpr)
    info = job.info
    predicted = 0
    if info.remaining_s is None and info.expected_remaining_s is not None:
        predicted = max(info.predicted_from, 0) if k.use_predicted_remaining else 0
    facts: dict[str, Any] = {
        "job": info.name,
        "replicas": now,
        # speedups in the job's own frame, as it states them (the type it runs on)
        "speedup_now": s_now * job.frame,
        "remaining_s": job.remaining / max(s_now, 1e-9),
        "restart_cost_s": max(info.restart_cost_s, 0.0),
        "counted_s": job.restart_s * k.grow_restarts,
        "margin": k.change_margin,
        "cap": job.cap,
        "profiled": info.max_profiled_replicas,
        "restarts": info.restarts,
        "predicted_from": predicted,
        "predicted_kind": info.kind if predicted else "",
    }
    if top <= now:
        return Hold(target=now + 1, cause=HELD_AT_CAP, speedup_target=s_now * job.frame, **facts)
    counts = range(now + 1, top + 1)
    speedups = {c: packed_speedup(job, per_node, c) * speed for c in counts}
    values = {c: policy._value(job, -(-c // per_node), c, True, speed) for c in counts}
    best = max(counts, key=lambda c: (values[c], -c))
    if values[best] > stay:
        return None
    fastest = max(counts, key=lambda c: (speedups[c], -c))
    if speedups[fastest] <= s_now * (1.0 + 1e-9):
        return Hold(
            target=fastest,
            cause=HELD_NO_FASTER,
            speedup_target=speedups[fastest] * job.frame,
            **facts,
        )
    # without the hysteresis, would the growth have paid for its restart?
    cause = HELD_MARGIN if values[best] * (1.0 + k.change_margin) >= stay else HELD_RESTART
    return Hold(target=best, cause=cause, speedup_target=speedups[best] * job.frame, **facts)
