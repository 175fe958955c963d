"""The policy's per-round view of one job (:class:`RoundJob`) and the small lookups every part
of the round shares: a job's packed speedup, a placement's key, GPU type and speed.

:class:`adl.sched.policy.AdlPolicy` builds a :class:`RoundJob` for every job at the start of a
round (:mod:`adl.sched.policy_prepare`), and its solvers (:mod:`adl.sched.policy_moves`,
:mod:`adl.sched.policy_solvers`) assign placements to them in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from adl.sched.placement import Placement
from adl.sched.speedup_table import SpeedupTable
from adl.sched.types import JobInfo


class MovedValues:
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
class RoundJob:
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
    #: this round's values, each computed once (:meth:`PolicyMoves._value`): of every moved
    #: placement, by GPU speed, where the table holds a fitted model (row 0 on one node, row
    #: 1 on several, a column per replica count the table covers), and of any other by
    #: (nodes, replicas, moved, speed). The copies the solvers make share them.
    moved_values: dict[float, MovedValues] = field(default_factory=dict)
    memo: dict[tuple[int, int, bool, float], float] = field(default_factory=dict)
    #: the greedy's target counts by (replicas held, replicas per node)
    targets: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    @property
    def gpr(self) -> int:
        """GPUs per replica (at least 1: a CPU-only job still takes a slot)."""
        return max(self.info.gpus_per_replica, 1)


#: a number, or an array of them (the value's arithmetic runs on either)
Num = float | NDArray[np.float64]


def packed_speedup(job: RoundJob, per_node: int, count: int) -> float:
    """The job's speedup on ``count`` replicas packed on the fewest nodes of ``per_node``."""
    return job.table.get(-(-count // per_node), count, job.cap)


def unplaced_copies(jobs: Sequence[RoundJob]) -> list[RoundJob]:
    """Copies of ``jobs`` holding nothing, for another solve of the same round."""
    return [replace(j, placement={}, replicas=0, utility=0.0) for j in jobs]


def placement_key(placement: Placement) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(placement.items()))


def placement_type(job: RoundJob, placement: Placement) -> str:
    """The GPU type of a (non-empty, one-type) placement of ``job``."""
    return job.node_types[next(iter(placement))]


def placement_speed(job: RoundJob, placement: Placement) -> float:
    """The job's relative speed on a placement's GPU type (1.0 for an empty placement)."""
    if job.one_speed:
        return job.one_speed
    for i in placement:
        return job.speeds.get(job.node_types[i], 1.0)
    return 1.0
