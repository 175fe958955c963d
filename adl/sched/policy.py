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
its own type, and changes type only by a move that pays for its restart like any other.
Job priorities are strict tiers: each is solved as above on what the tiers above it left.
Everything is deterministic: ties break on submission order, then name.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from adl.sched.decisions import (
    HELD_AT_CAP,
    HELD_MARGIN,
    HELD_NO_FASTER,
    HELD_RESTART,
    Hold,
)
from adl.sched.knapsack import best_counts
from adl.sched.placement import Cluster, Placement
from adl.sched.policy_efficiency import beyond_efficient, efficient_count
from adl.sched.policy_endphase import balanced_counts, in_end_phase, shared_weight
from adl.sched.policy_knobs import Knobs
from adl.sched.policy_longshare import (
    behind_floor,
    efficient_scale,
    floor_count,
    floor_weight,
    long_job_indices,
)
from adl.sched.policy_starvation import boosted_weight, deficit_s
from adl.sched.policy_type_fill import move_to_idle_types
from adl.sched.policy_type_floor import fast_enough
from adl.sched.policy_type_frame import frame_scale
from adl.sched.policy_type_prices import over_asked, raised_prices
from adl.sched.policy_weights import aging, rank_weights
from adl.sched.speedup_table import SpeedupTable, fill_first
from adl.sched.types import Allocation, JobInfo, NodeInfo, SpeedupFn


class _MovedValues:
    """A job's values of moved placements at one GPU speed: ``array[r, k]`` for ``k``
    replicas on one node (``r`` = 0) or several (1); the same as lists (``one``, ``several``:
    the greedy reads single numbers), and the larger of the two per count (``ceiling``: no
    placement of ``k`` replicas is worth more unless it is last round's)."""

    __slots__ = ("array", "ceiling", "one", "several")

    def __init__(self, array: NDArray[np.float64]) -> None:
        self.array = array
        self.one: list[float] = array[0].tolist()
        self.several: list[float] = array[1].tolist()
        self.ceiling: list[float] = np.maximum(array[0], array[1]).tolist()


@dataclass
class _Job:
    """Per-round working data for one job."""

    info: JobInfo
    weight: float
    cap: int
    restart_s: float  # effective seconds lost per (re)start
    remaining: float  # remaining seconds on one GPU (estimated when undeclared)
    prev: Placement | None  # last round's placement, if still valid
    prev_key: tuple[tuple[int, int], ...] | None
    prev_replicas: int
    table: SpeedupTable
    placement: Placement
    fair: float = 1.0  # speedup at an equal share of the cluster (power-mean normalisation)
    efficient: int = 0  # most replicas at the efficiency floor (0 = no floor applies)
    efficient_speedup: float = 0.0  # the speedup there
    #: ``starve_bound_s``: the weight of its first ``floor_count`` replicas (0 = no floor),
    #: and its (packed) speedup at that count
    floor_weight: float = 0.0
    floor_count: int = 0
    floor_speedup: float = 0.0
    replicas: int = 0
    utility: float = 0.0
    #: (re)started or resized less than ``min_tenure_s`` ago: keeps its GPUs (may still grow)
    protected: bool = False
    #: what taking all of a running job's GPUs costs the objective: its restart at its
    #: current speed (added to every placement of the job, so that preemption loses it)
    charge: float = 0.0
    #: the node indices the job may use (``JobInfo.nodes``), None for any
    allowed: frozenset[int] | None = None
    #: the GPU types it may use that the cluster has, fastest for it first, and its speed on
    #: each (``JobInfo.type_speed``); a uniform cluster has one type, ""
    types: tuple[str, ...] = ()
    speeds: dict[str, float] = field(default_factory=dict)
    node_types: Sequence[str] = ()  # the cluster's type of each node (shared, read only)
    #: its speed on its fastest type relative to the frame it states itself in (1.0 on a
    #: cluster of one type): its weight, remaining work and speeds are in the fastest type's
    #: frame (:mod:`adl.sched.policy_type_frame`); explanations multiply back
    frame: float = 1.0
    #: its speed where it may use one type only (a uniform cluster: the hot path skips the
    #: lookup); 0.0 where it may use several
    one_speed: float = 0.0
    #: this round's values, each computed once (:meth:`AdlPolicy._value`): of every moved
    #: placement, by GPU speed, where the table holds a fitted model (row 0 on one node, row
    #: 1 on several, a column per replica count the table covers), and of any other by
    #: (nodes, replicas, moved, speed). The copies the solvers make share them.
    moved_values: dict[float, _MovedValues] = field(default_factory=dict)
    memo: dict[tuple[int, int, bool, float], float] = field(default_factory=dict)
    #: the greedy's target counts by (replicas held, replicas per node)
    targets: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    @property
    def gpr(self) -> int:
        """GPUs per replica (at least 1: a CPU-only job still takes a slot)."""
        return max(self.info.gpus_per_replica, 1)


