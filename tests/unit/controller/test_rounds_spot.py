"""Spot capacity: a job that must not be preempted (``preemptible: false``) is kept on on-demand
nodes by the round, whatever the policy (issue 31: the cloud takes spot nodes back at short
notice); preemptible jobs may use every node."""

from __future__ import annotations

from adl.controller.rounds import plan_round
from adl.sched.baselines.tiresias import TiresiasPolicy
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo, Policy
from tests.unit.controller.test_rounds import NOW, record

SPOT, ON_DEMAND = NodeInfo("spot-1", 4, preemptible=True), NodeInfo("od-1", 2)


def test_a_job_that_must_not_be_preempted_stays_off_spot_nodes() -> None:
    pinned = record("pinned", spec={"preemptible": False, "maxReplicas": 4})
    got = plan_round(AdlPolicy(), [pinned], [SPOT, ON_DEMAND], NOW).allocation["ns/pinned"]
    assert got and set(got) == {"od-1"}  # 2 on-demand GPUs, although 4 spot ones were free


def test_a_policy_that_ignores_pools_never_puts_it_on_spot_either() -> None:
    # Tiresias asks for its 4 replicas wherever they fit (the spot node): the round keeps the
    # job to its on-demand nodes, where that answer leaves it nothing (as for a Kueue pool)
    pinned = record("pinned", spec={"preemptible": False, "maxReplicas": 4, "minReplicas": 4})
    got = plan_round(TiresiasPolicy(), [pinned], [SPOT, ON_DEMAND], NOW).allocation
    assert "spot-1" not in got["ns/pinned"]
    policy: Policy = TiresiasPolicy()
    free = record("free", spec={"maxReplicas": 4, "minReplicas": 4})
    assert (
        plan_round(policy, [free], [SPOT, ON_DEMAND], NOW).allocation["ns/free"] == ["spot-1"] * 4
    )


def test_a_preemptible_job_may_use_spot_nodes() -> None:
    free = record("free", spec={"maxReplicas": 4})
    result = plan_round(AdlPolicy(), [free], [SPOT, ON_DEMAND], NOW)
    assert "spot-1" in result.allocation["ns/free"]


def test_with_only_spot_capacity_a_job_that_must_not_be_preempted_waits() -> None:
    pinned = record("pinned", spec={"preemptible": False})
    assert plan_round(AdlPolicy(), [pinned], [SPOT], NOW).allocation["ns/pinned"] == []


def test_within_a_node_pool_only_its_on_demand_nodes() -> None:
    other = NodeInfo("od-2", 2)
    pinned = record("pinned", spec={"preemptible": False, "maxReplicas": 4})
    pooled = type(pinned)(**{**vars(pinned), "nodes": frozenset({"spot-1", "od-2"})})
    got = plan_round(AdlPolicy(), [pooled], [SPOT, ON_DEMAND, other], NOW).allocation
    assert set(got["ns/pinned"]) == {"od-2"}  # its pool's on-demand node, not od-1 or spot
