"""The solvers of one objective: the lazy marginal-gain greedy (:meth:`PolicySolvers._solve`,
:meth:`PolicySolvers._fill`) and the exact replica counts (:meth:`PolicySolvers._solve_dp`: a
knapsack over each job's value at every count, then placed), both starting from the placements
that may not move (:meth:`PolicySolvers._keep_unpreemptible`); and the big moved jobs the local
search re-solves with kept whole (:func:`moved_big_jobs`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

import numpy as np

from adl.sched.knapsack import best_counts
from adl.sched.placement import Cluster
from adl.sched.policy_job import RoundJob, placement_key, placement_type
from adl.sched.policy_moves import PolicyMoves
from adl.sched.policy_type_prices import over_asked
from adl.sched.types import NodeInfo


class PolicySolvers(PolicyMoves):
    """The greedy and the knapsack over the round's prepared jobs."""

    def _solve(
        self,
        work: list[RoundJob],
        nodes: Sequence[NodeInfo],
        pinned: frozenset[str],
    ) -> tuple[float, list[RoundJob], Cluster]:
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

    def _keep_unpreemptible(self, work: list[RoundJob], cluster: Cluster) -> None:
        """Jobs that may not be preempted, or not yet (``protected``: within their minimum
        tenure), keep last round's placement where it still fits (in ``work``'s order:
        submission, then name). Every solver starts here."""
        for job in work:
            keep = not job.info.preemptible or job.protected
            if keep and job.prev and cluster.fits(job.prev, job.gpr):
                self._commit(job, job.prev, cluster)

    def _fill(self, work: list[RoundJob], cluster: Cluster, fixed: list[bool]) -> None:
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

    def _count_values(
        self, job: RoundJob, cluster: Cluster, prices: Mapping[str, float] | None = None
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
        prev_type = placement_type(job, job.prev) if job.prev else None
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
        self, job: RoundJob, counts: np.ndarray, per_node: int, speed: float
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
        work: list[RoundJob],
        nodes: Sequence[NodeInfo],
        prices: Mapping[str, float] | None = None,
    ) -> tuple[float, list[RoundJob], Cluster, dict[str, int]] | None:
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


def moved_big_jobs(work: list[RoundJob], count: int) -> list[str]:
    """Running jobs on 4+ replicas that this allocation moves, the biggest first."""
    moved = [
        j
        for j in work
        if j.prev is not None
        and j.prev_replicas >= 4
        and j.info.preemptible
        and j.prev_key != placement_key(j.placement)
    ]
    moved.sort(key=lambda j: (-j.prev_replicas, j.info.submit_order, j.info.name))
    return [j.info.name for j in moved[:count]]
