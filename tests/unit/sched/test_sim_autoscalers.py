"""The autoscalers the elastic simulator compares (``adl.sched.sim.autoscalers``): adl's rule
answered in nodes, and Pollux's cluster-utility band."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from adl.sched.sim.autoscalers import (
    AdlAutoscaler,
    ClusterView,
    PolluxAutoscaler,
    band_size,
    cluster_utility,
    nodes_to_empty,
    utility_by_size,
)
from adl.sched.types import JobInfo, NodeInfo


def sqrt_speedup(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
    del nodes
    return np.sqrt(np.asarray(replicas, dtype=np.float64))


def linear(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
    del nodes
    return np.asarray(replicas, dtype=np.float64)


def two_sqrt_jobs() -> list[JobInfo]:
    return [
        JobInfo(n, speedup=sqrt_speedup, max_replicas=16, max_profiled_replicas=16)
        for n in ("a", "b")
    ]


def view(infos, allocation, nodes, pending=0, max_nodes=16) -> ClusterView:
    return ClusterView(infos, allocation, nodes, pending, 0, node_gpus=4, max_nodes=max_nodes)


def test_cluster_utility_is_the_speedups_over_the_gpus_of_the_nodes_in_use():
    infos = two_sqrt_jobs()
    allocation = {"a": ["n0"] * 4, "b": ["n1"]}
    gpus = {"n0": 4, "n1": 4, "n2": 4}  # n2 holds nothing: it does not count
    assert cluster_utility(infos, allocation, gpus) == pytest.approx((2.0 + 1.0) / 8)
    assert cluster_utility(infos, {}, gpus) is None


def test_the_best_allocation_per_size_water_fills_the_speedups():
    # two sqrt jobs share the GPUs evenly: 2k GPUs give 2 sqrt(k) over 2k
    by_size = utility_by_size(two_sqrt_jobs(), node_gpus=4, max_nodes=5)
    expected = [2 * np.sqrt(2 * n) / (4 * n) for n in range(1, 6)]
    assert by_size == pytest.approx(expected)  # 0.707, 0.5, 0.408, 0.354, 0.316


def test_pollux_band_keeps_the_size_inside_and_moves_to_the_middle_outside():
    by_size = [0.707, 0.5, 0.408, 0.354, 0.316]
    assert band_size(4, 0.354, by_size, (0.35, 0.65)) == 4  # inside: kept
    assert band_size(1, 0.707, by_size, (0.35, 0.65)) == 2  # above: grow to the middle
    assert band_size(5, 0.316, by_size, (0.35, 0.65)) == 2  # below: shrink to the middle
    assert band_size(3, 0.2, [0.1, 0.05], (0.35, 0.65)) == 3  # no size reaches the floor
    # a tie in distance to the middle goes to the larger size
    assert band_size(1, 0.9, [0.6, 0.4], (0.35, 0.65)) == 2


def test_pollux_grows_at_most_twofold_and_empties_nodes_when_below_the_band():
    infos = two_sqrt_jobs()
    one = [NodeInfo("n0", 4)]
    grow = PolluxAutoscaler().decide(view(infos, {"a": ["n0"] * 2, "b": ["n0"] * 2}, one))
    assert (grow.launch_spot, grow.keep) == (1, None)  # utility 0.71: 2 nodes (0.5)
    # already on its way: nothing more
    assert (
        PolluxAutoscaler().decide(view(infos, {"a": ["n0"] * 2}, one, pending=1)).launch_spot == 0
    )
    five = [NodeInfo(f"n{i}", 4) for i in range(5)]
    spread = {"a": ["n0"] * 4 + ["n1"] * 4 + ["n2"] * 2, "b": ["n2"] * 2 + ["n3"] * 4 + ["n4"] * 4}
    shrink = PolluxAutoscaler().decide(view(infos, spread, five))
    assert (shrink.launch_spot, shrink.keep) == (0, 2)  # utility 0.32 < 0.35: back to 2
    packed = {"a": ["n0"] * 2, "b": ["n0"] * 2}
    on_demand = PolluxAutoscaler(spot=False).decide(view(infos, packed, one))
    assert (on_demand.launch_spot, on_demand.launch_on_demand) == (0, 1)


def test_nodes_to_empty_takes_the_least_used_and_newest_first():
    nodes = [NodeInfo(n, 4) for n in ("spot-0000", "spot-0001", "spot-0002", "spot-0003")]
    allocation = {"a": ["spot-0000", "spot-0000"], "b": ["spot-0002"]}
    assert nodes_to_empty(nodes, allocation, keep=2) == ["spot-0003", "spot-0001"]
    assert nodes_to_empty(nodes, allocation, keep=4) == []


def test_adl_autoscaler_packs_the_capacity_asks_into_nodes_spot_for_preemptible_jobs():
    infos = [
        JobInfo("a", speedup=linear, max_replicas=3, max_profiled_replicas=2),
        JobInfo("b", speedup=linear, max_replicas=3, max_profiled_replicas=2, submit_order=1),
        JobInfo("c", speedup=linear, max_replicas=1, preemptible=False, submit_order=2),
    ]
    # no nodes yet: a and b want 3 GPUs each (6: two spot nodes), c one on-demand GPU
    d = AdlAutoscaler().decide(view(infos, {}, []))
    assert (d.launch_spot, d.launch_on_demand, d.keep) == (2, 1, None)
    # one spot node already on its way covers part of it
    assert AdlAutoscaler().decide(view(infos, {}, [], pending=1)).launch_spot == 1
    # GPUs left free cover wants first: a ready node with 4 free GPUs
    d = AdlAutoscaler().decide(view(infos, {}, [NodeInfo("n0", 4)]))
    assert (d.launch_spot, d.launch_on_demand) == (1, 1)  # a: 3 free, b: 1 free + 2, c: 1
    # without spot, everything is on-demand
    d = AdlAutoscaler(spot=False).decide(view(infos, {}, []))
    assert (d.launch_spot, d.launch_on_demand) == (0, 2)  # 7 GPUs, packed


def test_adl_autoscaler_empties_what_the_operator_s_rule_picks_and_offers_it_again_for_demand():
    poor = JobInfo("a", speedup=sqrt_speedup, max_replicas=16, max_profiled_replicas=8)
    nodes = [NodeInfo("n0", 4), NodeInfo("n1", 4)]
    # a's 5th replica (on n1 alone) adds sqrt(5) - 2 = 0.24 of a GPU: n1 is emptied
    thin = {"a": ["n0"] * 4 + ["n1"]}
    assert AdlAutoscaler().decide(view([poor], thin, nodes)).empty == ()  # unless opted in
    d = AdlAutoscaler(drop_low_value=True).decide(view([poor], thin, nodes))
    assert (d.empty, d.release, d.launch_spot) == (("n1",), False, 0)
    off = AdlAutoscaler(max_emptied_per_round=0, drop_low_value=True)
    assert off.decide(view([poor], thin, nodes)).empty == ()
    # n1 being emptied; a new job wants 4 GPUs: n1 is offered again, no node launched
    hungry = JobInfo("b", speedup=linear, max_replicas=4, max_profiled_replicas=2, submit_order=1)
    again = ClusterView(
        [poor, hungry], {"a": ["n0"] * 4}, nodes[:1], 0, 0, 4, 16, emptying=nodes[1:]
    )
    d = AdlAutoscaler().decide(again)
    assert (d.empty, d.release, d.launch_spot) == ((), True, 0)
