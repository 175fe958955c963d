"""The adl scheduling policy: goodput-aware, shortest-remaining-first, restart-aware, packed.

Each round it solves, near-exactly, ``max sum_j w_j * speedup_j(config_j) * keep_j(config_j)``
over concrete placements, where

- ``speedup_j`` is the job's own goodput model (batch size re-picked for each (nodes, replicas));
- ``w_j = weight_j / R_j^a`` with ``R_j`` the job's remaining work on one GPU. With ``a = 1`` the
  objective is the rate at which the cluster finishes *fractions of jobs*, the fluid form of
  shortest-remaining-processing-time, optimal for mean completion time when jobs scale
  linearly. Real speedups are sublinear, and then the optimum shares more than SRPT does (the
  smallest job's extra GPUs are worth less than a longer job's first ones, and wasted GPU-time
  delays everyone queued later), so the default ``a = 1/2`` keeps strong shortest-first
  pressure while bounding the efficiency lost to it (makespan, tail JCT). Where a job did not
  declare its length, ``R_j`` is the driver's prediction from completed jobs of the same kind
  (:mod:`adl.sched.work_history`), else its attained service (least-attained-service: jobs
  that ran little are likely short). An aging term bounds how long any job can be starved;
- ``keep_j`` is 1 for the job's current placement and ``1 - restart penalty`` for any other:
  the job's measured restart cost over the time the new configuration is expected to last
  (the horizon, the job's time left at the new speed, or its past configurations' average
  lifetime if shorter); growing a running job pays for two restarts (the GPUs are on loan
  until a more urgent job takes them back). A running job's move must also beat staying by
  ``change_margin`` (hysteresis), so gains within the model's error restart nothing.

The optimizer is a lazy marginal-gain greedy over concrete placements (see
:mod:`adl.sched.placement`), with each job's candidate moves restricted to a few replica counts
(+1, geometric steps up to its cap, filling whole nodes, back to last round's placement) so
non-concave speedups (node boundaries) are handled by multi-GPU steps. A new job may start on
one node (``bootstrap_replicas``) and then reach ``ramp_factor`` x what it measured. Speedups
above the replica count a job has measured are optimistic (:mod:`adl.sched.policy_optimism`) so jobs
explore; tables come from a fast batch search (:mod:`adl.sched.policy_goodput`). Last round's
placements are a candidate move of their own, which is the warm start: a job keeps its GPUs
unless giving them away pays for the restart. A local search then re-solves with each of the
(two) biggest running jobs that the greedy moved kept whole, and keeps the better allocation:
the greedy weighs a newcomer's gain per GPU, never against the restart of the big job whose
few GPUs it took (on the traces this cuts restarts by a sixth and the mean JCT by ~5%).
Last, the replica counts are solved exactly: a knapsack, in GPUs, over every job's value at each
count (packed placement, restart penalty included, or last round's placement kept as it is),
whose counts are then placed (never below a job's minimum; kept placements first, then the
biggest) and any leftover GPUs handed out by the greedy. It wins whenever its placed
objective is higher: value per GPU is a poor guide when a job's speedup jumps at a count (a
whole node, a batch size that fits), which is where the greedy gives two jobs a bit each
instead of one job the count that pays (on generated workloads: 3.7% lower mean JCT and a sixth
fewer restarts).
GPU types (:attr:`NodeInfo.gpu_type`): each job is weighed in its fastest type's frame (its
remaining work on one GPU of that type, :mod:`adl.sched.policy_type_frame`), wherever it runs
now; a job's replicas are always on nodes of one type (the slowest GPU would pace every
step), one it may use (``JobInfo.gpu_types``); a job without GPUs
weighs a start on every such type, valued at its speed there (``JobInfo.type_speed`` x its
speedup), so it starts where its goodput is higher when both are free; a running job grows on
its own type, and changes type only by a move that pays for its restart like any other;
after the round, up to ``type_fill`` such moves onto a type the round left idle are tried, each
kept only if the whole objective rose (:mod:`adl.sched.policy_type_fill`).
Job priorities are strict tiers: each is solved as above on what the tiers above it left.
Everything is deterministic: ties break on submission order, then name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from adl.sched.decisions import Hold
from adl.sched.placement import Cluster
from adl.sched.policy_holds import holds_of
from adl.sched.policy_job import RoundJob, unplaced_copies
from adl.sched.policy_solvers import PolicySolvers, moved_big_jobs
from adl.sched.policy_type_fill import move_to_idle_types
from adl.sched.policy_type_prices import raised_prices
from adl.sched.types import Allocation, JobInfo, NodeInfo

#: the round's per-job working data, under the name the baselines and tests import it by
_Job = RoundJob


class AdlPolicy(PolicySolvers):
    """Goodput-greedy, SRPT-weighted, restart-aware policy implementing :class:`Policy`.

    Its parts, each a module of its own role: the job terms (:mod:`adl.sched.policy_terms`),
    the round's preparation (:mod:`adl.sched.policy_prepare`, :mod:`adl.sched.policy_floors`),
    the values and greedy moves (:mod:`adl.sched.policy_moves`), the solvers
    (:mod:`adl.sched.policy_solvers`) and the explanations of holds
    (:mod:`adl.sched.policy_holds`); here, the round that runs them.
    """

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        """The allocation of this round. Priorities are strict tiers, served highest first: each
        tier is solved on what the tiers above left, their placements held fixed (as are those
        of lower-tier jobs that may not be preempted, wherever they still fit)."""
        self._next_tables = {}
        try:
            tiers = sorted({job.priority for job in jobs}, reverse=True)
            if len(tiers) <= 1:
                single = self._optimize_tier(jobs, nodes, previous)
                self._remember(jobs, previous, single)
                return single
            answer: Allocation = {}
            for tier in tiers:
                held = [
                    replace(job, preemptible=False)
                    for job in jobs
                    if (job.priority > tier and answer.get(job.name))
                    or (job.priority < tier and not job.preemptible and previous.get(job.name))
                ]
                members = [job for job in jobs if job.priority == tier]
                prev = {job.name: list(previous.get(job.name) or []) for job in members}
                for job in held:
                    prev[job.name] = answer.get(job.name) or list(previous[job.name])
                names = frozenset(job.name for job in held)
                alloc = self._optimize_tier([*members, *held], nodes, prev, names)
                answer.update({job.name: alloc.get(job.name, []) for job in members})
            self._remember(jobs, previous, answer)
            return answer
        finally:
            self._tables, self._next_tables = self._next_tables, {}

    def _optimize_tier(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
        held: frozenset[str] = frozenset(),
    ) -> Allocation:
        """One objective over ``jobs``: greedy, local search, exact counts. ``held`` jobs (of
        other tiers, marked not preemptible) only keep their placement; one whose placement is
        gone (a node left or shrank) is left out rather than compete as an ordinary job."""
        prepared = self._prepare(jobs, Cluster(nodes), previous)
        if held:
            probe = [replace(job) for job in prepared]
            self._keep_unpreemptible(probe, Cluster(nodes))
            prepared = [
                job
                for job, tried in zip(prepared, probe, strict=True)
                if job.info.name not in held or tried.replicas
            ]
        total, work, cluster = self._solve(prepared, nodes, frozenset())
        # Local search: the greedy hands GPUs out one job at a time, so a big running job that
        # lost a few GPUs to others restarts whole without that loss ever being weighed against
        # their gain. Re-solve with it keeping its placement, and keep the better allocation.
        k = self.knobs
        if k.local_search > 0 and len(prepared) <= k.local_search_max_jobs:
            for name in moved_big_jobs(work, int(k.local_search)):
                fresh = unplaced_copies(prepared)
                alt = self._solve(fresh, nodes, frozenset({name}))
                if alt[0] > total * (1.0 + 1e-9):
                    total, work, cluster = alt
        if k.dp:
            fresh = unplaced_copies(prepared)
            exact = self._solve_dp(fresh, nodes)
            if exact is not None and exact[0] > total * (1.0 + 1e-9):
                total, work, cluster = exact[:3]
            # a mixed cluster whose counts asked a type for more than it has: re-solve with
            # prices on the over-asked types, keeping what is worth most unpriced
            over = exact[3] if exact is not None else {}
            if over and k.type_prices > 0 and len(prepared) <= k.local_search_max_jobs:
                used = sum(j.replicas * j.gpr for j in work)
                unit = total / used if used > 0 and total > 0 else 0.0
                prices: dict[str, float] = {}
                for _ in range(int(k.type_prices)):
                    if not over or unit <= 0.0:
                        break
                    prices = raised_prices(prices, over, unit)
                    fresh = unplaced_copies(prepared)
                    priced = self._solve_dp(fresh, nodes, prices)
                    if priced is None:
                        break
                    if priced[0] > total * (1.0 + 1e-9):
                        total, work, cluster = priced[:3]
                    over = priced[3]
        move_to_idle_types(self, work, cluster, int(k.type_fill))
        return {job.info.name: cluster.to_names(job.placement) for job in work}

    def objective(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
        allocation: Mapping[str, list[str]],
    ) -> float:
        """The value this policy puts on an allocation (what :meth:`optimize` maximizes)."""
        cluster = Cluster(nodes)
        total = 0.0
        for job in self._prepare(jobs, cluster, previous):
            placement = cluster.from_names(allocation.get(job.info.name) or [])
            if placement:
                total += self._utility(job, placement)
        return total

    def explain_holds(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
        allocation: Mapping[str, list[str]],
    ) -> dict[str, Hold]:
        """:class:`ExplainsHolds`: for each job ``allocation`` keeps as it was, below its
        maximum, while enough GPUs stay free to grow it, why growing it was worth less than
        staying: the ramp cap, no faster at a larger size, a restart that the remaining work
        does not repay, or a gain within the change margin."""
        return holds_of(self, jobs, nodes, previous, allocation)
