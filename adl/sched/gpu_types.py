"""One GPU type per job: the rule every policy's answer obeys on a mixed cluster.

A data-parallel step waits for its slowest replica, so a job spread over a T4 and an A100 runs
at T4 speed on both. adl's own policy places each job on one type by construction
(:mod:`adl.sched.placement`); the baselines (Pollux, Sia, Tiresias, Optimus, FIFO) were
published for uniform clusters and place by GPU count only, so their answers pass through
:func:`one_type_per_job`, as does every answer the controller's round receives (a guard that
costs nothing on a uniform cluster).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.types import Allocation, JobInfo, NodeInfo


def one_type_per_job(
    allocation: Mapping[str, list[str]],
    jobs: Sequence[JobInfo],
    nodes: Sequence[NodeInfo],
    *,
    whole: bool = False,
) -> Allocation:
    """``allocation`` with every job on nodes of one GPU type that it may use.

    A job that mixes types (or sits on a type ``JobInfo.gpu_types`` rules out) is re-placed,
    in submission order, with the same number of replicas on one allowed type with room for
    all of them (where it already was first, then the nodes with the most free GPUs; the type
    where it is fastest, then where most of it already was); failing that it keeps only its
    replicas on the allowed type that holds most of them, if they reach its minimum
    (``whole``: all or nothing, for jobs of a fixed size), else it gets nothing. Node
    capacities are never exceeded: only GPUs nobody holds are taken. Jobs already on one
    allowed type are left as they are. Unknown nodes are left to the caller's checks."""
    kind = {n.name: n.gpu_type for n in nodes}
    out = {k: list(v) for k, v in allocation.items()}
    if len(set(kind.values())) <= 1 and not any(j.gpu_types for j in jobs):
        return out  # a uniform cluster and no restrictions: nothing can mix
    gpr = {j.name: max(j.gpus_per_replica, 1) for j in jobs}
    free = {n.name: n.gpus for n in nodes}
    for name, held in out.items():
        for node in held:
            if node in free:
                free[node] -= gpr.get(name, 1)
    for job in sorted(jobs, key=lambda j: (j.submit_order, j.name)):
        held = out.get(job.name) or []
        if not held or _placed_well(job, held, kind):
            continue
        per = gpr[job.name]
        for node in held:
            if node in free:
                free[node] += per
        placed = _reseat(job, held, per, free, kind)
        if placed is None and not whole:
            placed = _largest_part(job, held, kind)
        placed = placed or []
        for node in placed:
            free[node] -= per
        out[job.name] = placed
    return out


def _placed_well(job: JobInfo, held: list[str], kind: Mapping[str, str]) -> bool:
    """All of ``held`` on known nodes of one type the job may use."""
    types = {kind.get(node) for node in held}
    if len(types) != 1:
        return False
    (only,) = types
    return only is not None and job.may_use(only)


def _reseat(
    job: JobInfo, held: list[str], per: int, free: dict[str, int], kind: Mapping[str, str]
) -> list[str] | None:
    """All of ``job``'s replicas on one allowed type, or None where no type has the room."""
    count = len(held)
    there = {t: sum(1 for node in held if kind.get(node) == t) for t in set(kind.values())}
    for gpu_type in sorted(there, key=lambda t: (-job.speed_on(t), -there[t], t)):
        if not job.may_use(gpu_type):
            continue
        room = {
            n: f // per
            for n, f in free.items()
            if kind[n] == gpu_type and f >= per and (job.nodes is None or n in job.nodes)
        }  # never outside the job's node pool (JobInfo.nodes)
        if sum(room.values()) < count:
            continue
        out: list[str] = []
        mine = [n for n in dict.fromkeys(held) if n in room]  # where it was, first
        rest = sorted((n for n in room if n not in mine), key=lambda n: -room[n])
        for node in (*mine, *rest):
            take = min(room[node], count - len(out))
            out.extend([node] * take)
            if len(out) == count:
                return out
    return None


def _largest_part(job: JobInfo, held: list[str], kind: Mapping[str, str]) -> list[str] | None:
    """The job's replicas on the allowed type that holds most of them, if they reach its
    minimum (at least one)."""
    counts: dict[str, int] = {}
    for node in held:
        t = kind.get(node)
        if t is not None and job.may_use(t):
            counts[t] = counts.get(t, 0) + 1
    if not counts:
        return None
    best = max(sorted(counts), key=lambda t: (counts[t], job.speed_on(t)))
    kept = [node for node in held if kind.get(node) == best]
    return kept if len(kept) >= max(job.min_replicas, 1) else None
