"""The bill of a simulated cluster (``adl.sched.sim.cost``): lifetime hours x price, exactly."""

from __future__ import annotations

import pytest

from adl.sched.sim.cost import GPU_4X, NodeLife, NodeShape, bill, fixed_cluster_bill


def test_a_bill_adds_each_nodes_lifetime_times_its_price():
    lives = [
        NodeLife("spot-0000", True, 4.41, launched_s=60, ended_s=3660, ended_by="consolidated"),
        NodeLife("od-0001", False, 14.69, launched_s=0, ended_s=1800, ended_by="end"),
        NodeLife("spot-0002", True, 4.41, launched_s=100, ended_s=1000, ended_by="interrupted"),
    ]
    b = bill(lives)
    # 1 h x 4.41 + 0.5 h x 14.69 + 0.25 h x 4.41
    assert b.dollars == pytest.approx(4.41 + 7.345 + 1.1025)
    assert b.spot_node_hours == pytest.approx(1.25)
    assert b.on_demand_node_hours == pytest.approx(0.5)
    assert (b.nodes_launched, b.interruptions) == (3, 1)


def test_a_fixed_cluster_pays_on_demand_for_every_node_all_the_time():
    b = fixed_cluster_bill(3, GPU_4X, seconds=7200)
    assert b.dollars == pytest.approx(3 * 2 * 14.69)
    assert b.node_hours == pytest.approx(6.0)
    assert b.spot_node_hours == 0.0


def test_shapes_are_bounded():
    assert GPU_4X.price(spot=True) == 4.41 and GPU_4X.price(spot=False) == 14.69
    with pytest.raises(ValueError, match="GPUs"):
        NodeShape("x", 0, 1.0, 1.0)
    with pytest.raises(ValueError, match="prices"):
        NodeShape("x", 4, -1.0, 1.0)
