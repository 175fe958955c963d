"""The policy interface shared by the simulator, the operator and the local backend."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: job name -> one node name per replica (GPU). A job absent or with [] holds no GPUs.
Allocation = dict[str, list[str]]

#: speedup(num_nodes, num_replicas) -> speedup relative to 1 replica on 1 node; vectorized.
SpeedupFn = Callable[[ArrayLike, ArrayLike], NDArray[np.float64]]


def linear_speedup(num_nodes: ArrayLike, num_replicas: ArrayLike) -> NDArray[np.float64]:
    """Optimistic prior used before a job has reported anything."""
    del num_nodes
    return np.asarray(num_replicas, dtype=np.float64)


class JobMode(StrEnum):
    """How a job chooses its batch size and replica count; a policy's registry entry says
    which its jobs use (``adl.sched.registry.PolicyEntry.job_mode``: adaptive unless it says
    otherwise, as the fixed-size baselines do)."""

    ADAPTIVE = "adaptive"  # batch re-picked for goodput; any replica count the policy gives
    FIXED_BATCH = "fixed_batch"  # the workload's batch size; replica count from the policy
    FIXED = "fixed"  # the workload's batch size and replica count (all or nothing)


@dataclass(frozen=True)
class NodeInfo:
    """A schedulable node: how many GPUs (or CPU slots) the policy may hand out on it, and of
    which type (``gpu_type``: e.g. ``NVIDIA-A100-SXM4-80GB``; "" = unknown, as on a uniform
    cluster). A job's replicas are all of one type: the slowest GPU would pace every step."""

    name: str
    gpus: int
    preemptible: bool = False
    gpu_type: str = ""


@dataclass(frozen=True)
class JobInfo:
    """What the policy knows about one job: only what a real job could report.

    ``remaining_s`` is the job's own estimate of the seconds it still needs on the baseline
    configuration (1 replica on 1 node, best batch size), or None when the job did not declare
    its length; time at (N, K) is then ``remaining_s / speedup(N, K)``. ``kind`` groups
    similar jobs (application, image or user label) for the driver's remaining-work history.
    """

    name: str
    speedup: SpeedupFn = linear_speedup
    min_replicas: int = 0
    max_replicas: int = 64
    weight: float = 1.0
    age_s: float = 0.0
    restarts: int = 0
    restart_cost_s: float = 30.0
    attained_service_s: float = 0.0  # GPU-seconds received so far
    remaining_s: float | None = None
    #: when ``remaining_s`` is not declared: the driver's prediction from completed jobs of
    #: the same kind (:mod:`adl.sched.work_history`), or None when it has none
    expected_remaining_s: float | None = None
    #: how many completed jobs of its kind ``expected_remaining_s`` averages (for the
    #: decision log; 0 with no prediction)
    predicted_from: int = 0
    max_profiled_replicas: int = 0
    preemptible: bool = True
    gpus_per_replica: int = 1
    submit_order: int = 0  # tie-breaker: earlier submissions first
    priority: int = 0  # strict tiers: higher-priority jobs are served first
    kind: str = ""  # similar jobs share a kind; "" = none
    #: the only nodes this job may run on (a node pool: the nodes of the flavor an outside
    #: quota manager admitted it on), or None: any node it is given. A policy that does not
    #: read it is kept to it by the round (``adl.controller.rounds.plan_round``).
    nodes: frozenset[str] | None = None
    #: the GPU types the job may run on (``spec.gpuTypes``); empty = any
    gpu_types: tuple[str, ...] = ()
    #: speed of the job on each GPU type relative to its measured model (``speedup``): its
    #: speedup on ``type`` at (N, K) is ``type_speed[type] * speedup(N, K)``. A type not
    #: listed counts as 1.0, an estimate (the job has not run there)
    type_speed: Mapping[str, float] = field(default_factory=dict, hash=False)
    #: the types of ``type_speed`` valued optimistically for the job to try them, not measured
    #: (``adl.sched.type_explore``); a decision that moves it there says so
    exploring: tuple[str, ...] = ()
    #: the types of ``type_speed`` estimated from other jobs of its kind, not measured by it
    #: (``adl.sched.type_history``)
    estimated_types: tuple[str, ...] = ()

    def speed_on(self, gpu_type: str) -> float:
        """The job's relative speed on ``gpu_type`` (1.0 where unknown)."""
        value = self.type_speed.get(gpu_type, 1.0)
        return value if value > 0 and value == value and value != float("inf") else 1.0

    def may_use(self, gpu_type: str) -> bool:
        """Whether the job may run on GPUs of ``gpu_type`` (``spec.gpuTypes``)."""
        return not self.gpu_types or gpu_type in self.gpu_types


class Policy(Protocol):
    """A scheduling policy: pure and deterministic for a given seed."""

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation: ...


class RanksByPredictedRemaining(Protocol):
    """The method of the capability ``PolicyEntry.ranks_by_prediction`` (asked only of a
    policy whose registry entry declares it: ``registry.prediction_ranker``): the policy may
    rank jobs of undeclared length by the driver's prediction (``JobInfo.expected_remaining_s``).
    Only then does a decision name the prediction; a policy without it (the baselines), or one
    that turned it off, never read it."""

    def ranks_by_predicted_remaining(self) -> bool: ...
