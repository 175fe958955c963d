"""The value of each placement of a job (its term of the objective: speedup at its weight, less
what a restart into it costs) and the greedy's moves: the placements a job may grow into, the
best per GPU it adds, and committing one to the cluster.
"""

from __future__ import annotations

import numpy as np

from adl.sched.placement import Cluster, Placement
from adl.sched.policy_efficiency import beyond_efficient
from adl.sched.policy_job import MovedValues, Num, RoundJob, placement_key, placement_speed
from adl.sched.policy_prepare import PolicyPreparation


class PolicyMoves(PolicyPreparation):
    """Values of placements, computed once a round, and the greedy's best move per job."""

    def __init__(self, seed: int = 0, **knobs: float | bool) -> None:
        super().__init__(seed, **knobs)
        # Whole rows of values (:meth:`_moved_row`) come from :meth:`_values`, which is the
        # objective only where a subclass has not replaced :meth:`_value` with its own (as
        # Pollux's objective does): there every value is asked of ``_value``, one by one.
        self._by_rows = type(self)._value is PolicyMoves._value

    def _utility(self, job: RoundJob, placement: Placement) -> float:
        moved = job.prev_key is None or placement_key(placement) != job.prev_key
        speed = placement_speed(job, placement)
        return self._value(job, len(placement), sum(placement.values()), moved, speed)

    def _value(
        self, job: RoundJob, nodes: int, replicas: int, moved: bool, speed: float = 1.0
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

    def _moved_row(self, job: RoundJob, speed: float) -> MovedValues:
        """The job's moved values at ``speed`` for every (one node or several, replica count)
        its fitted model's table covers, rebuilt when the table has grown."""
        table = job.table
        assert table.rows is not None
        row = job.moved_values.get(speed)
        if row is None or len(row.one) <= table.covered:
            width = table.covered + 1
            values = self._values(job, table.rows[:, :width], np.arange(width), True, speed)
            row = job.moved_values[speed] = MovedValues(values)
        return row

    def _values(
        self, job: RoundJob, speedup: np.ndarray, replicas: np.ndarray, moved: bool, speed: float
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

    def _targets(self, job: RoundJob, per_node: int) -> list[int]:
        key = (job.replicas, per_node)
        found = job.targets.get(key)
        if found is None:
            found = job.targets[key] = self._target_counts(job, per_node)
        return found

    def _target_counts(self, job: RoundJob, per_node: int) -> list[int]:
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

    def _best_move(self, job: RoundJob, cluster: Cluster) -> tuple[float, Placement] | None:
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
        self, job: RoundJob, option: Placement, best: tuple[float, Placement] | None
    ) -> tuple[float, Placement] | None:
        """``option`` if it adds GPUs to ``job`` at a better gain per GPU than ``best``."""
        extra = (sum(option.values()) - job.replicas) * job.gpr
        if extra <= 0:
            return best
        gain = (self._utility(job, option) - job.utility) / extra
        if gain > 1e-15 and (best is None or gain > best[0] + 1e-15):
            return gain, option
        return best

    def _commit(self, job: RoundJob, placement: Placement, cluster: Cluster) -> None:
        gpr = job.gpr
        cluster.release(job.info.name, job.placement, gpr)
        cluster.take(job.info.name, placement, gpr)
        job.placement = placement
        job.replicas = sum(placement.values())
        job.utility = self._utility(job, placement)
