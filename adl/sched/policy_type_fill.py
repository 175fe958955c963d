"""Running jobs moved whole onto a GPU type that the round leaves idle (opt-in:
``Knobs.type_fill``).

The replica-count knapsack counts GPUs, not GPUs per type: a count a job is given costs the
same capacity on whichever type it lands. On a cluster of V100s and K80s every application
but one prefers the V100s, so the knapsack fills its capacity with V100 counts; a long job
pushed off most of its V100s by newly arrived short ones then keeps one or two of them, while
the K80s, which no other job wants, stay idle. And the greedy that hands out the leftover
GPUs grows a running job on its own type only. In the mixed-cluster replays two imagenet
jobs sat on one V100 each beside 32 idle K80s, each of which runs imagenet at a sixth of a
V100's speed (issue 33; ``benchmarks/mixed_account.py`` accounts where each application's
time went).

After the round's allocation is chosen, this pass looks at each type with free GPUs and
the running jobs on other types that may use it, and tries up to ``type_fill`` moves, the job
that gains most by going there whole first (its best packed count that fits, or its last
round's placement where that is on the type and free). After each move the greedy hands the
GPUs the job left to the others (another job grows into them), and the move is kept only if
the objective summed over every job rose; else every job goes back where it was. A move pays
its restart and the change margin like any other, so the pass can only improve on the
allocation it was given. A cluster of one type has no other type to move to: the pass does
nothing there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from adl.sched.placement import Cluster, Placement
from adl.sched.policy_job import RoundJob

#: a move must raise the objective summed over every job by more than this fraction of it
#: (ties and rounding move nothing)
_MIN_GAIN = 1e-9

#: counts tried per job and type, best valued first (a count whose packed placement does not
#: fit in the scattered free GPUs falls to the next)
_TRIES = 3


class _Host(Protocol):
    """What the pass needs of the policy (:class:`adl.sched.policy.AdlPolicy`)."""

    def _utility(self, job: RoundJob, placement: Placement) -> float: ...

    def _commit(self, job: RoundJob, placement: Placement, cluster: Cluster) -> None: ...

    def _fill(self, work: list[RoundJob], cluster: Cluster, fixed: list[bool]) -> None: ...

    def _packed_values(
        self, job: RoundJob, counts: np.ndarray, per_node: int, speed: float
    ) -> np.ndarray: ...


def _movable(job: RoundJob) -> bool:
    """A running job the round may restart: preemptible, past its minimum tenure."""
    return job.replicas > 0 and job.info.preemptible and not job.protected


def _best_on(
    host: _Host, job: RoundJob, cluster: Cluster, gpu_type: str
) -> tuple[float, Placement] | None:
    """The job's most valuable placement on ``gpu_type``'s free GPUs, with its value."""
    gpr = job.gpr
    options: list[Placement] = []
    if job.prev and cluster.type_of(job.prev) == gpu_type and cluster.fits(job.prev, gpr):
        options.append(job.prev)  # back where it ran: no restart
    low = max(job.info.min_replicas, 1)
    room = min(job.cap, cluster.free_of(gpu_type) // gpr)
    if room >= low:
        per_node = max(cluster.type_max[gpu_type] // gpr, 1)
        counts = np.arange(low, room + 1)
        values = host._packed_values(job, counts, per_node, job.speeds[gpu_type])
        prefer: Sequence[int] = list(job.prev or ())
        for at in np.argsort(-values, kind="stable")[:_TRIES].tolist():
            placed = cluster.place(int(counts[at]), gpr, prefer, gpu_type, job.allowed)
            if placed is not None:
                options.append(placed)
                break
    best: tuple[float, Placement] | None = None
    for option in options:
        value = host._utility(job, option)
        if best is None or value > best[0]:
            best = (value, option)
    return best


def _placements_of(work: list[RoundJob]) -> list[Placement]:
    return [dict(job.placement) for job in work]


def _put_back(host: _Host, work: list[RoundJob], cluster: Cluster, saved: list[Placement]) -> None:
    """Put every job of ``work`` back on its ``saved`` placement."""
    for job, placement in zip(work, saved, strict=True):
        if job.placement != placement:
            cluster.release(job.info.name, job.placement, job.gpr)
            # as the solvers leave a job without GPUs (one the trial started has none again)
            job.placement, job.replicas, job.utility = {}, 0, 0.0
    for job, placement in zip(work, saved, strict=True):
        if placement and not job.replicas:
            host._commit(job, placement, cluster)


def move_to_idle_types(host: _Host, work: list[RoundJob], cluster: Cluster, limit: int) -> int:
    """Try up to ``limit`` moves of a running job of ``work`` (placed on ``cluster``) whole
    onto a type with free GPUs, the largest gain to the job itself first; after each, the
    greedy hands out the GPUs the job left (another job grows into them), and the move is
    kept only if the objective summed over every job rose. Returns the moves kept."""
    if limit <= 0 or len(cluster.type_names) < 2:
        return 0
    candidates: list[tuple[float, int, str]] = []
    for gpu_type in cluster.type_names:
        if cluster.free_of(gpu_type) <= 0:
            continue
        for idx, job in enumerate(work):
            if not _movable(job) or gpu_type not in job.speeds:
                continue
            if cluster.type_of(job.placement) == gpu_type:
                continue  # growing on its own type is the greedy's
            found = _best_on(host, job, cluster, gpu_type)
            if found is not None:
                candidates.append((found[0] - job.utility, idx, gpu_type))
    candidates.sort(key=lambda c: (-c[0], work[c[1]].info.submit_order, work[c[1]].info.name))
    fixed = [not job.info.preemptible for job in work]
    kept = 0
    for _, idx, gpu_type in candidates[:limit]:
        job = work[idx]
        if cluster.type_of(job.placement) == gpu_type or cluster.free_of(gpu_type) <= 0:
            continue  # an earlier move changed the picture
        found = _best_on(host, job, cluster, gpu_type)
        if found is None:
            continue
        before = sum(j.utility for j in work)
        saved = _placements_of(work)
        host._commit(job, found[1], cluster)
        host._fill(work, cluster, fixed)
        after = sum(j.utility for j in work)
        if after > before + _MIN_GAIN * max(abs(before), 1e-12):
            kept += 1
        else:
            _put_back(host, work, cluster, saved)
    return kept
