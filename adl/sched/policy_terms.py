"""The per-job terms of adl's objective: a job's weight (``w_j``, from its remaining work), the
fraction of a new configuration's value its restart costs, its replica cap, and its speedup
table, kept across rounds.

:class:`PolicyTerms` is the base of :class:`adl.sched.policy.AdlPolicy` (its public
``priority``, ``restart_penalty`` and ``replica_cap`` are defined here); the round's
preparation (:mod:`adl.sched.policy_prepare`) reads every job's terms from it.
"""

from __future__ import annotations

import math

import numpy as np

from adl.sched.policy_job import Num
from adl.sched.policy_knobs import Knobs
from adl.sched.policy_weights import aging
from adl.sched.speedup_table import SpeedupTable
from adl.sched.types import JobInfo, SpeedupFn


class PolicyTerms:
    """The knobs, the job terms computed from them, and the speedup tables across rounds."""

    def __init__(self, seed: int = 0, **knobs: float | bool) -> None:
        self.seed = seed
        self.knobs = Knobs(**knobs)  # type: ignore[arg-type]  # each checked (and 0/1 made a bool)
        # speedup tables by (id(speedup fn), replicas per node, profiled replicas, cap), each stored
        # with its fn (which keeps the id valid)
        self._tables: dict[tuple[int, int, int, int], tuple[SpeedupFn, SpeedupTable]] = {}
        self._next_tables: dict[tuple[int, int, int, int], tuple[SpeedupFn, SpeedupTable]] = {}

    def ranks_by_predicted_remaining(self) -> bool:
        """:class:`RanksByPredictedRemaining`: whether the knobs let the prediction count."""
        return self.knobs.use_predicted_remaining

    # ------------------------------------------------------------------ job weights

    def priority(self, job: JobInfo, scale: float = 1.0) -> float:
        """``w_j``: value of one unit of speedup for this job (bigger = more urgent); ``scale``
        as in :meth:`_remaining`."""
        return self._weight(job, self._remaining(job, scale))

    def _weight(self, job: JobInfo, remaining: float) -> float:
        k = self.knobs
        grown = aging(job.age_s, remaining, k.fairness)
        return max(job.weight, 0.0) * grown / remaining**k.srpt_power

    def _remaining(self, job: JobInfo, scale: float = 1.0) -> float:
        """Remaining seconds on one GPU: declared, else predicted by the driver from completed
        jobs of the same kind, else estimated from attained service (LAS). The first two are
        counted on the GPU type the job's model was measured on; ``scale`` (its speed on its
        fastest type, :mod:`adl.sched.policy_type_frame`) restates them on that type. Attained
        service is GPU-seconds on whatever types the job ran on, and is left as it is."""
        k = self.knobs
        if job.remaining_s is not None:
            return max(job.remaining_s / scale, k.min_remaining_s)
        predicted = job.expected_remaining_s
        if k.use_predicted_remaining and predicted is not None and math.isfinite(predicted):
            return max(predicted / scale, k.min_remaining_s)
        return job.attained_service_s + k.unknown_remaining_s

    def restart_penalty(self, job: JobInfo, speedup: float = 1.0) -> float:
        """Fraction of a new configuration's value lost to (re)starting into it.

        The job's measured restart cost over the time the new configuration is expected to last:
        the planning horizon, or less if the job will finish sooner at that configuration's
        speedup. The cost is scaled up when the job has already restarted often for its age
        (each restart suggests the next will not last either).
        """
        return float(self._penalty(self._restart_s(job), self._remaining(job), speedup))

    def _restart_s(self, job: JobInfo) -> float:
        k = self.knobs
        # A configuration is expected to last as long as the job's past ones did on average
        # (age / (restarts + 1)), at most the horizon: the cost is spread over that lifetime.
        # Restarts of the ramp-up (bootstrap, then x ramp_factor each step: about
        # log(profiled / bootstrap) / log(ramp_factor) of them) are expected once and do not
        # count as churn.
        horizon = k.restart_horizon_s
        steps = max(job.max_profiled_replicas, 1) / max(k.bootstrap_replicas, 1.0)
        ramp = 0
        if steps > 1 and k.ramp_factor > 1:
            ramp = math.ceil(math.log(steps) / math.log(k.ramp_factor) - 1e-9)
        lifetime = max(job.age_s, horizon) / (max(job.restarts - ramp, 0) + 1)
        # churn_power > 1 makes a job that keeps being moved ever more expensive to move again:
        # the planning view that its next configuration will not last either.
        churn = (horizon / min(lifetime, horizon)) ** k.churn_power
        return max(job.restart_cost_s, 0.0) * churn

    def _penalty(self, restart_s: Num, remaining: float, speedup: Num, longest: Num = 0.0) -> Num:
        """``restart_s`` over the time the new configuration is expected to last: the
        horizon (or ``longest``, where longer), or less when the job finishes sooner. Numbers
        or arrays of them (element by element, the same arithmetic)."""
        k = self.knobs
        horizon = np.minimum(
            np.maximum(k.restart_horizon_s, longest), remaining / np.maximum(speedup, 1e-9)
        )
        frac = restart_s / np.maximum(horizon, 1e-9)
        return np.minimum(np.maximum(frac, 0.0), k.max_restart_penalty)

    def replica_cap(self, job: JobInfo, total: int, node_gpus: int | None = None) -> int:
        k = self.knobs
        profiled = job.max_profiled_replicas
        gpr = max(job.gpus_per_replica, 1)
        # A job that has measured nothing starts on ``bootstrap_replicas``, at most one node's
        # worth (``node_gpus``: the largest node), where its model, still the optimistic prior,
        # can be wrong about compute but not about cross-node sync; after that it may reach
        # ``ramp_factor`` x what it measured.
        reach = k.ramp_factor * profiled if profiled else k.bootstrap_replicas
        if not profiled and node_gpus is not None:
            reach = min(reach, max(node_gpus // gpr, 1))
        if self._confident(job, node_gpus):
            reach = job.max_replicas  # toward its fitted model's optimum (see ``_table``)
        ramp = max(1, math.floor(reach))
        cap = min(job.max_replicas, ramp, total // gpr)
        return max(cap, min(job.min_replicas, total // gpr))

    def _confident(self, job: JobInfo, node_gpus: int | None) -> bool:
        """The job has measured ``confident_nodes`` whole nodes or more, so its model has fitted
        sync across nodes: it may grow in one step to its model's predicted optimum (valued
        by the fitted model, no optimism) instead of ``ramp_factor`` x what it measured."""
        k = self.knobs
        if k.confident_nodes <= 0 or node_gpus is None:
            return False
        per_node = max(node_gpus // max(job.gpus_per_replica, 1), 1)
        return job.max_profiled_replicas >= k.confident_nodes * per_node

    # ------------------------------------------------------------------ speedups

    def _table(self, job: JobInfo, node_gpus: int, cap: int) -> SpeedupTable:
        """The job's speedup table, kept across rounds while its speedup function (and profiled
        replica count) is unchanged: a job's model only changes when it reports new hints."""
        fn = job.speedup
        per_node = max(node_gpus // max(job.gpus_per_replica, 1), 1)
        profiled = job.max_profiled_replicas if self.knobs.optimistic else 0
        if self._confident(job, node_gpus):
            profiled = 0  # its fitted model, not the optimistic prior
        key = (id(fn), per_node, profiled, cap)
        entry = self._next_tables.get(key) or self._tables.get(key)
        if entry is None or entry[0] is not fn:
            # its first rows come with every other new table's (``_prepare``: fill_first)
            table = SpeedupTable(fn, per_node, profiled, cap, one_node_fits=True, fill=False)
            entry = (fn, table)
        self._next_tables[key] = entry
        return entry[1]