#: the window of ``resumes_per_hour``
_HOUR_S = 3600.0

#: a number, or an array of them (the value's arithmetic runs on either)
Num = float | NDArray[np.float64]


def _packed(job: _Job, per_node: int, count: int) -> float:
    """The job's speedup on ``count`` replicas packed on the fewest nodes of ``per_node``."""
    return job.table.get(-(-count // per_node), count, job.cap)


def _unplaced(jobs: Sequence[_Job]) -> list[_Job]:
    """Copies of ``jobs`` holding nothing, for another solve of the same round."""
    return [replace(j, placement={}, replicas=0, utility=0.0) for j in jobs]


def _key(placement: Placement) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(placement.items()))


def _type(job: _Job, placement: Placement) -> str:
    """The GPU type of a (non-empty, one-type) placement of ``job``."""
    return job.node_types[next(iter(placement))]


def _speed(job: _Job, placement: Placement) -> float:
    """The job's relative speed on a placement's GPU type (1.0 for an empty placement)."""
    if job.one_speed:
        return job.one_speed
    for i in placement:
        return job.speeds.get(job.node_types[i], 1.0)
    return 1.0


class AdlPolicy:
    """Goodput-greedy, SRPT-weighted, restart-aware policy implementing :class:`Policy`."""

    def __init__(self, seed: int = 0, **knobs: float | bool) -> None:
        self.seed = seed
        self.knobs = Knobs(**knobs)  # type: ignore[arg-type]  # each checked (and 0/1 made a bool)
        # speedup tables by (id(speedup fn), replicas per node, profiled replicas, cap), each stored
        # with its fn (which keeps the id valid)
        self._tables: dict[tuple[int, int, int, int], tuple[SpeedupFn, SpeedupTable]] = {}
        self._next_tables: dict[tuple[int, int, int, int], tuple[SpeedupFn, SpeedupTable]] = {}
        # job -> (its nodes, sorted; its age when this policy gave it them, None: unknown):
        # how long each job has held its allocation, for the minimum tenure
        self._since: dict[str, tuple[tuple[str, ...], float | None]] = {}
        # job -> its ages at its resumes within the last hour, and the age until which a job
        # that reached ``resumes_per_hour`` keeps its GPUs
        self._resumes: dict[str, list[float]] = {}
        self._hold_until: dict[str, float] = {}
        # this tier's quiet time (``quiet_growth``), set by ``_prepare``: 0 = not quiet
        self._quiet_s = 0.0
        # Whole rows of values (:meth:`_moved_row`) come from :meth:`_values`, which is the
        # objective only where a subclass has not replaced :meth:`_value` with its own (as
        # Pollux's objective does): there every value is asked of ``_value``, one by one.
        self._by_rows = type(self)._value is AdlPolicy._value

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

    def _utility(self, job: _Job, placement: Placement) -> float:
        moved = job.prev_key is None or _key(placement) != job.prev_key
        speed = _speed(job, placement)
        return self._value(job, len(placement), sum(placement.values()), moved, speed)

    def _value(
        self, job: _Job, nodes: int, replicas: int, moved: bool, speed: float = 1.0
    ) -> float:
        """The job's value on ``replicas`` over ``nodes`` of a GPU type where it runs ``speed``
        x as fast as its model says; a ``moved`` job pays its restart (:meth:`_values`).

        The greedy asks for the same values many times a round (a job without GPUs weighs
        every target count on every type it may use, at each of its turns), so each is
        computed once: a fitted model's moved values a whole row at a time, the rest one by
        one, kept in the job's round memo."""
        table = job.table
        if moved and table.rows is not None and 0 < replicas <= table.cap:
            if replicas > table.covered:
                table.get(nodes, replicas, job.cap)  # fills the table as any lookup would
            moved_values = self._moved_row(job, speed)
            return moved_values.several[replicas] if nodes > 1 else moved_values.one[replicas]
        key = (nodes, replicas, moved, speed)
        value = job.memo.get(key)
        if value is None:
            speedup = np.array([table.get(nodes, replicas, job.cap)])
            value = float(self._values(job, speedup, np.array([replicas]), moved, speed)[0])
            job.memo[key] = value
        return value

    def _moved_row(self, job: _Job, speed: float) -> _MovedValues:
        """The job's moved values at ``speed`` for every (one node or several, replica count)
        its fitted model's table covers, rebuilt when the table has grown."""
        table = job.table
        assert table.rows is not None
        row = job.moved_values.get(speed)
        if row is None or len(row.one) <= table.covered:
            width = table.covered + 1
            values = self._values(job, table.rows[:, :width], np.arange(width), True, speed)
            row = job.moved_values[speed] = _MovedValues(values)
        return row

    def _values(
        self, job: _Job, speedup: np.ndarray, replicas: np.ndarray, moved: bool, speed: float
    ) -> np.ndarray:
        """The objective's term for ``job``: its value at each of ``replicas`` (an array, or
        a row of them per node regime), where its table gives ``speedup``, on a GPU type
        where it runs ``speed`` x as fast as its model says; a ``moved`` job pays its restart.
        Element by element the same arithmetic as on plain numbers."""
        if job.efficient:
            capped = beyond_efficient(speedup, job.efficient_speedup)
            speedup = np.where(replicas > job.efficient, capped, speedup)
        speedup = speedup * speed
        q = self.knobs.speedup_power
        if q != 1.0:
            # Power mean over speedups normalised by the job's equal share: concave for q < 1,
            # so a job's first GPUs count more than another job's extra ones (the tail).
            # (Python's power on each number: numpy's vector power may round differently.)
            ratio = np.asarray(speedup / job.fair)
            powered = [base**q for base in ratio.ravel().tolist()]
            speedup = job.fair * np.array(powered).reshape(ratio.shape)
        value = job.weight * speedup
        if job.floor_count:
            # a starved job's first GPUs (up to an equal share) at its boosted weight
            value = value + (job.floor_weight - job.weight) * np.minimum(speedup, job.floor_speedup)
        if moved:  # (re)starting costs every job the same delay
            k = self.knobs
            restart_s: Num = job.restart_s
            longest: Num = 0.0
            margin: Num = k.change_margin
            if job.prev is not None:
                # GPUs a running job grows into are on loan: when a more urgent job needs them
                # back, it restarts a second time. Growth must pay for both restarts.
                grows = replicas > job.prev_replicas
                restart_s = np.where(grows, job.restart_s * k.grow_restarts, job.restart_s)
                if self._quiet_s > 0.0:
                    # no arrival for ``_quiet_s``: the loan is expected to last that long
                    # (or until the job ends), and a wrong model costs one restart over it,
                    # so the margin against model error shrinks in proportion
                    longest = np.where(grows, self._quiet_s, 0.0)
                    shrunk = k.change_margin * (k.restart_horizon_s / self._quiet_s)
                    margin = np.where(grows, shrunk, k.change_margin)
            value = value * (1.0 - self._penalty(restart_s, job.remaining, speedup, longest))
            if job.prev is not None:
                # Hysteresis: a running job's change must beat staying by more than the
                # model's own error, or the policy restarts jobs on noise.
                value = value / (1.0 + margin)
        # a running job left without GPUs loses its restart (``charge``): every placement
        # of it is worth that much more than none
        return np.where(replicas > 0, value + job.charge, value)

    # ------------------------------------------------------------------ greedy moves

    def _targets(self, job: _Job, per_node: int) -> list[int]:
        key = (job.replicas, per_node)
        found = job.targets.get(key)
        if found is None:
            found = job.targets[key] = self._target_counts(job, per_node)
        return found

    def _target_counts(self, job: _Job, per_node: int) -> list[int]:
        k, cap = job.replicas, job.cap
        lo = max(k + 1, job.info.min_replicas)
        cand = {lo, cap}
        # Geometric steps (2k, 4k, ...) look past a dip in the speedup curve (e.g. a job that
        # is slow on 2 nodes but fast on 4), which one-GPU steps would never cross.
        step = max(2 * k, lo)
        while step < cap:
            cand.add(step)
            step *= 2
        if per_node > 0:
            cand.add(min(-(-lo // per_node) * per_node, cap))  # fill whole nodes
        return sorted(c for c in cand if lo <= c <= cap)

    def _best_move(self, job: _Job, cluster: Cluster) -> tuple[float, Placement] | None:
        """Best value-per-GPU move for a job given the cluster as it is now."""
        gpr = job.gpr
        best: tuple[float, Placement] | None = None
        current = job.placement
        cluster.release(job.info.name, current, gpr)
        try:
            if job.replicas == 0 and job.prev is not None and cluster.fits(job.prev, gpr):
                best = self._better(job, job.prev, best)
            prefer = [*current, *(job.prev or ())]
            # a running job grows on its own type (never mixed); one without GPUs may start on
            # any type it allows, each valued at its speed there
            types = (job.node_types[next(iter(current))],) if current else job.types
            rows = self._by_rows and job.table.rows is not None
            for gpu_type in types:
                # Only counts that fit in the type's free GPUs can be placed (the targets
                # ascend); and no placement of a count is worth more than its moved value's
                # ceiling (last round's placement aside): a count whose ceiling cannot beat
                # the best move so far is not placed at all. Placing reads the cluster only,
                # so the answer is the one a placement of every target would give.
                room = cluster.free_of(gpu_type) // gpr
                targets = self._targets(job, cluster.type_max[gpu_type] // gpr)
                if not targets or targets[0] > room:
                    continue
                ceiling = self._moved_row(job, job.speeds[gpu_type]).ceiling if rows else ()
                for target in targets:
                    if target > room:
                        break
                    if target < len(ceiling) and target != job.prev_replicas:
                        most = (ceiling[target] - job.utility) / ((target - job.replicas) * gpr)
                        if most <= 1e-15 or (best is not None and most <= best[0] + 1e-15):
                            continue
                    placed = cluster.place(target, gpr, prefer, gpu_type, job.allowed)
                    if placed is not None:
                        best = self._better(job, placed, best)
        finally:
            cluster.take(job.info.name, current, gpr)
        return best

    def _better(
        self, job: _Job, option: Placement, best: tuple[float, Placement] | None
    ) -> tuple[float, Placement] | None:
        """``option`` if it adds GPUs to ``job`` at a better gain per GPU than ``best``."""
        extra = (sum(option.values()) - job.replicas) * job.gpr
        if extra <= 0:
            return best
        gain = (self._utility(job, option) - job.utility) / extra
        if gain > 1e-15 and (best is None or gain > best[0] + 1e-15):
            return gain, option
        return best

    def _commit(self, job: _Job, placement: Placement, cluster: Cluster) -> None:
        gpr = job.gpr
        cluster.release(job.info.name, job.placement, gpr)
        cluster.take(job.info.name, placement, gpr)
        job.placement = placement
        job.replicas = sum(placement.values())
        job.utility = self._utility(job, placement)

    # ------------------------------------------------------------------ entry points

    def _prepare(
        self,
        jobs: Sequence[JobInfo],
        cluster: Cluster,
        previous: Mapping[str, Sequence[str]],
    ) -> list[_Job]:
        total = sum(cluster.capacity)
        share = max(total // max(len(jobs), 1), 1)  # GPUs of an equal share
        out = []
        for info in sorted(jobs, key=lambda j: (j.submit_order, j.name)):
            prev_names = previous.get(info.name) or []
            prev = cluster.from_names(prev_names) if prev_names else None
            allowed, pool = None, total
            if info.nodes is not None:
                # confined to a node pool: its GPUs bound the job, and a placement outside it
                # (the pool changed) is no placement to keep
                allowed = frozenset(cluster.index[n] for n in info.nodes if n in cluster.index)
                pool = sum(cluster.capacity[i] for i in allowed)
                if prev is not None and not set(prev) <= allowed:
                    prev = None
            speeds = {t: info.speed_on(t) for t in cluster.type_names if info.may_use(t)}
            # the job's work and speeds on its fastest type, wherever it runs now (so that
            # moving it does not change its weight); exactly 1.0 on a cluster of one type
            scale = frame_scale(speeds, info.exploring)
            if scale != 1.0:
                speeds = {t: s / scale for t, s in speeds.items()}
            if self.knobs.min_type_speed > 0.0:
                speeds = fast_enough(speeds, self.knobs.min_type_speed)
            types = tuple(sorted(speeds, key=lambda t: (-speeds[t], t)))
            mixed = len(cluster.type_names) > 1
            if prev is not None and (
                not speeds
                or (mixed and (not cluster.one_type(prev) or cluster.type_of(prev) not in speeds))
            ):
                # mixed types (placed before types were known) or a type it may no longer
                # use: not a placement to keep, the job moves
                prev = None
            if not mixed:
                cap = self.replica_cap(info, pool, cluster.max_gpus)
            else:  # all of its replicas on the largest type it may use (within its pool)
                room = max((_type_room(cluster, t, allowed) for t in types), default=0)
                widest = max((cluster.type_max[t] for t in types), default=0)
                cap = self.replica_cap(info, room, widest)
            if prev is not None and sum(prev.values()) > max(cap, 0):
                cap = max(cap, min(sum(prev.values()), info.max_replicas))
            out.append(
                _Job(
                    info=info,
                    weight=self.priority(info, scale),
                    cap=cap,
                    restart_s=self._restart_s(info),
                    remaining=self._remaining(info, scale),
                    prev=prev,
                    prev_key=_key(prev) if prev else None,
                    prev_replicas=sum(prev.values()) if prev else 0,
                    table=self._table(info, cluster.max_gpus, cap),
                    placement={},
                    allowed=allowed,
                    types=types,
                    speeds=speeds,
                    node_types=cluster.types,
                    one_speed=speeds[types[0]] if len(types) == 1 else 0.0,
                    frame=scale,
                )
            )
        fill_first([job.table for job in out])
        if self.knobs.speedup_power != 1.0:
            for job in out:
                fair = max(min(share // job.gpr, job.cap), 1)
                per_node = max(cluster.max_gpus // job.gpr, 1)
                job.fair = max(_packed(job, per_node, fair), 1e-9)
        self._alternative_weights(out, cluster.max_gpus)
        self._quiet_s = self._quiet(out)
        if self.knobs.starve_bound_s > 0:
            self._starvation_floor(out, share, cluster.max_gpus)
        if self.knobs.long_job_mult > 0:
            self._long_floor(out, total, cluster.max_gpus)
        self._tenure(out, previous)
        if self.knobs.efficiency_floor > 0:
            for job in out:
                self._efficiency_cap(job, cluster.max_gpus)
        if self.knobs.end_phase_mult > 0:
            self._end_phase(out, total, cluster.max_gpus)
        return out

    def _end_phase(self, jobs: list[_Job], total: int, node_gpus: int) -> None:
        """``end_phase_mult``: when only long jobs are left, one shared weight and a soft cap
        at the counts that even out their predicted finishes
        (:mod:`adl.sched.policy_endphase`); their other floors give way to it."""
        holding = [job.prev is not None for job in jobs]
        remaining = [job.remaining for job in jobs]
        ages = [job.info.age_s for job in jobs]
        sizes = [job.remaining + max(job.info.attained_service_s, 0.0) for job in jobs]
        k = self.knobs
        if not in_end_phase(sizes, holding, ages, k.end_phase_mult, k.restart_horizon_s):
            return
        per_node = [max(node_gpus // job.gpr, 1) for job in jobs]
        packed = [partial(_packed, job, p) for job, p in zip(jobs, per_node, strict=True)]
        caps, gprs = [job.cap for job in jobs], [job.gpr for job in jobs]
        counts = balanced_counts(remaining, packed, caps, per_node, gprs, total, ages)
        if counts is None:
            return
        weights = shared_weight([j.weight for j in jobs], [j.info.weight for j in jobs])
        for job, count, weight, speedup in zip(jobs, counts, weights, packed, strict=True):
            job.weight, job.floor_count = weight, 0
            if count < job.cap:
                job.efficient, job.efficient_speedup = count, speedup(count)

    def _starvation_floor(self, jobs: list[_Job], share: int, node_gpus: int) -> None:
        """``starve_bound_s``: jobs behind an equal share (``share`` GPUs) for longer than the
        bound get a boosted weight on their first GPUs (:mod:`adl.sched.policy_starvation`)."""
        k = self.knobs
        top = max((job.weight for job in jobs), default=0.0)
        for job in jobs:
            behind = deficit_s(job.info.age_s, job.info.attained_service_s, share)
            boosted = boosted_weight(job.weight, behind, k.starve_bound_s, top)
            if boosted <= job.weight:
                continue
            count = max(min(share // job.gpr, job.cap), 1)
            per_node = max(node_gpus // job.gpr, 1)
            job.floor_weight, job.floor_count = boosted, count
            job.floor_speedup = _packed(job, per_node, count)

    def _long_floor(self, jobs: list[_Job], total: int, node_gpus: int) -> None:
        """``long_job_mult``: long jobs' first GPUs, up to their efficient scale, at a boosted
        weight (:mod:`adl.sched.policy_longshare`); a starvation floor worth more stays."""
        k = self.knobs
        longs = long_job_indices([job.remaining for job in jobs], k.long_job_mult)
        if not longs or k.long_floor_weight <= 0:
            return
        top = max(job.weight for job in jobs)
        for idx in longs:
            job = jobs[idx]
            per_node = max(node_gpus // job.gpr, 1)
            packed = partial(_packed, job, per_node)
            scale = efficient_scale(packed, job.cap, per_node, k.long_floor_gain)
            count = floor_count(scale, total, k.long_floor_share, len(longs), job.gpr)
            count = min(count, job.cap)
            boosted = floor_weight(job.weight, top, k.long_floor_weight)
            if count <= 0 or boosted <= job.weight:
                continue
            if k.long_floor_catchup and not behind_floor(
                job.info.attained_service_s, job.info.age_s, count * job.gpr
            ):
                continue
            if job.floor_count and job.floor_weight * job.floor_speedup >= boosted * packed(count):
                continue  # the starvation bound's floor is worth more
            job.floor_weight, job.floor_count = boosted, count
            job.floor_speedup = packed(count)

    def _quiet(self, jobs: Sequence[_Job]) -> float:
        """With ``quiet_growth``: the youngest job's age when every job holds GPUs and it is
        older than ``restart_horizon_s`` (a quiet round), else 0. The youngest age is the time
        since the last arrival still running (a later one may have finished already), taken
        as the Lindy estimate of how long until the next arrival."""
        k = self.knobs
        if not k.quiet_growth or not jobs or any(job.prev is None for job in jobs):
            return 0.0
        youngest = min(job.info.age_s for job in jobs)
        return youngest if youngest > k.restart_horizon_s else 0.0

    def _held_s(self, info: JobInfo, nodes: Sequence[str]) -> float | None:
        """Seconds ``info`` has held ``nodes`` under this policy (None: not known, as after a
        restart of the scheduler or when the driver did not apply this policy's answer)."""
        rec = self._since.get(info.name)
        if rec is None or rec[1] is None or rec[0] != tuple(sorted(nodes)):
            return None
        return max(info.age_s - rec[1], 0.0)

    def _tenure(self, jobs: list[_Job], previous: Mapping[str, Sequence[str]]) -> None:
        """Issue 34's guards against flapping, on running preemptible jobs: a job (re)started
        or resized less than ``min_tenure_s`` ago keeps its GPUs (a leftover GPU given for
        one round and taken back the next is a restart for nothing); and taking all of a
        running job's GPUs costs its restart (``victim_charge`` x its restart penalty at its
        current speed)."""
        k = self.knobs
        for job in jobs:
            if job.prev is None or not job.info.preemptible:
                continue
            held = self._held_s(job.info, previous.get(job.info.name) or [])
            job.protected = held is not None and held < k.min_tenure_s
            if job.info.age_s < self._hold_until.get(job.info.name, -math.inf):
                job.protected = True  # its resume budget for the hour is spent
            if k.victim_charge > 0:
                now = job.table.get(len(job.prev), job.prev_replicas, job.cap)
                now *= _speed(job, job.prev)
                lost = float(self._penalty(job.restart_s, job.remaining, now))
                job.charge = k.victim_charge * job.weight * now * lost

    def _remember(
        self, jobs: Sequence[JobInfo], previous: Mapping[str, list[str]], answer: Allocation
    ) -> None:
        """Record since when each job holds its answer (the clock is the jobs' own age)."""
        since: dict[str, tuple[tuple[str, ...], float | None]] = {}
        resumes: dict[str, list[float]] = {}
        hold_until: dict[str, float] = {}
        for info in jobs:
            recent = [a for a in self._resumes.get(info.name, ()) if info.age_s - a < _HOUR_S]
            if recent:
                resumes[info.name] = recent
            nodes = tuple(sorted(answer.get(info.name) or []))
            if not nodes:
                continue
            if info.name in self._hold_until:
                hold_until[info.name] = self._hold_until[info.name]
            before = previous.get(info.name) or []
            if nodes != tuple(sorted(before)):
                # only a resume (GPUs again after a preemption) starts a protected tenure,
                # unless ``tenure_all`` also protects first starts and resizes
                resumed = not before and (info.restarts > 0 or info.attained_service_s > 0)
                protect = resumed or self.knobs.tenure_all
                since[info.name] = (nodes, info.age_s if protect else None)
                if resumed:
                    resumes[info.name] = recent = [*recent, info.age_s]
                    budget = int(self.knobs.resumes_per_hour)
                    if budget and len(recent) >= budget:
                        # the budget is spent: held until the oldest resume that counts
                        # is an hour old, so no hour ever holds more than ``budget``
                        hold_until[info.name] = recent[-budget] + _HOUR_S
            else:
                rec = self._since.get(info.name)
                since[info.name] = rec if rec is not None and rec[0] == nodes else (nodes, None)
        self._since = since
        self._resumes, self._hold_until = resumes, hold_until

    def _efficiency_cap(self, job: _Job, node_gpus: int) -> None:
        """Soft cap at the job's efficient count (:mod:`adl.sched.policy_efficiency`)."""
        packed = partial(_packed, job, max(node_gpus // job.gpr, 1))
        count = efficient_count(packed, job.cap, self.knobs.efficiency_floor)
        if count < job.cap:
            job.efficient, job.efficient_speedup = count, packed(count)

    def _alternative_weights(self, jobs: list[_Job], node_gpus: int) -> None:
        """The opt-in weights of :mod:`adl.sched.policy_weights` (measured, not the default)."""
        k = self.knobs
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
            for name in self._moved_big_jobs(work, int(k.local_search)):
                fresh = _unplaced(prepared)
                alt = self._solve(fresh, nodes, frozenset({name}))
                if alt[0] > total * (1.0 + 1e-9):
                    total, work, cluster = alt
        if k.dp:
            fresh = _unplaced(prepared)
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
                    fresh = _unplaced(prepared)
                    priced = self._solve_dp(fresh, nodes, prices)
                    if priced is None:
                        break
                    if priced[0] > total * (1.0 + 1e-9):
                        total, work, cluster = priced[:3]
                    over = priced[3]
        move_to_idle_types(self, work, cluster, int(k.type_fill))
        return {job.info.name: cluster.to_names(job.placement) for job in work}

    def _count_values(
        self, job: _Job, cluster: Cluster, prices: Mapping[str, float] | None = None
    ) -> tuple[np.ndarray, int, np.ndarray]:
        """Value of each replica count 0..K on a packed placement (restart penalties included)
        on the GPU type where that count is worth most (among those with the GPUs free), the
        count at which keeping last round's placement is worth more than moving, and the
        type of each count (its index in ``job.types``, -1 for none: the fastest type wins
        ties). ``prices``: a price per GPU of each type, less what a count there is worth
        (:mod:`adl.sched.policy_type_prices`)."""
        tops = {t: min(job.cap, cluster.free_of(t) // job.gpr) for t in job.types}
        top = max(tops.values(), default=0)
        values = np.full(max(top, 0) + 1, -np.inf)
        values[0] = 0.0
        kinds = np.full(len(values), -1, dtype=np.intp)
        keep = -1
        prev_type = _type(job, job.prev) if job.prev else None
        low = max(job.info.min_replicas, 1)
        for kind, gpu_type in enumerate(job.types):
            high = tops[gpu_type]
            if high < low:
                continue
            per_node = max(cluster.type_max[gpu_type] // job.gpr, 1)
            speed = job.speeds[gpu_type]
            row = self._packed_values(job, np.arange(low, high + 1), per_node, speed)
            if job.prev is not None and gpu_type == prev_type and low <= job.prev_replicas <= high:
                stay = self._value(job, len(job.prev), job.prev_replicas, False, speed)
                if stay >= row[job.prev_replicas - low]:
                    row[job.prev_replicas - low], keep = stay, job.prev_replicas
            price = prices.get(gpu_type, 0.0) if prices else 0.0
            if price:
                row = row - price * job.gpr * np.arange(low, high + 1)
            better = row > values[low : high + 1]
            values[low : high + 1][better] = row[better]
            kinds[low : high + 1][better] = kind
        if keep >= 0 and (kinds[keep] < 0 or job.types[kinds[keep]] != prev_type):
            keep = -1  # another type is worth more at that count: the job moves there
        return values, keep, kinds

    def _packed_values(
        self, job: _Job, counts: np.ndarray, per_node: int, speed: float
    ) -> np.ndarray:
        """The job's moved values at ``counts`` (ascending) replicas, each packed on the
        fewest nodes of ``per_node`` replicas (a new array)."""
        table = job.table
        top = int(counts[-1])
        if self._by_rows and table.rows is not None and top <= table.cap:
            table.cover(top)
            rows = self._moved_row(job, speed).array
            return rows[(counts > per_node).astype(np.intp), counts]
        return np.array(
            [self._value(job, -(-c // per_node), c, True, speed) for c in counts.tolist()]
        )

    def _solve_dp(
        self,
        work: list[_Job],
        nodes: Sequence[NodeInfo],
        prices: Mapping[str, float] | None = None,
    ) -> tuple[float, list[_Job], Cluster, dict[str, int]] | None:
        """Replica counts by an exact knapsack over the packed values (capacity in GPUs, a count
        costing ``count x gpus_per_replica``; ``prices`` per GPU of a type, as in
        :meth:`_count_values`), then placed (jobs that keep last round's placement first, then
        the most GPUs), then leftovers by the greedy. Also the GPUs the counts asked of each
        type beyond its free ones (the knapsack counts GPUs, not GPUs per type)."""
        cluster = Cluster(nodes)
        self._keep_unpreemptible(work, cluster)
        kept = [job.replicas > 0 for job in work]  # they stay as they are, as in the greedy
        free = cluster.total_free
        open_jobs = [i for i, j in enumerate(work) if j.replicas == 0]
        if free <= 0 or len(open_jobs) * (free + 1) > self.knobs.dp_max_cells:
            return None
        keeps: dict[int, int] = {}
        values = []
        count_types: dict[int, np.ndarray] = {}
        free_by = {t: cluster.free_of(t) for t in cluster.type_names}
        for idx in open_jobs:
            job_values, keep, count_types[idx] = self._count_values(work[idx], cluster, prices)
            if keep >= 0:
                keeps[idx] = keep
            values.append(job_values)
        chosen = best_counts(values, [work[idx].gpr for idx in open_jobs], free)
        # latest submitted first: the order kept placements are committed in below, which the
        # replays' figures were measured with (a kept placement that no longer fits loses out)
        counts = dict(zip(reversed(open_jobs), reversed(chosen), strict=True))
        demand: dict[str, int] = {}
        for idx, count in counts.items():
            kinds = count_types[idx]
            if count and count < len(kinds) and kinds[count] >= 0:
                gpu_type = work[idx].types[int(kinds[count])]
                demand[gpu_type] = demand.get(gpu_type, 0) + count * work[idx].gpr
        # Place: kept placements first, then the most GPUs (fewest nodes, where they were).
        rest = []
        for idx, count in counts.items():
            job = work[idx]
            if count and keeps.get(idx) == count and job.prev and cluster.fits(job.prev, job.gpr):
                self._commit(job, job.prev, cluster)
            elif count:
                rest.append(idx)
        rest.sort(
            key=lambda i: (-counts[i] * work[i].gpr, work[i].info.submit_order, work[i].info.name)
        )
        for idx in rest:
            job = work[idx]
            prefer = list(job.prev or ())
            for count in range(counts[idx], max(job.info.min_replicas, 1) - 1, -1):
                # the type the count was valued on first; else any other it may use (the
                # knapsack counts GPUs, not GPUs per type)
                kinds = count_types[idx]
                kind = int(kinds[count]) if count < len(kinds) else -1
                first = job.types[kind] if kind >= 0 else None
                order = [t for t in job.types if t != first]
                placed = None
                for gpu_type in [first, *order] if first is not None else order:
                    placed = cluster.place(count, job.gpr, prefer, gpu_type, job.allowed)
                    if placed is not None:
                        break
                if placed is not None:
                    self._commit(job, placed, cluster)
                    break
        self._fill(work, cluster, kept)
        return sum(job.utility for job in work), work, cluster, over_asked(demand, free_by)

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
        for job in self._prepare(jobs, cluster, previous):
            if job.info.name in names and job.prev is not None:
                gpu_type = _type(job, job.prev)
                hold = self._hold(job, free[gpu_type], cluster.type_max[gpu_type])
                if hold is not None:
                    out[job.info.name] = hold
        return out

    def _hold(self, job: _Job, free: int, max_gpus: int) -> Hold | None:
        """Why ``job`` (on its previous placement) was not grown into ``free`` GPUs; None when
        growing was worth more (the answer left it for another reason: placement, a tier)."""
        assert job.prev is not None
        k = self.knobs
        now = job.prev_replicas
        per_node = max(max_gpus // job.gpr, 1)
        speed = _speed(job, job.prev)
        s_now = job.table.get(len(job.prev), now, job.cap) * speed
        stay = self._value(job, len(job.prev), now, False, speed)
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
            return Hold(
                target=now + 1, cause=HELD_AT_CAP, speedup_target=s_now * job.frame, **facts
            )
        counts = range(now + 1, top + 1)
        speedups = {c: _packed(job, per_node, c) * speed for c in counts}
        values = {c: self._value(job, -(-c // per_node), c, True, speed) for c in counts}
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

    @staticmethod
    def _moved_big_jobs(work: list[_Job], count: int) -> list[str]:
        """Running jobs on 4+ replicas that this allocation moves, the biggest first."""
        moved = [
            j
            for j in work
            if j.prev is not None
            and j.prev_replicas >= 4
            and j.info.preemptible
            and j.prev_key != _key(j.placement)
        ]
        moved.sort(key=lambda j: (-j.prev_replicas, j.info.submit_order, j.info.name))
        return [j.info.name for j in moved[:count]]

    def _solve(
        self,
        work: list[_Job],
        nodes: Sequence[NodeInfo],
        pinned: frozenset[str],
    ) -> tuple[float, list[_Job], Cluster]:
        """The lazy marginal-gain greedy over prepared, unassigned jobs (assigned in place);
        ``pinned`` jobs keep last round's placement."""
        cluster = Cluster(nodes)
        self._keep_unpreemptible(work, cluster)
        # then pinned ones, where their placement is still free
        for job in (j for j in work if j.info.preemptible and j.info.name in pinned):
            if job.prev and cluster.fits(job.prev, job.gpr):
                self._commit(job, job.prev, cluster)
        self._fill(work, cluster, [job.replicas > 0 and not job.protected for job in work])
        return sum(job.utility for job in work), work, cluster

    def _keep_unpreemptible(self, work: list[_Job], cluster: Cluster) -> None:
        """Jobs that may not be preempted, or not yet (``protected``: within their minimum
        tenure), keep last round's placement where it still fits (in ``work``'s order:
        submission, then name). Every solver starts here."""
        for job in work:
            keep = not job.info.preemptible or job.protected
            if keep and job.prev and cluster.fits(job.prev, job.gpr):
                self._commit(job, job.prev, cluster)

    def _fill(self, work: list[_Job], cluster: Cluster, fixed: list[bool]) -> None:
        """The lazy greedy: hand out free GPUs by best value per GPU (``fixed`` jobs stay).
        The last step of each solver on ``cluster``: with no GPU free it does nothing."""
        if cluster.total_free <= 0:
            return
        heap: list[tuple[float, int]] = []
        for idx, job in enumerate(work):
            if not fixed[idx]:
                move = self._best_move(job, cluster)
                if move is not None:
                    heap.append((-move[0], idx))
        heapq.heapify(heap)
        while heap and cluster.total_free > 0:
            _, idx = heapq.heappop(heap)
            job = work[idx]
            move = self._best_move(job, cluster)
            if move is None:
                continue
            value, placement = move
            if heap and value < -heap[0][0] - 1e-15:
                heapq.heappush(heap, (-value, idx))  # stale: re-queue
                continue
            self._commit(job, placement, cluster)
            nxt = self._best_move(job, cluster)
            if nxt is not None:
                heapq.heappush(heap, (-nxt[0], idx))


def _type_room(cluster: Cluster, gpu_type: str, allowed: frozenset[int] | None) -> int:
    """GPUs of ``gpu_type`` in the cluster, or on the ``allowed`` nodes only."""
    if allowed is None:
        return cluster.type_capacity[gpu_type]
    return sum(cluster.capacity[i] for i in allowed if cluster.types[i] == gpu_type)
