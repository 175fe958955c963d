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

from collections.abc import Sequence

import numpy as np

from adl.sched.goodput import PerfParams, sync_time
from adl.sched.policy_goodput import RowParams, row_params, search_rows
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
        fill: bool = True,
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
            if fill:  # else by :func:`fill_first` (or the first lookup), with other tables
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
        self._store(upto, _model_goodput(self.fn, self.profiled, ks, limit))

    def _store(self, upto: int, good: np.ndarray) -> None:
        """Rows ``covered + 1 .. upto`` from their best goodput (columns: one node, several)."""
        assert self.rows is not None and isinstance(self.fn, SpeedupFunction)
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
    return _models_goodput([(fn, profiled, ks, one_node_upto)])[0]


def _models_goodput(
    items: Sequence[tuple[SpeedupFunction, int, np.ndarray, int | None]],
) -> list[np.ndarray]:
    """:func:`_model_goodput` of many jobs, their rows searched together (one search for
    those with gradient accumulation, one for those without): a search costs mostly its
    fixed overhead at the few rows a new table starts with."""
    out: list[np.ndarray] = [np.empty((0, 2))] * len(items)
    for accumulate in (False, True):
        group = [
            i for i, item in enumerate(items) if item[0].goodput_fn.bounds.gradient_accumulation
        ]
        if not accumulate:
            group = sorted(set(range(len(items))) - set(group))
        if not group:
            continue
        sizes = [len(items[i][2]) for i in group]
        ks = np.concatenate([items[i][2] for i in group])
        if len(group) == 1:  # one job: its numbers as they are
            fn, profiled, _, limit = items[group[0]]
            gf = fn.goodput_fn
            perf, frozen = gf.perf, frozen_sync(gf.perf, profiled)
            prof: float | np.ndarray = float(profiled)
            upto: float | np.ndarray = np.inf if limit is None else float(limit)
            params = row_params(gf.perf, gf.grad, gf.bounds)
        else:
            gfs = [items[i][0].goodput_fn for i in group]
            perf = _column_perf([g.perf for g in gfs], sizes)
            frozen = _column_perf(
                [frozen_sync(g.perf, items[i][1]) for g, i in zip(gfs, group, strict=True)],
                sizes,
            )
            prof = np.repeat([float(items[i][1]) for i in group], sizes)
            limits = [items[i][3] for i in group]
            upto = np.repeat([np.inf if x is None else float(x) for x in limits], sizes)
            each = [row_params(g.perf, g.grad, g.bounds) for g in gfs]
            params = RowParams(
                perf=perf,
                **{
                    name: np.repeat([getattr(p, name) for p in each], sizes)[:, None]
                    for name in RowParams._fields[1:]
                },
            )
        sync = sync_time(perf, _NODE_REGIMES, ks[:, None])
        # above what it profiled (when it profiled anything): optimistic
        above = (ks > prof) & (prof > 0)
        if np.any(above):
            # Goodput falls as sync time grows, so valuing a row at the faster of the two sync
            # times is the better of the two models there, in one search.
            hopeful_perf = frozen if np.ndim(prof) == 0 else _rows_of(frozen, above)
            hopeful = sync_time(hopeful_perf, _NODE_REGIMES, ks[above][:, None])
            sync[above] = np.minimum(sync[above], hopeful)
        wide = ks > upto
        sync[wide, 0] = np.nan  # not searched
        good = search_rows(params, accumulate, ks, sync)
        good[wide, 0] = good[wide, 1]
        for i, part in zip(group, np.split(good, np.cumsum(sizes)[:-1]), strict=True):
            out[i] = part
    return out


def _column_perf(perfs: Sequence[PerfParams], sizes: Sequence[int]) -> PerfParams:
    """Each parameter as a column, one number per row (``sizes``: rows per job)."""
    columns = np.repeat(np.array(perfs, dtype=np.float64), sizes, axis=0)
    return PerfParams(*(columns[:, f : f + 1] for f in range(len(PerfParams._fields))))  # type: ignore[arg-type]


def _rows_of(perf: PerfParams, rows: np.ndarray) -> PerfParams:
    return PerfParams(*(np.asarray(x)[rows] for x in perf))


def fill_first(tables: Sequence[SpeedupTable]) -> None:
    """Tabulate the first rows (those a table's first lookup fills) of every fitted-model
    table not yet filled, searched together (:data:`_TABLES_PER_SEARCH` at a time): the
    same numbers as one by one."""
    todo = [t for t in tables if t.rows is not None and t.covered == 0]
    todo = list({id(t): t for t in todo}.values())  # a table shared by jobs, once
    items: list[tuple[SpeedupFunction, int, np.ndarray, int | None]] = []
    for t in todo:
        assert isinstance(t.fn, SpeedupFunction)  # tables with rows tabulate a fitted model
        ks = np.arange(1, min(8, t.cap) + 1, dtype=np.float64)
        items.append((t.fn, t.profiled, ks, t.per_node if t.one_node_fits else None))
    for start in range(0, len(items), _TABLES_PER_SEARCH):
        block = items[start : start + _TABLES_PER_SEARCH]
        for table, item, good in zip(todo[start:], block, _models_goodput(block), strict=False):
            table._store(len(item[2]), good)


#: new tables searched together: a few hundred rows keep a search's arrays in the CPU's
#: cache (1000 new tables: 142 ms 64 at a time, 320 ms all at once, 421 ms one by one)
_TABLES_PER_SEARCH = 64

#: node counts standing for the two sync regimes: within one node, across several
_NODE_REGIMES = np.array([1.0, 2.0])
