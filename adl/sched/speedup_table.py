"""Per-job speedup lookups for the policy's inner loop: array reads, filled by one vector call.

Two kinds of speedup functions reach the policy:

- a fitted goodput model (:class:`SpeedupFunction`): its speedup depends on the node count only
  through "one node or several" (sync within a node vs across nodes), so the whole curve is two
  rows over ``K = 1..cap``, filled in doubling chunks with the fast batch search of
  :mod:`adl.sched.policy_goodput`. Above the job's profiled replica count the row is optimistic
  (see :mod:`adl.sched.policy_optimism`);
- anything else (the linear prior, test functions): tabulated lazily per (nodes, replicas).
"""

from __future__ import annotations

import numpy as np

from adl.sched.goodput import sync_time
from adl.sched.policy_goodput import best_goodput_at_sync
from adl.sched.policy_optimism import frozen_sync
from adl.sched.speedup import SpeedupFunction
from adl.sched.types import SpeedupFn


class SpeedupTable:
    """Speedups of one job for the replica counts the policy may give it."""

    __slots__ = (
        "base",
        "cap",
        "covered",
        "fn",
        "one_node_fits",
        "per_node",
        "profiled",
        "rows",
        "values",
    )

    def __init__(
        self,
        fn: SpeedupFn,
        per_node: int,
        profiled: int = 0,
        cap: int = 0,
        one_node_fits: bool = False,
    ) -> None:
        self.fn = fn
        self.per_node = max(per_node, 1)
        self.profiled = profiled
        self.cap = max(cap, 1)
        #: the fast path's one-node row is searched only where one node holds the replicas
        #: (``K <= per_node``): above, no placement is on one node, and the row repeats the
        #: several-node one (the policy's tables; a baseline's grid wants the whole row)
        self.one_node_fits = one_node_fits
        self.values: dict[tuple[int, int], float] = {}
        self.covered = 0  # every K <= covered is tabulated (fast path: both rows)
        self.rows: np.ndarray | None = None  # fast path: rows[multi-node, K]
        self.base = 1.0
        if isinstance(fn, SpeedupFunction):
            self.rows = np.zeros((2, self.cap + 1))
            self._extend_rows(min(8, self.cap))

    def get(self, nodes: int, replicas: int, cap: int) -> float:
        if replicas <= 0:
            return 0.0
        rows = self.rows
        if rows is not None and replicas <= self.cap:
            if replicas > self.covered:  # most jobs only ever need the first few counts
                self._extend_rows(min(max(replicas, 2 * self.covered, 8), self.cap))
            return float(rows[1 if nodes > 1 else 0, replicas])
        key = (nodes, replicas)
        value = self.values.get(key)
        if value is not None:
            return value
        tight = nodes == -(-replicas // self.per_node)
        if rows is None and tight and self.covered < replicas <= 2 * self.covered + 8:
            self._extend(min(max(replicas, 2 * self.covered, 8), max(cap, replicas)))
            return self.values[key]
        value = float(np.asarray(self.fn(nodes, replicas), dtype=np.float64).reshape(-1)[0])
        self.values[key] = value
        return value

    def cover(self, upto: int) -> None:
        """Tabulate every ``K <= upto`` (within the cap) of a fitted model's rows, in the chunks
        that lookups of ``K = 1, 2, ...`` in turn would fill, so that reading a whole row at
        once leaves the table as it was always left."""
        if self.rows is None:
            return
        upto = min(upto, self.cap)
        while self.covered < upto:
            self._extend_rows(min(max(self.covered + 1, 2 * self.covered, 8), self.cap))

    def _extend_rows(self, upto: int) -> None:
        assert self.rows is not None and isinstance(self.fn, SpeedupFunction)
        ks = np.arange(self.covered + 1, upto + 1, dtype=np.float64)
        limit = self.per_node if self.one_node_fits else None
        good = _model_goodput(self.fn, self.profiled, ks, limit)  # columns: one node, several
        if self.covered == 0:  # normalize by the model's own best single-replica goodput
            self.base = float(good[0, 0]) if good[0, 0] > 0 else self.fn.base_goodput
        self.rows[:, self.covered + 1 : upto + 1] = good.T / max(self.base, 1e-300)
        self.covered = upto

    def _extend(self, upto: int) -> None:
        ks = np.arange(self.covered + 1, upto + 1)
        ns = -(-ks // self.per_node)
        values = np.asarray(self.fn(ns, ks), dtype=np.float64).reshape(-1)
        self.values.update(
            zip(zip(ns.tolist(), ks.tolist(), strict=True), values.tolist(), strict=True)
        )
        self.covered = upto


def _model_goodput(
    fn: SpeedupFunction, profiled: int, ks: np.ndarray, one_node_upto: int | None = None
) -> np.ndarray:
    """Best goodput of the job's model at ``ks`` replicas on one node (column 0) and on
    several (column 1); optimistic above ``profiled``. Above ``one_node_upto`` replicas (if
    given) the one-node column repeats the other, unsearched."""
    gf = fn.goodput_fn
    sync = sync_time(gf.perf, _NODE_REGIMES, ks[:, None])
    above = ks > profiled
    if profiled > 0 and np.any(above):
        # Goodput falls as sync time grows, so valuing a row at the faster of the two sync
        # times is the better of the two models there, in one search.
        hopeful = sync_time(frozen_sync(gf.perf, profiled), _NODE_REGIMES, ks[above][:, None])
        sync[above] = np.minimum(sync[above], hopeful)
    wide = None if one_node_upto is None else ks > one_node_upto
    if wide is not None:
        sync[wide, 0] = np.nan  # not searched
    good = best_goodput_at_sync(gf.perf, gf.grad, gf.bounds, ks, sync)
    if wide is not None:
        good[wide, 0] = good[wide, 1]
    return good


#: node counts standing for the two sync regimes: within one node, across several
_NODE_REGIMES = np.array([1.0, 2.0])
