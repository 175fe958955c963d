"""Concrete GPU bookkeeping for the policy: which node has how many free GPUs, and where a job of
K replicas would land if placed now.

Rules it enforces, so every allocation the policy builds is valid by construction:

- a node never hands out more GPUs than it has;
- a job that fits on one node goes on one node (best fit: the fullest node that still fits, so
  large holes stay free for large jobs);
- a job that needs several nodes takes the emptiest nodes first (fewest nodes), and never a node
  that already hosts another multi-node job (two distributed jobs on one node would contend for
  its network link and PCIe lanes).

Nodes are kept in buckets by free GPUs, with a sorted list of the buckets that hold a node, so a
placement costs O(distinct free counts + nodes used), not O(cluster size), and not O(GPUs per
node) either: the local daemon's one node of 2048 slots has 2049 buckets, at most one of them
filled.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence

from adl.sched.types import NodeInfo

#: node index -> replicas of one job on that node
Placement = dict[int, int]


class Cluster:
    """Free GPUs per node plus the multi-node job (if any) that owns each node's network."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self.names = [node.name for node in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.capacity = [max(int(node.gpus), 0) for node in nodes]
        self.max_gpus = max(self.capacity, default=0)
        self.free = list(self.capacity)
        self.owner: list[str | None] = [None] * len(nodes)
        # buckets[f]: nodes with f free GPUs; open_buckets[f]: those not owned by a multi-node job.
        # dicts are insertion-ordered sets, which keeps every choice deterministic.
        self._buckets: list[dict[int, None]] = [{} for _ in range(self.max_gpus + 1)]
        self._open: list[dict[int, None]] = [{} for _ in range(self.max_gpus + 1)]
        for i, f in enumerate(self.free):
            self._buckets[f][i] = None
            self._open[f][i] = None
        # the free counts whose bucket holds a node, ascending (the scans skip empty buckets)
        self._levels = sorted(set(self.free))
        self._open_levels = list(self._levels)

    @property
    def total_free(self) -> int:
        return sum(self.free)

    # ---------------------------------------------------------------- low-level updates

    def _move(self, i: int, new_free: int, new_owner: str | None) -> None:
        old_free, old_owner = self.free[i], self.owner[i]
        _leave(self._buckets, self._levels, old_free, i)
        if old_owner is None:
            _leave(self._open, self._open_levels, old_free, i)
        self.free[i], self.owner[i] = new_free, new_owner
        _enter(self._buckets, self._levels, new_free, i)
        if new_owner is None:
            _enter(self._open, self._open_levels, new_free, i)

    def take(self, job: str, placement: Placement, gpus_per_replica: int = 1) -> None:
        """Commit a placement (must be feasible; see :meth:`fits`)."""
        distributed = len(placement) > 1
        for i, reps in placement.items():
            owner = job if distributed else self.owner[i]
            self._move(i, self.free[i] - reps * gpus_per_replica, owner)

    def release(self, job: str, placement: Placement, gpus_per_replica: int = 1) -> None:
        """Undo :meth:`take`."""
        distributed = len(placement) > 1
        for i, reps in placement.items():
            owner = None if distributed and self.owner[i] == job else self.owner[i]
            self._move(i, self.free[i] + reps * gpus_per_replica, owner)

    # ---------------------------------------------------------------- queries

    def fits(self, placement: Placement, gpus_per_replica: int = 1) -> bool:
        """Whether a placement (e.g. last round's) can be taken as it is."""
        distributed = len(placement) > 1
        for i, reps in placement.items():
            if reps <= 0 or self.free[i] < reps * gpus_per_replica:
                return False
            if distributed and self.owner[i] is not None:
                return False
        return True

    def place(
        self,
        replicas: int,
        gpus_per_replica: int = 1,
        prefer: Sequence[int] = (),
        allowed: frozenset[int] | None = None,
    ) -> Placement | None:
        """Where ``replicas`` replicas would go now (fewest nodes), or None if they do not fit.

        Among placements with the fewest nodes, the ``prefer`` nodes (where the job runs or ran)
        win, so a job that keeps or regains its size lands where it was and need not move.
        ``allowed``: the only nodes the job may use (its node pool), None for any.
        """
        if replicas <= 0:
            return {}
        if allowed is not None:
            return self._place_within(replicas, gpus_per_replica, prefer, allowed)
        need = replicas * gpus_per_replica
        if need <= self.max_gpus:
            for i in prefer:
                if self.free[i] >= need:
                    return {i: replicas}
            at = bisect_left(self._levels, need)  # best fit: the fewest free GPUs that fit
            if at < len(self._levels):
                return {next(iter(self._buckets[self._levels[at]])): replicas}
        best = self._spread(replicas, gpus_per_replica, ())
        if best is not None and prefer:
            mine = self._spread(replicas, gpus_per_replica, prefer)
            if mine is not None and len(mine) <= len(best):
                return mine
        return best

    def _place_within(
        self, replicas: int, gpus_per_replica: int, prefer: Sequence[int], allowed: frozenset[int]
    ) -> Placement | None:
        """:meth:`place`'s rules over the ``allowed`` nodes only: a preferred node that fits,
        else the best fit, else the preferred then the emptiest open nodes. A scan of the
        allowed nodes rather than the buckets (which hold every node): jobs confined to a pool
        are few, and their pools small next to the cluster."""
        need = replicas * gpus_per_replica
        mine = [i for i in dict.fromkeys(prefer) if i in allowed]
        for i in mine:
            if self.free[i] >= need:
                return {i: replicas}
        fitting = [i for i in sorted(allowed) if self.free[i] >= need]
        if fitting:
            return {min(fitting, key=lambda i: (self.free[i], i)): replicas}
        rest = sorted((i for i in allowed if i not in mine), key=lambda i: (-self.free[i], i))
        placement: Placement = {}
        left = replicas
        for i in (*mine, *rest):
            per_node = self.free[i] // gpus_per_replica
            if self.owner[i] is not None or per_node <= 0:
                continue
            placement[i] = min(per_node, left)
            left -= placement[i]
            if left == 0:
                return placement
        return None

    def _spread(
        self, replicas: int, gpus_per_replica: int, prefer: Sequence[int]
    ) -> Placement | None:
        """Multi-node placement: preferred open nodes first, then the emptiest open nodes."""
        placement: Placement = {}
        left = replicas
        for i in prefer:
            per_node = self.free[i] // gpus_per_replica
            if self.owner[i] is None and per_node > 0 and i not in placement:
                placement[i] = min(per_node, left)
                left -= placement[i]
                if left == 0:
                    return placement
        for f in reversed(self._open_levels):
            per_node = f // gpus_per_replica
            if per_node == 0:
                break
            for i in self._open[f]:
                if i in placement:
                    continue
                take = min(per_node, left)
                placement[i] = take
                left -= take
                if left == 0:
                    return placement
        return None

    def to_names(self, placement: Placement) -> list[str]:
        """One node name per replica, nodes in index order."""
        return [self.names[i] for i in sorted(placement) for _ in range(placement[i])]

    def from_names(self, node_names: Sequence[str]) -> Placement | None:
        """Inverse of :meth:`to_names`; None if a node no longer exists."""
        placement: Placement = {}
        for name in node_names:
            i = self.index.get(name)
            if i is None:
                return None
            placement[i] = placement.get(i, 0) + 1
        return placement


