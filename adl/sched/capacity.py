"""How many more GPUs the jobs would put to good use: the demand adl shows an autoscaler.

A fixed cluster is shared out by the policy; an elastic one can also grow. After a round, each
job's *wanted* size is the largest replica count whose last replica still adds at least
``min_marginal_speedup`` of one GPU's throughput to the job (from the job's own speedup model,
the one the policy ranks it by), within its ``max_replicas`` and within what it has shown it
can use: a job asks for at most twice the replicas it has run on (the policy's own
exploration ramp), so a job that has reported nothing asks for its minimum only, not for the
linear prior's ``max_replicas``. What the round gave it and the GPUs that stayed free are
subtracted; what is left, within the cluster's cap, is asked of the autoscaler.

Pure: the operator turns the asks into pending pods (``adl.operator.capacity_pods``), which is
what Karpenter and cluster-autoscaler read. This is Pollux's idea of sizing the cluster by the
jobs' utility, with the band replaced by a per-GPU threshold on the same speedup models: a GPU
is worth adding when it adds at least that share of a GPU of progress.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adl.sched.types import JobInfo, NodeInfo

#: bounds of the rule's numbers (chart values and flags are checked against them)
MAX_NODE_GPUS = 64
MAX_CLUSTER_GPUS = 100_000
MAX_EMPTIED_PER_ROUND = 64


@dataclass(frozen=True)
class CapacityRule:
    """When the jobs' gain is worth more GPUs, and how many at most."""

    #: a GPU is asked for only if it adds at least this share of one GPU's throughput to
    #: its job (0 < x <= 1; 0.5: Pollux's utility band's middle)
    min_marginal_speedup: float = 0.5
    #: the most GPUs the cluster may have, asked-for ones included (0: no cap)
    max_gpus: int = 0
    #: GPUs on a node the autoscaler adds: how replicas spread over nodes, for the speedup
    node_gpus: int = 8
    #: nodes the rule may choose to empty after one round (``adl.sched.emptying``): their
    #: replicas add too little or fit elsewhere, so the autoscaler can remove them once
    #: empty; 0: never empty a node. Small, so the cluster shrinks a node at a time
    max_emptied_per_round: int = 1
    #: emptying may also drop replicas that add less than ``min_marginal_speedup`` (the job
    #: shrinks); off: only idle nodes and replicas that fit on free GPUs elsewhere go. Off by
    #: default: in the simulator, dropping made the policy re-plan the rest of the cluster
    #: around the lost GPUs, doubling restarts and lengthening JCT ~25 % (docs/results.md)
    drop_low_value: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_marginal_speedup <= 1:
            raise ValueError(
                f"min_marginal_speedup must be in (0, 1], not {self.min_marginal_speedup}"
            )
        if not 0 <= self.max_gpus <= MAX_CLUSTER_GPUS:
            raise ValueError(f"max_gpus must be in [0, {MAX_CLUSTER_GPUS}], not {self.max_gpus}")
        if not 1 <= self.node_gpus <= MAX_NODE_GPUS:
            raise ValueError(f"node_gpus must be in [1, {MAX_NODE_GPUS}], not {self.node_gpus}")
        if not 0 <= self.max_emptied_per_round <= MAX_EMPTIED_PER_ROUND:
            raise ValueError(
                f"max_emptied_per_round must be in [0, {MAX_EMPTIED_PER_ROUND}], "
                f"not {self.max_emptied_per_round}"
            )


@dataclass(frozen=True)
class CapacityAsk:
    """``replicas`` more replicas of ``gpus_per_replica`` GPUs each for ``job``; ``why`` says
    so in words (it is shown on the job)."""

    job: str
    replicas: int
    gpus_per_replica: int
    why: str

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


def replica_gains(info: JobInfo, rule: CapacityRule, upto: int) -> np.ndarray | None:
    """What each of the job's replicas 1..``upto`` adds, in GPUs of throughput (index
    ``k - 1``: replica ``k``; the first adds 1.0), from its speedup model with the replicas
    packed onto nodes of ``rule.node_gpus`` GPUs; None when the model answers nothing usable.
    The one measure of a replica's value that asking and emptying both use."""
    n = np.arange(1, max(upto, 1) + 1)
    per_node = max(rule.node_gpus // max(info.gpus_per_replica, 1), 1)
    speed = np.asarray(info.speedup(np.ceil(n / per_node), n), dtype=np.float64)
    if speed.shape != n.shape or not np.all(np.isfinite(speed)):
        return None
    return np.diff(np.concatenate(([0.0], speed))) / max(float(speed[0]), 1e-12)


def wanted_replicas(info: JobInfo, rule: CapacityRule) -> tuple[int, float]:
    """The job's wanted replica count under ``rule``, and the marginal gain of its last
    replica (in GPUs of throughput; 1.0 for a job at its minimum)."""
    floor = max(info.min_replicas, 1)
    cap = min(info.max_replicas, max(2 * info.max_profiled_replicas, floor))
    if cap <= floor:
        return floor, 1.0
    gains = replica_gains(info, rule, cap)
    if gains is None:
        return floor, 1.0  # a model that answers nothing usable: only the minimum is certain
    wanted, gain = floor, 1.0
    for k in range(floor, cap):  # replica k + 1
        if gains[k] < rule.min_marginal_speedup:
            break
        wanted, gain = k + 1, float(gains[k])
    return wanted, gain


def capacity_asks(
    infos: Sequence[JobInfo],
    allocation: Mapping[str, Sequence[str]],
    nodes: Sequence[NodeInfo],
    rule: CapacityRule,
) -> list[CapacityAsk]:
    """What to ask the autoscaler for after a round that gave ``allocation`` on ``nodes``
    (jobs in ``infos``' order, higher priority first, then earlier submissions). GPUs the
    round left free cover wants first: the policy left them free for its own reasons (a
    restart that does not pay yet, a pool), and asking for more while they idle would only
    add idle nodes."""
    gpr_of = {i.name: max(i.gpus_per_replica, 1) for i in infos}
    used = sum(len(placed) * gpr_of.get(job, 1) for job, placed in allocation.items())
    total = sum(max(n.gpus, 0) for n in nodes)
    free = max(total - used, 0)
    room = (rule.max_gpus - total) if rule.max_gpus else math.inf
    asks: list[CapacityAsk] = []
    for info in sorted(infos, key=lambda i: (-i.priority, i.submit_order, i.name)):
        gpr = max(info.gpus_per_replica, 1)
        wanted, gain = wanted_replicas(info, rule)
        have = len(allocation.get(info.name, ()))
        missing = max(wanted - have, 0)
        covered = min(missing, free // gpr)
        free -= covered * gpr
        missing -= covered
        if room != math.inf:
            missing = min(missing, int(room // gpr))
        if missing <= 0:
            continue
        room -= missing * gpr
        why = (
            f"{wanted} replicas would run it faster (the last adds {gain:.2f} of a GPU's "
            f"throughput, at least {rule.min_marginal_speedup:g} asked), it holds {have}: "
            f"asked the autoscaler for {missing * gpr} GPUs"
        )
        asks.append(CapacityAsk(info.name, missing, gpr, why))
    return asks
