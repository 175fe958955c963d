"""What a simulated cluster costs: node shapes with their prices, and the bill of node lifetimes.

A node is billed from the moment its instance exists (after the autoscaler's provisioning
delay, so its start-up is paid for) until it is gone (consolidated, interrupted, or still up
when the workload ends), at its capacity type's price per hour. A fixed cluster is billed for
every node over the whole replay. Cost is the sum of lifetime hours x price, the way a cloud
bill adds up per-second instance charges.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: bounds of a node shape's numbers (a price above this is a typo, not a GPU node)
MAX_PRICE_PER_HOUR = 1000.0
MAX_SHAPE_GPUS = 64


@dataclass(frozen=True)
class NodeShape:
    """An instance type an autoscaler can add: its GPUs and its prices per hour."""

    name: str
    gpus: int
    on_demand_per_h: float
    spot_per_h: float

    def __post_init__(self) -> None:
        if not 1 <= self.gpus <= MAX_SHAPE_GPUS:
            raise ValueError(f"a node shape has 1..{MAX_SHAPE_GPUS} GPUs, not {self.gpus}")
        for price in (self.on_demand_per_h, self.spot_per_h):
            if not 0.0 <= price <= MAX_PRICE_PER_HOUR:
                raise ValueError(f"prices per hour must be in [0, {MAX_PRICE_PER_HOUR}]")

    def price(self, spot: bool) -> float:
        return self.spot_per_h if spot else self.on_demand_per_h


#: a 4-GPU A100-class node at the prices the cluster tests give Karpenter
#: (``tests/cluster/karpenter_install.py`` GPU_INSTANCE_TYPES, ``gpu-4x``)
GPU_4X = NodeShape("gpu-4x", gpus=4, on_demand_per_h=14.69, spot_per_h=4.41)


@dataclass(frozen=True)
class NodeLife:
    """One node's billed life: from ``launched_s`` (the instance exists) to ``ended_s``."""

    name: str
    spot: bool
    price_per_h: float
    launched_s: float
    ended_s: float
    #: why it ended: "consolidated", "interrupted" or "end" (up when the workload finished)
    ended_by: str

    @property
    def hours(self) -> float:
        return max(self.ended_s - self.launched_s, 0.0) / 3600.0

    @property
    def cost(self) -> float:
        return self.hours * self.price_per_h


@dataclass(frozen=True)
class ClusterBill:
    """The sum of a replay's node lifetimes."""

    dollars: float
    spot_node_hours: float
    on_demand_node_hours: float
    nodes_launched: int
    interruptions: int

    @property
    def node_hours(self) -> float:
        return self.spot_node_hours + self.on_demand_node_hours


def bill(lives: Iterable[NodeLife]) -> ClusterBill:
    """Add up node lifetimes into one bill."""
    lives = list(lives)
    return ClusterBill(
        dollars=sum(n.cost for n in lives),
        spot_node_hours=sum(n.hours for n in lives if n.spot),
        on_demand_node_hours=sum(n.hours for n in lives if not n.spot),
        nodes_launched=len(lives),
        interruptions=sum(n.ended_by == "interrupted" for n in lives),
    )


def fixed_cluster_bill(nodes: int, shape: NodeShape, seconds: float) -> ClusterBill:
    """``nodes`` on-demand nodes of ``shape`` up for ``seconds`` (a cluster of fixed size)."""
    hours = nodes * max(seconds, 0.0) / 3600.0
    return ClusterBill(hours * shape.on_demand_per_h, 0.0, hours, nodes, 0)
