"""What the jobs ask an autoscaler for (``adl.sched.capacity``): only replicas whose gain pays,
within what the job has shown it can use, after the free GPUs, within the cluster's cap."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from adl.sched.capacity import CapacityRule, capacity_asks, wanted_replicas
from adl.sched.types import JobInfo, NodeInfo


def saturating(
    limit: float,
):  # speedup that flattens at ``limit``: s(k) = limit * k / (limit + k - 1)
    def fn(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
        del nodes
        k = np.asarray(replicas, dtype=np.float64)
        return limit * k / (limit + k - 1)

    return fn


def linear(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
    del nodes
    return np.asarray(replicas, dtype=np.float64)


def job(name: str, speedup=linear, profiled: int = 8, **kw: object) -> JobInfo:
    return JobInfo(name, speedup=speedup, max_profiled_replicas=profiled, **kw)  # type: ignore[arg-type]


def test_a_job_wants_replicas_while_the_last_adds_enough():
    rule = CapacityRule(min_marginal_speedup=0.5)
    wanted, gain = wanted_replicas(job("a", saturating(4.0), profiled=32, max_replicas=32), rule)
    # s(k) - s(k-1) = 12 / ((k+3)(k+2)) >= 0.5  <=>  (k+3)(k+2) <= 24  <=>  k <= 2
    assert wanted == 2
    assert gain == pytest.approx(12 / 20)
    # a lower bar lets it grow further: 12 / ((k+3)(k+2)) >= 0.2  <=>  k <= 5
    assert wanted_replicas(job("a", saturating(4.0), profiled=32), CapacityRule(0.2))[0] == 5


def test_a_job_that_has_reported_nothing_asks_for_its_minimum_only():
    # linear prior, no profile: the prior would say max_replicas; the rule asks for the minimum
    assert wanted_replicas(job("a", profiled=0, max_replicas=64), CapacityRule())[0] == 1
    assert wanted_replicas(job("b", profiled=0, min_replicas=2), CapacityRule())[0] == 2
    # having run on 2, it may ask for 4 (the exploration ramp), not for 64
    assert wanted_replicas(job("c", profiled=2, max_replicas=64), CapacityRule())[0] == 4


def test_free_gpus_cover_wants_before_anything_is_asked():
    infos = [job("a", profiled=4, submit_order=0), job("b", profiled=4, submit_order=1)]
    nodes = [NodeInfo("n1", 8)]
    # a holds 4 and wants 8; 4 GPUs are free: they cover a, b's whole 8 is asked for
    asks = capacity_asks(infos, {"a": ["n1"] * 4, "b": []}, nodes, CapacityRule())
    assert [(a.job, a.replicas) for a in asks] == [("b", 8)]
    assert "asked the autoscaler for 8 GPUs" in asks[0].why


def test_the_cap_bounds_the_cluster_and_higher_priority_asks_first():
    infos = [
        job("low", profiled=4, submit_order=0),
        job("high", profiled=4, priority=5, submit_order=1),
    ]
    asks = capacity_asks(infos, {}, [NodeInfo("n1", 4)], CapacityRule(max_gpus=10))
    # 4 GPUs exist, 6 more may be asked; both want 8, 4 free go to "high" first
    assert [(a.job, a.gpus) for a in asks] == [("high", 4), ("low", 2)]


def test_gpus_per_replica_count_in_gpus_and_a_poor_scaler_asks_nothing():
    infos = [
        job("wide", profiled=1, gpus_per_replica=4, max_replicas=2),
        job("flat", saturating(1.2), profiled=8, max_replicas=8),
    ]
    asks = capacity_asks(infos, {"flat": ["n1"]}, [NodeInfo("n1", 1)], CapacityRule())
    assert [(a.job, a.replicas, a.gpus) for a in asks] == [("wide", 2, 8)]


def test_the_rule_is_bounded():
    for bad in (
        {"min_marginal_speedup": 0},
        {"min_marginal_speedup": 1.5},
        {"max_gpus": -1},
        {"node_gpus": 0},
        {"node_gpus": 65},
    ):
        with pytest.raises(ValueError):
            CapacityRule(**bad)  # type: ignore[arg-type]
