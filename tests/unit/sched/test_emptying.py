"""Which nodes adl empties for the autoscaler to remove (``adl.sched.emptying``): only nodes
whose replicas add too little or fit elsewhere, never below a job's minimum, a few a round,
on-demand and dear ones first, and never one that the asks would want back."""

from __future__ import annotations

import random

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from adl.sched.capacity import CapacityRule, capacity_asks
from adl.sched.emptying import keep_emptying, nodes_worth_emptying
from adl.sched.types import JobInfo, NodeInfo


def saturating(limit: float):  # s(k) = limit * k / (limit + k - 1): flattens at ``limit``
    def fn(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
        del nodes
        k = np.asarray(replicas, dtype=np.float64)
        return limit * k / (limit + k - 1)

    return fn


def linear(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
    del nodes
    return np.asarray(replicas, dtype=np.float64)


#: s(k) = 2k / (k + 1): replica 2 adds 1/3 of a GPU, replica 3 1/6, replica 4 1/10
POOR = saturating(2.0)


def job(name: str, speedup=linear, profiled: int = 8, **kw: object) -> JobInfo:
    return JobInfo(name, speedup=speedup, max_profiled_replicas=profiled, **kw)  # type: ignore[arg-type]


def asked(infos, allocation, nodes, rule) -> int:
    return sum(a.gpus for a in capacity_asks(infos, allocation, nodes, rule))


def test_a_node_of_low_value_replicas_is_emptied_and_never_asked_for_again() -> None:
    rule = CapacityRule(min_marginal_speedup=0.5, drop_low_value=True)
    infos = [job("a", POOR)]
    nodes = [NodeInfo("n1", 3), NodeInfo("n2", 1)]
    allocation = {"a": ["n1", "n1", "n1", "n2"]}
    # by default replicas are never dropped, only moved: nowhere to move, nothing emptied
    assert nodes_worth_emptying(infos, allocation, nodes, CapacityRule()) == []
    (choice,) = nodes_worth_emptying(infos, allocation, nodes, rule)
    # n2's replica is a's 4th, adding 0.10 of a GPU; n1's three cannot all go (a keeps one)
    assert choice.node == "n2"
    assert choice.gain == pytest.approx(0.1)
    ((who, said),) = choice.moves
    assert who == "a"
    assert "moving off node n2: 1 replica(s) there add at most 0.10 of a GPU each, below 0.5" in (
        said
    )
    assert "freeing it for the autoscaler to remove" in choice.why
    # the state the emptying leaves asks for nothing: asking would not bring the node back
    assert asked(infos, {"a": ["n1"] * 3}, [nodes[0]], rule) == 0
    # and in that state, nothing more is emptied (n1 holds a's valuable first replica)
    assert nodes_worth_emptying(infos, {"a": ["n1"] * 3}, [nodes[0]], rule) == []


def test_a_node_whose_one_replica_adds_a_whole_gpu_is_kept() -> None:
    rule = CapacityRule()
    infos = [job("b", linear, profiled=1, max_replicas=2)]
    nodes = [NodeInfo("n1", 1), NodeInfo("n2", 1)]
    assert nodes_worth_emptying(infos, {"b": ["n1", "n2"]}, nodes, rule) == []


def test_a_leftover_replica_moves_onto_free_gpus_elsewhere() -> None:
    # b runs 3 replicas, wants 4 (linear, ramp of twice the 2 it ran on): all fit on n1
    rule = CapacityRule()
    infos = [job("b", linear, profiled=2, max_replicas=8)]
    nodes = [NodeInfo("n1", 4), NodeInfo("n2", 4)]
    (choice,) = nodes_worth_emptying(infos, {"b": ["n1", "n1", "n2"]}, nodes, rule)
    assert choice.node == "n2"
    assert choice.gain == 0.0  # nothing dropped, one replica moved
    assert "1 replica(s) fit on free GPUs elsewhere" in choice.moves[0][1]
    # with n1 full of another job the leftover has nowhere to go: kept
    other = [*infos, job("c", linear, profiled=0)]
    busy = {"b": ["n1", "n1", "n2"], "c": ["n1", "n1"]}
    assert nodes_worth_emptying(other, busy, nodes, rule) == []


def test_a_job_is_never_shrunk_below_its_minimum() -> None:
    rule = CapacityRule(drop_low_value=True)
    nodes = [NodeInfo("n1", 3), NodeInfo("n2", 1)]
    allocation = {"a": ["n1", "n1", "n1", "n2"]}
    assert nodes_worth_emptying([job("a", POOR, min_replicas=4)], allocation, nodes, rule) == []
    assert len(nodes_worth_emptying([job("a", POOR, min_replicas=3)], allocation, nodes, rule)) == 1


def test_an_idle_node_that_covers_a_want_is_kept_one_nobody_wants_is_emptied() -> None:
    rule = CapacityRule()
    nodes = [NodeInfo("n1", 4), NodeInfo("n2", 4)]
    allocation = {"a": ["n1"] * 4}
    # a scales linearly and has run on 4: it wants 8, and n2's idle GPUs are what covers it
    assert nodes_worth_emptying([job("a", linear, profiled=4)], allocation, nodes, rule) == []
    # a poor scaler wants 1: n2 idles for nothing
    (choice,) = nodes_worth_emptying([job("a", POOR, profiled=4)], allocation, nodes, rule)
    assert choice.node == "n2" and choice.moves == ()
    assert "all 4 GPUs idle" in choice.why


def test_at_most_the_rule_s_bound_a_round_and_none_when_it_is_zero() -> None:
    nodes = [NodeInfo(f"n{i}", 4) for i in range(5)]
    allocation = {"a": ["n0"]}
    infos = [job("a", POOR, profiled=1)]
    for bound in (0, 1, 3):
        rule = CapacityRule(max_emptied_per_round=bound)
        assert len(nodes_worth_emptying(infos, allocation, nodes, rule)) == bound
    with pytest.raises(ValueError, match="max_emptied_per_round"):
        CapacityRule(max_emptied_per_round=-1)


def test_on_demand_and_dear_nodes_go_first_and_a_protected_job_s_never() -> None:
    rule = CapacityRule(max_emptied_per_round=1)
    infos = [job("a", POOR, profiled=1)]
    nodes = [NodeInfo("a-spot", 4, preemptible=True), NodeInfo("b-od", 4), NodeInfo("c-od", 4)]
    allocation = {"a": ["a-spot"]}
    assert [c.node for c in nodes_worth_emptying(infos, allocation, nodes, rule)] == ["b-od"]
    prices = {"b-od": 10.0, "c-od": 14.0}
    chosen = nodes_worth_emptying(infos, allocation, nodes, rule, prices=prices)
    assert [c.node for c in chosen] == ["c-od"]
    # nodes that another pod keeps are never chosen
    chosen = nodes_worth_emptying(infos, allocation, nodes, rule, kept={"b-od", "c-od"})
    assert [c.node for c in chosen] == ["a-spot"]  # a's one replica moves to an idle node
    assert "fit on free GPUs elsewhere" in chosen[0].moves[0][1]
    # a job that must not be preempted keeps its node, however little its replicas add
    rule = CapacityRule(drop_low_value=True)
    pinned = [job("p", POOR, profiled=4, preemptible=False)]
    two = [NodeInfo("n1", 3), NodeInfo("n2", 1)]
    assert nodes_worth_emptying(pinned, {"p": ["n1", "n1", "n1", "n2"]}, two, rule) == []


def test_emptying_stops_once_new_demand_would_use_the_node() -> None:
    rule = CapacityRule()
    nodes = [NodeInfo("n1", 4)]
    emptying = [NodeInfo("n2", 4)]
    quiet = [job("a", POOR, profiled=4)]
    assert keep_emptying(quiet, {"a": ["n1"]}, nodes, emptying, rule)
    # a new linear job wants 8 GPUs: n2's 4 would cover half of them, better than a new node
    busy = [*quiet, job("b", linear, profiled=4)]
    assert not keep_emptying(busy, {"a": ["n1"], "b": ["n1"] * 3}, nodes, emptying, rule)


def test_random_rounds_never_empty_a_node_the_asks_would_want_back() -> None:
    """Whatever the jobs and the allocation, the state an emptying leaves (the node gone, its
    replicas dropped; no free GPU elsewhere, so none can move) asks for no more GPUs, and no
    job falls below its minimum."""
    rng = random.Random(7)
    emptied = 0
    for _ in range(300):
        nodes = [NodeInfo(f"n{i}", rng.choice([1, 2, 4])) for i in range(rng.randint(2, 5))]
        slots = [n.name for n in nodes for _ in range(n.gpus)]
        rng.shuffle(slots)
        infos, allocation = [], {}
        for j in range(rng.randint(1, 4)):
            speed = rng.choice([linear, POOR, saturating(4.0), saturating(1.2)])
            name = f"j{j}"
            infos.append(
                job(name, speed, profiled=rng.randint(0, 6), min_replicas=rng.randint(0, 2))
            )
            take = rng.randint(0, len(slots))
            allocation[name], slots = slots[:take], slots[take:]
        if slots:
            continue  # free GPUs: replicas may move, the simple check below does not apply
        rule = CapacityRule(
            max_emptied_per_round=rng.randint(1, 3), drop_low_value=rng.random() < 0.8
        )
        chosen = nodes_worth_emptying(infos, allocation, nodes, rule)
        gone = {c.node for c in chosen}
        after = {job: [n for n in held if n not in gone] for job, held in allocation.items()}
        left = [n for n in nodes if n.name not in gone]
        assert asked(infos, after, left, rule) <= asked(infos, allocation, nodes, rule)
        emptied += bool(chosen)
        for info in infos:  # each job keeps its minimum (at least one replica) or all it had
            had = len(allocation[info.name])
            assert len(after[info.name]) >= min(max(info.min_replicas, 1), had)
    assert emptied >= 30, emptied  # the property was exercised, not skipped
