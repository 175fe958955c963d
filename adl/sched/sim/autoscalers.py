"""Autoscalers the elastic simulator compares: how many nodes to ask for after a round.

- :class:`AdlAutoscaler` runs the operator's own rule, :func:`adl.sched.capacity.capacity_asks`
  (the very code ``--ask-capacity`` runs): the GPUs each job would put to good use beyond what
  it holds and what stayed free, packed into nodes of the autoscaler's shape; spot capacity for
  preemptible jobs, on-demand for the others. It empties the nodes the operator's rule
  picks, :func:`adl.sched.emptying.nodes_worth_emptying` (imported too): idle ones and those
  whose replicas fit on free GPUs elsewhere (and, opted in, those whose replicas add less than
  the asks' threshold), on-demand and dear nodes first, a node a round; and it offers them
  again (:func:`adl.sched.emptying.keep_emptying`) rather than launch new nodes once new
  demand would use them.
- :class:`PolluxAutoscaler` sizes the cluster the way Pollux (OSDI '21; AdaptDL's scheduler)
  does: keep the *cluster utility* (the jobs' speedups over the GPUs of the nodes in use) inside
  a band, 0.35-0.65; outside it, pick among cluster sizes up to twice today's the one whose best
  allocation's utility is nearest the band's middle (at least its floor; the larger on a tie),
  and empty the nodes beyond that size (Pollux allocates on the first ``desired`` nodes only).
  Pollux finds each size's best allocation with its genetic search; here it is a greedy
  water-fill on the same speedup models (every next GPU to the job it speeds up most), which is
  the optimum for concave speedups and close to it otherwise.

Both answer a :class:`ScaleDecision`; the nodes themselves are :mod:`adl.sched.sim.elastic`'s.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from adl.sched.capacity import CapacityRule, capacity_asks
from adl.sched.emptying import keep_emptying, nodes_worth_emptying
from adl.sched.types import JobInfo, NodeInfo


@dataclass(frozen=True)
class ClusterView:
    """What an autoscaler sees after a round: the jobs as the policy saw them, the round's
    allocation, the nodes offered to it, the nodes asked for but not ready yet, the cap."""

    infos: Sequence[JobInfo]
    allocation: Mapping[str, Sequence[str]]
    nodes: Sequence[NodeInfo]
    pending_spot: int
    pending_on_demand: int
    node_gpus: int
    max_nodes: int
    #: nodes being emptied: offered to no job until consolidation removes them
    emptying: Sequence[NodeInfo] = ()
    #: $/h of each node (ready and emptying ones)
    prices: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ScaleDecision:
    """Nodes to launch now, and (Pollux) how many of the ready nodes to keep offering: the
    rest are emptied and left to consolidation (None: keep them all); (adl) which ready
    nodes to empty by name, and whether the nodes being emptied are offered again."""

    launch_spot: int = 0
    launch_on_demand: int = 0
    keep: int | None = None
    empty: tuple[str, ...] = ()
    release: bool = False


class Autoscaler(Protocol):
    def decide(self, view: ClusterView) -> ScaleDecision: ...


@dataclass(frozen=True)
class AdlAutoscaler:
    """The operator's capacity rule, answering in nodes (see the module docstring)."""

    min_marginal_speedup: float = 0.5
    #: preemptible jobs' placeholders prefer spot (the operator's default); off: on-demand
    spot: bool = True
    #: nodes emptied a round at most (the operator's ``--capacity-empty-per-round``); 0: none
    max_emptied_per_round: int = 1
    #: emptying may drop replicas that add too little (``CapacityRule.drop_low_value``)
    drop_low_value: bool = False

    def decide(self, view: ClusterView) -> ScaleDecision:
        g = view.node_gpus
        rule = CapacityRule(
            self.min_marginal_speedup,
            max_gpus=view.max_nodes * g,
            node_gpus=g,
            max_emptied_per_round=self.max_emptied_per_round,
            drop_low_value=self.drop_low_value,
        )
        nodes: Sequence[NodeInfo] = view.nodes
        release = not keep_emptying(view.infos, view.allocation, nodes, view.emptying, rule)
        if release:  # new demand: the nodes being emptied cover it before new ones do
            nodes = [*nodes, *view.emptying]
        asks = capacity_asks(view.infos, view.allocation, nodes, rule)
        empty: tuple[str, ...] = ()
        if not release:
            chosen = nodes_worth_emptying(
                view.infos, view.allocation, view.nodes, rule, prices=view.prices
            )
            empty = tuple(c.node for c in chosen)
        preemptible = {i.name: i.preemptible for i in view.infos}
        spot_gpus = sum(a.gpus for a in asks if self.spot and preemptible.get(a.job, True))
        od_gpus = sum(a.gpus for a in asks) - spot_gpus
        # Karpenter packs the pending placeholders onto new nodes, and nodes already on
        # their way carry placeholders nominated to them: only the rest needs new nodes
        return ScaleDecision(
            launch_spot=max(math.ceil(spot_gpus / g) - view.pending_spot, 0),
            launch_on_demand=max(math.ceil(od_gpus / g) - view.pending_on_demand, 0),
            empty=empty,
            release=release,
        )


