"""Provable lower bounds under a deadline: the shortest makespan any schedule can reach, and the
lowest average JCT of any schedule that finishes every job by a given time.

Both reuse the relaxation of :mod:`adl.sched.sim.bound` (true rates and lengths, free
preemption and resizing every second), with every job's slots ending at the deadline ``H``, no
work left past it, and ``C_j <= H``. A schedule that finishes every job by ``M`` is a feasible
point of that LP for ``H = ceil(M / slot) * slot`` (its slot shares and work shares are the
same as in the unbounded LP, and none of its work falls after ``H``). So:

- if the LP is infeasible at ``H``, every schedule's makespan exceeds ``H``: the makespan bound
  is the largest infeasible ``H`` on the slot grid (or the latest job alone on the cluster,
  if that is later);
- the LP's optimum at ``H`` is at most the average JCT of every schedule that finishes by ``H``
  (the answer to "how good can the mean be if the makespan may not grow?").

Why this matters for issue 22's combined target: the average JCT of a policy can only beat
another's while its makespan stays no worse if the deadline LP leaves room below it; and a
makespan close to the makespan bound leaves the schedule almost no GPU-time to spend on
anything but efficient allocations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adl.sched.sim.bound import ClusterShape, LPFailed, prepare_jobs, solve_relaxation
from adl.sched.sim.traces import AppTrace
from adl.sched.sim.workload import WorkloadJob


@dataclass(frozen=True)
class MakespanBound:
    makespan_s: float  # no schedule finishes every job sooner after the first submission
    alone_s: float  # the simpler bound: the latest job alone on the cluster from submission
    slot_s: int
    solves: int
    unsettled: int  # solves HiGHS could not settle (counted feasible: the bound stays sound)
    solve_s: float


def makespan_bound(
    workload: Sequence[WorkloadJob],
    cluster: ClusterShape | None = None,
    slot_s: int = 600,
    *,
    traces: Mapping[str, AppTrace] | None = None,
    solve_limit_s: float = 180.0,
) -> MakespanBound:
    """The largest deadline on the slot grid that the relaxation cannot meet (bisection over
    the grid; feasibility only grows with the deadline). A solve that HiGHS cannot settle
    within ``solve_limit_s`` counts as feasible (``unsettled``): the bound stays sound, only
    lower. Near the true answer the feasibility LPs are the slowest (minutes on 160 jobs)."""
    cluster = cluster or ClusterShape()
    jobs = prepare_jobs(workload, cluster, traces, slot_s)
    t0 = time.perf_counter()
    alone = max(j.earliest_s for j in jobs)
    first = min(j.submit_s for j in jobs)
    solves = unsettled = 0

    def feasible(k: int) -> bool:
        """False only where HiGHS proves the deadline LP infeasible: a solve that fails on
        numbers counts as feasible, which only lowers the bound (it stays sound)."""
        nonlocal solves, unsettled
        solves += 1
        horizons = np.full(len(jobs), float(k * slot_s))
        try:
            answer = solve_relaxation(
                jobs,
                slot_s,
                horizons,
                cluster.gpus,
                deadline=True,
                feasibility=True,
                time_limit_s=solve_limit_s,
            )
            return answer is not None
        except LPFailed:
            unsettled += 1
            return True

    lo = max(math.ceil(alone / slot_s), 1) - 1  # known (or taken) infeasible: below the alone bound
    hi = max(lo + 1, 2 * (lo + 1))
    while not feasible(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return MakespanBound(
        makespan_s=max(float(lo * slot_s), alone) - first,
        alone_s=alone - first,
        slot_s=slot_s,
        solves=solves,
        unsettled=unsettled,
        solve_s=time.perf_counter() - t0,
    )


def deadline_avg_jct_bound(
    workload: Sequence[WorkloadJob],
    makespan_s: float,
    cluster: ClusterShape | None = None,
    slot_s: int = 600,
    *,
    traces: Mapping[str, AppTrace] | None = None,
) -> float | None:
    """A lower bound on the average JCT of every schedule whose makespan (from the first
    submission) is at most ``makespan_s``; None when no schedule's is (the LP proves it)."""
    cluster = cluster or ClusterShape()
    jobs = prepare_jobs(workload, cluster, traces, slot_s)
    deadline = makespan_s + min(j.submit_s for j in jobs)
    if deadline < max(j.earliest_s for j in jobs):
        return None
    horizon = math.ceil(deadline / slot_s) * float(slot_s)
    horizons = np.full(len(jobs), horizon)
    solved = solve_relaxation(jobs, slot_s, horizons, cluster.gpus, deadline=True)
    if solved is None:
        return None
    ends = solved[0]
    return float(np.mean(ends - np.array([j.submit_s for j in jobs], dtype=np.float64)))
