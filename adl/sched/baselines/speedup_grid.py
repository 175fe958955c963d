"""Speedups of a job over a whole (nodes, replicas) grid, for baselines that score many
allocations at once (Pollux's genetic search, Sia's configuration matrix).

A job's fitted goodput model (:class:`SpeedupFunction`) depends on the node count only through
"one node or several" (sync within a node or across nodes), so its grid is two rows filled by
the same fast batch search adl's policy uses (:class:`SpeedupTable`, with no optimism above
what the job profiled: the baselines take the model as it is). Any other function (the linear
prior of a job that has not run yet, test functions) is evaluated on the grid in one vector
call. Grids are cached per function object for as long as a job keeps reporting it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from adl.sched.speedup import SpeedupFunction
from adl.sched.speedup_table import SpeedupTable
from adl.sched.types import SpeedupFn

Grid = NDArray[np.float64]


def _tabulate(fn: SpeedupFn, max_nodes: int, max_replicas: int, per_node: int) -> Grid:
    """``grid[n, k]``: speedup of ``fn`` at ``n`` nodes and ``k`` replicas (0 where impossible:
    no replicas, or more nodes than replicas)."""
    grid = np.zeros((max_nodes + 1, max_replicas + 1))
    if max_replicas < 1 or max_nodes < 1:
        return grid
    if isinstance(fn, SpeedupFunction):
        table = SpeedupTable(fn, per_node, profiled=0, cap=max_replicas)
        table.get(1, max_replicas, max_replicas)  # fills both rows up to max_replicas
        assert table.rows is not None
        grid[1, :] = table.rows[0]
        grid[2:, :] = table.rows[1]
    else:
        ns, ks = np.meshgrid(
            np.arange(1, max_nodes + 1), np.arange(1, max_replicas + 1), indexing="ij"
        )
        values = np.asarray(fn(ns.ravel(), ks.ravel()), dtype=np.float64).reshape(ns.shape)
        grid[1:, 1:] = values
    n_idx, k_idx = np.indices(grid.shape)
    grid[(n_idx > k_idx) | (k_idx == 0)] = 0.0
    return np.nan_to_num(np.maximum(grid, 0.0), nan=0.0, posinf=0.0)


class SpeedupGrids:
    """Per-round cache of speedup grids, keyed by the function object and the grid's shape;
    grids of functions no job reported this round are dropped at the next :meth:`new_round`."""

    def __init__(self) -> None:
        self._grids: dict[tuple[int, int, int, int], tuple[SpeedupFn, Grid]] = {}
        self._used: dict[tuple[int, int, int, int], tuple[SpeedupFn, Grid]] = {}

    def new_round(self) -> None:
        self._grids, self._used = self._used, {}

    def grid(self, fn: SpeedupFn, max_nodes: int, max_replicas: int, per_node: int) -> Grid:
        key = (id(fn), max_nodes, max_replicas, per_node)
        hit = self._used.get(key) or self._grids.get(key)
        if hit is None or hit[0] is not fn:
            hit = (fn, _tabulate(fn, max_nodes, max_replicas, per_node))
        self._used[key] = hit  # keeping fn keeps its id unique while the entry lives
        return hit[1]
