"""The opt-in terms that the round's preparation lays over each job's weight: the alternative
weights, the quiet time that lets growth be lent for longer, the floors (a starved job's, a
long job's first GPUs at a boosted weight), the efficiency cap and the end phase.

Each takes the policy's knobs and changes the round's jobs (:class:`RoundJob`) in place;
:meth:`adl.sched.policy_prepare.PolicyPreparation._prepare` applies them, in that order, where
their knob is on. The arithmetic of each lives in its own module, named in its docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from adl.sched.policy_efficiency import efficient_count
from adl.sched.policy_endphase import balanced_counts, in_end_phase, shared_weight
from adl.sched.policy_job import RoundJob, packed_speedup
from adl.sched.policy_knobs import Knobs
from adl.sched.policy_longshare import (
    behind_floor,
    efficient_scale,
    floor_count,
    floor_weight,
    long_job_indices,
)
from adl.sched.policy_starvation import boosted_weight, deficit_s
from adl.sched.policy_weights import aging, rank_weights


def apply_alternative_weights(knobs: Knobs, jobs: list[RoundJob], node_gpus: int) -> None:
    """The opt-in weights of :mod:`adl.sched.policy_weights` (measured, not the default)."""
    k = knobs
    if k.rank_power > 0:
        ranks = rank_weights([job.remaining for job in jobs], k.rank_power)
        for job, rank in zip(jobs, ranks, strict=True):
            grown = aging(job.info.age_s, job.remaining, k.fairness)
            job.weight = max(job.info.weight, 0.0) * grown * rank
    elif k.aging_best:
        for job in jobs:
            nodes = -(-job.cap // max(node_gpus // job.gpr, 1))
            best_s = job.remaining / max(job.table.get(nodes, job.cap, job.cap), 1.0)
            grown = aging(job.info.age_s, max(best_s, k.min_remaining_s), k.fairness)
            job.weight = max(job.info.weight, 0.0) * grown / job.remaining**k.srpt_power


def quiet_time_s(knobs: Knobs, jobs: Sequence[RoundJob]) -> float:
    """With ``quiet_growth``: the youngest job's age when every job holds GPUs and it is
    older than ``restart_horizon_s`` (a quiet round), else 0. The youngest age is the time
    since the last arrival still running (a later one may have finished already), taken
    as the Lindy estimate of how long until the next arrival."""
    k = knobs
    if not k.quiet_growth or not jobs or any(job.prev is None for job in jobs):
        return 0.0
    youngest = min(job.info.age_s for job in jobs)
    return youngest if youngest > k.restart_horizon_s else 0.0


def apply_starvation_floor(knobs: Knobs, jobs: list[RoundJob], share: int, node_gpus: int) -> None:
    """``starve_bound_s``: jobs behind an equal share (``share`` GPUs) for longer than the
    bound get a boosted weight on their first GPUs (:mod:`adl.sched.policy_starvation`)."""
    k = knobs
    top = max((job.weight for job in jobs), default=0.0)
    for job in jobs:
        behind = deficit_s(job.info.age_s, job.info.attained_service_s, share)
        boosted = boosted_weight(job.weight, behind, k.starve_bound_s, top)
        if boosted <= job.weight:
            continue
        count = max(min(share // job.gpr, job.cap), 1)
        per_node = max(node_gpus // job.gpr, 1)
        job.floor_weight, job.floor_count = boosted, count
        job.floor_speedup = packed_speedup(job, per_node, count)


def apply_long_floor(knobs: Knobs, jobs: list[RoundJob], total: int, node_gpus: int) -> None:
    """``long_job_mult``: long jobs' first GPUs, up to their efficient scale, at a boosted
    weight (:mod:`adl.sched.policy_longshare`); a starvation floor worth more stays."""
    k = knobs
    longs = long_job_indices([job.remaining for job in jobs], k.long_job_mult)
    if not longs or k.long_floor_weight <= 0:
        return
    top = max(job.weight for job in jobs)
    for idx in longs:
        job = jobs[idx]
        per_node = max(node_gpus // job.gpr, 1)
        packed = partial(packed_speedup, job, per_node)
        scale = efficient_scale(packed, job.cap, per_node, k.long_floor_gain)
        count = floor_count(scale, total, k.long_floor_share, len(longs), job.gpr)
        count = min(count, job.cap)
        boosted = floor_weight(job.weight, top, k.long_floor_weight)
        if count <= 0 or boosted <= job.weight:
            continue
        hold = k.long_floor_hold_s if job.prev_replicas else 0.0
        if k.long_floor_catchup and not behind_floor(
            job.info.attained_service_s, job.info.age_s, count * job.gpr, hold
        ):
            continue
        if job.floor_count and job.floor_weight * job.floor_speedup >= boosted * packed(count):
            continue  # the starvation bound's floor is worth more
        job.floor_weight, job.floor_count = boosted, count
        job.floor_speedup = packed(count)


def apply_efficiency_cap(knobs: Knobs, job: RoundJob, node_gpus: int) -> None:
    """Soft cap at the job's efficient count (:mod:`adl.sched.policy_efficiency`)."""
    packed = partial(packed_speedup, job, max(node_gpus // job.gpr, 1))
    count = efficient_count(packed, job.cap, knobs.efficiency_floor)
    if count < job.cap:
        job.efficient, job.efficient_speedup = count, packed(count)


def apply_end_phase(knobs: Knobs, jobs: list[RoundJob], total: int, node_gpus: int) -> None:
    """``end_phase_mult``: when only long jobs are left, one shared weight and a soft cap
    at the counts that even out their predicted JCTs
    (:mod:`adl.sched.policy_endphase`); their other floors give way to it."""
    holding = [job.prev is not None for job in jobs]
    remaining = [job.remaining for job in jobs]
    ages = [job.info.age_s for job in jobs]
    sizes = [job.remaining + max(job.info.attained_service_s, 0.0) for job in jobs]
    k = knobs
    if not in_end_phase(sizes, holding, ages, k.end_phase_mult, k.restart_horizon_s):
        return
    per_node = [max(node_gpus // job.gpr, 1) for job in jobs]
    packed = [partial(packed_speedup, job, p) for job, p in zip(jobs, per_node, strict=True)]
    caps, gprs = [job.cap for job in jobs], [job.gpr for job in jobs]
    counts = balanced_counts(remaining, packed, caps, per_node, gprs, total, ages)
    if counts is None:
        return
    weights = shared_weight([j.weight for j in jobs], [j.info.weight for j in jobs])
    for job, count, weight, speedup in zip(jobs, counts, weights, packed, strict=True):
        job.weight, job.floor_count = weight, 0
        if count < job.cap:
            job.efficient, job.efficient_speedup = count, speedup(count)
