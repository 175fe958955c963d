"""An elastic cluster for the simulator: nodes an autoscaler adds, that cost money and may go.

Opt-in (``SimConfig.elastic``); without it the simulator's cluster is fixed, as before. Life of
a node (one shape, :class:`~adl.sched.sim.cost.NodeShape`):

1. after a round, the autoscaler (:mod:`adl.sched.sim.autoscalers`) asks for it, spot or
   on-demand; the cluster's cap (``max_nodes``) counts the nodes on their way;
2. ``provisioning_s`` later its instance exists and is billed (the autoscaler's batching and
   the cloud's API); ``startup_s`` after that it is ready, and the first round after offers it
   to the policy;
3. it goes when it has held no replica for ``consolidate_after_s`` (consolidation); when the
   autoscaler empties it (Pollux's scale-down, adl's :mod:`adl.sched.emptying`: it is offered
   no more, its jobs move at the next round, and it goes ``consolidate_after_s`` later unless
   adl's autoscaler offers it again first, for new demand); or, a spot node, when the cloud takes it
   back: interruptions come as a Poisson process of ``interruptions_per_node_h`` per spot
   node-hour (seeded), each with ``notice_s`` of notice. The jobs on it checkpoint within the
   notice and restart elsewhere at the next round, paying their restart delay and losing no
   progress; the node is billed until the notice ends.

Everything happens at round boundaries, as the operator acts: a notice (two minutes on AWS)
outlasts a round (60 s), so the next round moves the jobs before the node is gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from adl.sched.sim.autoscalers import (
    AdlAutoscaler,
    Autoscaler,
    ClusterView,
    PolluxAutoscaler,
    nodes_to_empty,
)
from adl.sched.sim.cost import GPU_4X, ClusterBill, NodeLife, NodeShape, bill
from adl.sched.types import JobInfo, NodeInfo

#: autoscalers by name (``ElasticConfig.autoscaler``)
AUTOSCALERS = ("adl", "pollux")
#: bounds of the lifecycle's numbers
MAX_DELAY_S = 3600
MAX_ELASTIC_NODES = 1024
MAX_INTERRUPTIONS_PER_NODE_H = 100.0


@dataclass(frozen=True)
class ElasticConfig:
    """An elastic cluster: its node shape, the autoscaler, delays, consolidation, spot risk."""

    autoscaler: str = "adl"
    shape: NodeShape = GPU_4X
    #: seconds from the ask to the instance existing (billed from then on)
    provisioning_s: int = 60
    #: seconds from the instance existing to the node being ready for work
    startup_s: int = 60
    #: an empty node is removed after this many seconds with no replica
    consolidate_after_s: int = 300
    #: spot interruptions per spot node-hour (a Poisson rate); 0: none
    interruptions_per_node_h: float = 0.05
    #: seconds between an interruption's notice and the node's end (AWS: 120)
    notice_s: int = 120
    #: the most nodes, those on their way included
    max_nodes: int = 16
    #: preemptible jobs' nodes are spot (adl: the placeholders prefer spot; pollux: its
    #: node group is spot); off: every node on-demand
    spot: bool = True
    seed: int = 0
    #: adl's rule: a GPU is asked for when it adds this share of a GPU to its job
    min_marginal_speedup: float = 0.5
    #: Pollux's cluster-utility band
    band: tuple[float, float] = (0.35, 0.65)
    #: adl's rule: nodes emptied a round at most (``adl.sched.emptying``); 0: none
    max_emptied_per_round: int = 1
    #: adl's rule: emptying may drop replicas that add too little (off: only moves)
    drop_low_value: bool = False

    def __post_init__(self) -> None:
        if self.autoscaler not in AUTOSCALERS:
            raise ValueError(f"autoscaler must be one of {AUTOSCALERS}, not {self.autoscaler!r}")
        delays = (self.provisioning_s, self.startup_s, self.consolidate_after_s, self.notice_s)
        if not all(0 <= d <= MAX_DELAY_S for d in delays):
            raise ValueError(f"elastic delays must be in [0, {MAX_DELAY_S}] seconds")
        if not 1 <= self.max_nodes <= MAX_ELASTIC_NODES:
            raise ValueError(f"max_nodes must be in [1, {MAX_ELASTIC_NODES}]")
        if not 0.0 <= self.interruptions_per_node_h <= MAX_INTERRUPTIONS_PER_NODE_H:
            raise ValueError(
                f"interruptions_per_node_h must be in [0, {MAX_INTERRUPTIONS_PER_NODE_H}]"
            )

    def build_autoscaler(self) -> Autoscaler:
        if self.autoscaler == "adl":
            return AdlAutoscaler(
                self.min_marginal_speedup,
                spot=self.spot,
                max_emptied_per_round=self.max_emptied_per_round,
                drop_low_value=self.drop_low_value,
            )
        return PolluxAutoscaler(self.band, spot=self.spot)


@dataclass
class _Node:
    name: str
    spot: bool
    price_per_h: float
    launched_s: float
    ready_s: float
    interrupt_s: float | None = None  # the notice's time, drawn when it becomes ready
    idle_since: float | None = None
    in_pool: bool = False
    ended_s: float | None = None
    ended_by: str = ""
    #: emptied by the autoscaler: offered to no job until ``ended_s`` (consolidation)
    emptied: bool = False


@dataclass
class ElasticCluster:
    """The nodes of an elastic replay; the simulator calls :meth:`begin_round` before each
    round and :meth:`after_round` with its answer (see the module docstring)."""

    config: ElasticConfig
    _nodes: list[_Node] = field(default_factory=list)
    _to_empty: set[str] = field(default_factory=set)
    #: the autoscaler offers the nodes being emptied again at the next round
    _release: bool = False
    #: (time, ready nodes, nodes on their way) after each round, for plots and tests
    timeline: list[tuple[int, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.config.seed)
        self._autoscaler = self.config.build_autoscaler()

    # ------------------------------------------------------------------ the round's nodes

    def offered(self) -> list[NodeInfo]:
        """The nodes the policy may use now (spot ones marked preemptible)."""
        g = self.config.shape.gpus
        return [NodeInfo(n.name, g, preemptible=n.spot) for n in self._nodes if n.in_pool]

    def begin_round(self, now: int, allocation: Mapping[str, Sequence[str]]) -> set[str]:
        """Bring the cluster to ``now``: ready nodes join, interrupted and emptied ones leave,
        idle ones are consolidated. Returns the nodes that left the pool (their jobs move)."""
        c = self.config
        left: set[str] = set()
        used = {n for held in allocation.values() for n in held}
        for node in self._nodes:
            if self._release and node.emptied and node.ended_s is not None and node.ended_s > now:
                node.ended_s, node.ended_by, node.emptied = None, "", False
                node.in_pool, node.idle_since = True, now
            if node.ended_s is not None:
                continue
            if not node.in_pool and node.name not in self._to_empty and node.ready_s <= now:
                node.in_pool, node.idle_since = True, node.ready_s
                node.interrupt_s = self._draw_interruption(node)
            if not node.in_pool:
                continue
            if node.interrupt_s is not None and node.interrupt_s <= now:
                node.in_pool, node.ended_s, node.ended_by = (
                    False,
                    node.interrupt_s + c.notice_s,
                    "interrupted",
                )
                left.add(node.name)
            elif node.name in self._to_empty:
                node.in_pool, node.ended_s, node.ended_by = (
                    False,
                    now + c.consolidate_after_s,
                    "consolidated",
                )
                node.emptied = True
                left.add(node.name)
            elif node.name in used:
                node.idle_since = None
            elif node.idle_since is None:
                node.idle_since = now
            elif now - node.idle_since >= c.consolidate_after_s:
                node.in_pool, node.ended_s, node.ended_by = False, now, "consolidated"
                left.add(node.name)
        self._to_empty.clear()
        self._release = False
        return left

    def _draw_interruption(self, node: _Node) -> float | None:
        rate = self.config.interruptions_per_node_h
        if not node.spot or rate <= 0:
            return None
        return node.ready_s + float(self._rng.exponential(3600.0 / rate))

    def after_round(
        self, now: int, infos: Sequence[JobInfo], allocation: Mapping[str, Sequence[str]]
    ) -> None:
        """Let the autoscaler see the round's answer; launch what it asks for (within the
        cap) and mark the nodes it empties (they leave at the next round)."""
        c = self.config
        ready = self.offered()
        pending = [n for n in self._nodes if n.ended_s is None and not n.in_pool]
        emptying = [
            NodeInfo(n.name, c.shape.gpus, preemptible=n.spot)
            for n in self._nodes
            if n.emptied and n.ended_s is not None and n.ended_s > now
        ]
        view = ClusterView(
            infos=infos,
            allocation=allocation,
            nodes=ready,
            pending_spot=sum(n.spot for n in pending),
            pending_on_demand=sum(not n.spot for n in pending),
            node_gpus=c.shape.gpus,
            max_nodes=c.max_nodes,
            emptying=emptying,
            prices={n.name: n.price_per_h for n in self._nodes if n.ended_s is None or n.emptied},
        )
        decision = self._autoscaler.decide(view)
        # a node being emptied still exists (and counts against a NodePool's limits) until
        # consolidation removes it
        room = c.max_nodes - len(ready) - len(pending) - len(emptying)
        for spot, count in ((True, decision.launch_spot), (False, decision.launch_on_demand)):
            for _ in range(max(min(count, room), 0)):
                self._launch(now, spot)
                room -= 1
        if decision.keep is not None:
            self._to_empty.update(nodes_to_empty(ready, allocation, decision.keep))
        self._to_empty.update(decision.empty)
        self._release = decision.release
        on_the_way = sum(n.ended_s is None and not n.in_pool for n in self._nodes)
        self.timeline.append((now, len(ready), on_the_way))

    def _launch(self, now: int, spot: bool) -> None:
        c = self.config
        prefix = "spot" if spot else "od"
        name = f"{prefix}-{len(self._nodes):04d}"
        launched = now + c.provisioning_s
        self._nodes.append(_Node(name, spot, c.shape.price(spot), launched, launched + c.startup_s))

    # ------------------------------------------------------------------ the bill

    def lives(self, end_s: float) -> list[NodeLife]:
        """Every node's billed life; one still up when the workload ended at ``end_s`` idles
        until consolidation takes it (or, not ready yet, from when it becomes ready)."""
        c = self.config
        out = []
        for n in self._nodes:
            if n.ended_s is not None:
                ended, why = n.ended_s, n.ended_by
            else:
                ended, why = max(end_s, n.ready_s) + c.consolidate_after_s, "end"
            out.append(NodeLife(n.name, n.spot, n.price_per_h, n.launched_s, ended, why))
        return out

    def bill(self, end_s: float) -> ClusterBill:
        return bill(self.lives(end_s))