def _enter(buckets: list[dict[int, None]], levels: list[int], free: int, node: int) -> None:
    bucket = buckets[free]
    if not bucket:
        insort(levels, free)
    bucket[node] = None


def _leave(buckets: list[dict[int, None]], levels: list[int], free: int, node: int) -> None:
    bucket = buckets[free]
    del bucket[node]
    if not bucket:
        del levels[bisect_left(levels, free)]


def validate_allocation(
    allocation: Mapping[str, Sequence[str]],
    nodes: Sequence[NodeInfo],
    gpus_per_replica: Mapping[str, int] | None = None,
) -> list[str]:
    """Human-readable violations of the placement rules (empty when the allocation is valid)."""
    gpr = gpus_per_replica or {}
    cap = {node.name: node.gpus for node in nodes}
    used: dict[str, int] = {}
    multi: dict[str, list[str]] = {}
    problems: list[str] = []
    for job, names in allocation.items():
        distinct = sorted(set(names))
        for name in names:
            if name not in cap:
                problems.append(f"{job}: unknown node {name}")
                continue
            used[name] = used.get(name, 0) + gpr.get(job, 1)
        if len(distinct) > 1:
            for name in distinct:
                multi.setdefault(name, []).append(job)
    for name, n in used.items():
        if n > cap.get(name, 0):
            problems.append(f"{name}: {n} GPUs allocated, {cap.get(name, 0)} available")
    for name, jobs in multi.items():
        if len(jobs) > 1:
            problems.append(f"{name}: shared by distributed jobs {sorted(jobs)}")
    return problems
