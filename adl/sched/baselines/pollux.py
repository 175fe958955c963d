"""Pollux's objective (OSDI'21), solved by adl's optimizer: the yardstick replayed, not quoted.

Pollux maximizes a power mean (p = -1) of each job's speedup relative to its fair share, where
a job that is re-allocated has its speedup scaled by ``(T - S * d) / (T + d)`` (age ``T``,
re-allocations so far ``S``, restart delay ``d``): the fraction of its life it would have spent
training after one more restart. With p = -1 the power mean is maximal exactly when
``sum 1 / speedup`` is minimal, which is separable over jobs, so adl's greedy, local search and
knapsack (:class:`adl.sched.policy.AdlPolicy`) solve it in place of Pollux's genetic search.
Running as many jobs as fit comes first (a job without GPUs would make the mean zero), and
remaining work is not used at all, as in Pollux. Placement follows adl's rules, which are
Pollux's: pack a job on few nodes, never two distributed jobs on one node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.placement import Cluster
from adl.sched.policy import AdlPolicy, _Job
from adl.sched.types import JobInfo

#: value of running at all; ``1 / speedup`` is capped below it, so a running job always counts
#: (values stay near 1e3, where the optimizer's relative tolerances are still fine)
_RUNNING = 1e3


class PolluxObjectivePolicy(AdlPolicy):
    """Maximize the p = -1 power mean of fair-share speedups, restart-discounted."""

    def _prepare(
        self,
        jobs: Sequence[JobInfo],
        cluster: Cluster,
        previous: Mapping[str, Sequence[str]],
    ) -> list[_Job]:
        out = super()._prepare(jobs, cluster, previous)
        # a job's yardstick: its speedup on an equal share of the cluster's GPUs (at least one
        # replica), packed
        fair_gpus = sum(cluster.capacity) // max(len(out), 1)
        for job in out:
            gpr = max(job.info.gpus_per_replica, 1)
            per_node = max(cluster.max_gpus // gpr, 1)
            share = min(max(fair_gpus // gpr, 1), max(job.cap, 1))
            job.weight = max(job.table.get(-(-share // per_node), share, job.cap), 1e-9)
        return out

    def _value(
        self, job: _Job, nodes: int, replicas: int, moved: bool, speed: float = 1.0
    ) -> float:
        del speed  # type-agnostic, as Pollux: it places on one type but values them alike
        if replicas <= 0:
            return 0.0
        speedup = job.table.get(nodes, replicas, job.cap) / job.weight
        if moved and job.prev is not None:
            age, delay = max(job.info.age_s, 0.0), max(job.info.restart_cost_s, 0.0)
            speedup *= max(age - job.info.restarts * delay, 0.0) / max(age + delay, 1e-9)
        return _RUNNING - min(1.0 / max(speedup, 1e-9), _RUNNING - 1.0)