def cluster_utility(
    infos: Sequence[JobInfo], allocation: Mapping[str, Sequence[str]], node_gpus: Mapping[str, int]
) -> float | None:
    """Pollux's cluster utility of an allocation: the jobs' speedups (relative to one GPU)
    summed, over the GPUs of the nodes that hold a replica; None when no node does."""
    used = {n for held in allocation.values() for n in held}
    total = sum(node_gpus.get(n, 0) for n in used)
    if total <= 0:
        return None
    gain = 0.0
    for info in infos:
        held = allocation.get(info.name, ())
        if held:
            gain += _relative_speedup(info, len(set(held)), len(held))
    return gain / total


def _relative_speedup(info: JobInfo, nodes: int, replicas: int) -> float:
    base = float(np.asarray(info.speedup(1, 1), dtype=np.float64))
    value = float(np.asarray(info.speedup(nodes, replicas), dtype=np.float64))
    if not (math.isfinite(base) and math.isfinite(value)) or base <= 0:
        return float(replicas)  # a model that answers nothing usable: the linear prior
    return value / base


def utility_by_size(infos: Sequence[JobInfo], node_gpus: int, max_nodes: int) -> list[float]:
    """Utility of the best allocation on 1..``max_nodes`` nodes of ``node_gpus`` GPUs (index
    ``n - 1``): GPUs handed out one at a time to the job whose speedup the next replica
    raises most, each job within twice what it has run on (as Pollux grows jobs) and its
    ``max_replicas``; a size some GPUs of which no job can use counts the nodes in use only."""
    total = max_nodes * node_gpus
    curves: list[np.ndarray] = []
    for info in infos:
        cap = min(info.max_replicas, max(2 * info.max_profiled_replicas, 1), total)
        k = np.arange(1, cap + 1)
        speed = np.asarray(info.speedup(np.ceil(k / node_gpus), k), dtype=np.float64)
        base = float(speed[0]) if len(speed) else 0.0
        if speed.shape != k.shape or not np.all(np.isfinite(speed)) or base <= 0:
            speed, base = k.astype(np.float64), 1.0
        curves.append(np.diff(np.concatenate(([0.0], speed / base))))
    heap = [(-float(c[0]), j, 0) for j, c in enumerate(curves) if len(c) and c[0] > 0]
    heapq.heapify(heap)
    given: list[float] = []  # the speedup each next GPU adds
    while heap and len(given) < total:
        neg, j, i = heapq.heappop(heap)
        given.append(-neg)
        if i + 1 < len(curves[j]) and curves[j][i + 1] > 0:
            heapq.heappush(heap, (-float(curves[j][i + 1]), j, i + 1))
    cumulative = np.cumsum(given) if given else np.zeros(0)
    out = []
    for n in range(1, max_nodes + 1):
        used = min(n * node_gpus, len(given))
        active = math.ceil(used / node_gpus) * node_gpus
        out.append(float(cumulative[used - 1]) / active if used else 0.0)
    return out


def band_size(
    current: int, utility_now: float | None, by_size: Sequence[float], band: tuple[float, float]
) -> int:
    """Pollux's desired cluster size: ``current`` while the utility of today's allocation is
    within ``band``; else the size (``by_size[n - 1]``) whose utility is nearest the band's
    middle among those at least its floor, the larger on a tie; ``current`` if none is."""
    low, high = band
    if current and utility_now is not None and low <= utility_now <= high:
        return current
    middle = (low + high) / 2
    best, best_gap = current, math.inf
    for n, util in enumerate(by_size, start=1):
        if util < low:
            continue
        gap = abs(util - middle)
        if gap < best_gap - 1e-9 or (abs(gap - best_gap) <= 1e-9 and n > best):
            best, best_gap = n, gap
    return best


@dataclass(frozen=True)
class PolluxAutoscaler:
    """Pollux's utility band (see the module docstring); its nodes are spot or on-demand."""

    band: tuple[float, float] = (0.35, 0.65)
    spot: bool = True

    def __post_init__(self) -> None:
        low, high = self.band
        if not 0 < low < high <= 1:
            raise ValueError(f"the utility band must satisfy 0 < low < high <= 1, not {self.band}")

    def decide(self, view: ClusterView) -> ScaleDecision:
        current = len(view.nodes)
        if not view.infos:
            return ScaleDecision()  # nothing to size for: empty nodes go by consolidation
        gpus = {n.name: n.gpus for n in view.nodes}
        now = cluster_utility(view.infos, view.allocation, gpus)
        limit = min(max(2 * current, 1), view.max_nodes)
        desired = band_size(
            current, now, utility_by_size(view.infos, view.node_gpus, limit), self.band
        )
        pending = view.pending_spot + view.pending_on_demand
        launch = max(desired - current - pending, 0)
        keep = desired if desired < current else None
        if self.spot:
            return ScaleDecision(launch_spot=launch, keep=keep)
        return ScaleDecision(launch_on_demand=launch, keep=keep)


def nodes_to_empty(
    nodes: Sequence[NodeInfo], allocation: Mapping[str, Sequence[str]], keep: int
) -> list[str]:
    """The ready nodes beyond the first ``keep`` to stop offering: the least used first (the
    fewest replicas to move), the newest among equals."""
    used = Counter(n for held in allocation.values() for n in held)
    newest_first = sorted(nodes, key=lambda n: n.name, reverse=True)  # names grow with launches
    order = sorted(newest_first, key=lambda n: used[n.name])  # stable: newest first on ties
    surplus = max(len(nodes) - keep, 0)
    return [n.name for n in order[:surplus]]
