"""The peers on mixed GPU-type clusters: Gavel's max-min fair time fractions (hand-checked),
Sia's per-type program and Gavel's rounding never mix types in a job and always place what
they allocate, and the type-agnostic Pollux does mix them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from adl.sched.baselines import (
    GavelPolicy,
    GavelSettings,
    PolluxSettings,
    PolluxTypeAgnosticPolicy,
    SiaPolicy,
)
from adl.sched.baselines.gavel import max_min_fractions
from adl.sched.types import Allocation, JobInfo, NodeInfo


def sublinear(num_nodes: ArrayLike, num_replicas: ArrayLike) -> NDArray[np.float64]:
    """A model-like speedup: k^0.8, a little less across nodes."""
    n, k = np.broadcast_arrays(np.asarray(num_nodes, float), np.asarray(num_replicas, float))
    return np.asarray(k**0.8 * np.where(n > 1, 0.9, 1.0), dtype=np.float64)


def mixed_nodes(per_type: Sequence[tuple[str, int]], gpus: int = 4) -> list[NodeInfo]:
    out: list[NodeInfo] = []
    for gpu_type, count in per_type:
        out += [NodeInfo(f"n{len(out) + i}", gpus, gpu_type=gpu_type) for i in range(count)]
    return out


def check_placeable(
    answer: Allocation, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], *, mixing: bool
) -> None:
    """Within every node's capacity, on known nodes, one allowed type per job (unless
    ``mixing``), within each job's replica bounds."""
    kind = {n.name: n.gpu_type for n in nodes}
    cap = {n.name: n.gpus for n in nodes}
    used = Counter(node for held in answer.values() for node in held)
    assert all(node in cap and used[node] <= cap[node] for node in used), (used, cap)
    info = {j.name: j for j in jobs}
    for name, held in answer.items():
        types = {kind[n] for n in held}
        if not mixing:
            assert len(types) <= 1, (name, held)
        assert all(info[name].may_use(t) for t in types), (name, types)
        assert len(held) <= info[name].max_replicas


def test_gavel_max_min_fractions_hand_checked() -> None:
    # two jobs of one GPU, a slow type of 2 GPUs and a fast type of 1. Job A runs 2x faster on
    # the fast type, job B 8x. Equal share: 2/3 of the slow type, 1/3 of the fast one, so
    # E_A = 2/3 + 2/3 = 4/3 and E_B = 2/3 + 8/3 = 10/3. With a = A's fast share, B gets 1 - a;
    # both use all their time: A = (1 + a) / (4/3), B = (1 + 7 (1 - a)) / (10/3). Max-min
    # equalizes them: 0.75 (1 + a) = 0.3 (8 - 7 a), so a = 11/19 and z = 22.5/19.
    x, z = max_min_fractions(np.array([[1.0, 2.0], [1.0, 8.0]]), np.ones(2), np.array([2.0, 1.0]))
    assert z == pytest.approx(22.5 / 19, rel=1e-6)
    assert x[0, 1] == pytest.approx(11 / 19, abs=1e-6)
    assert x[1, 1] == pytest.approx(8 / 19, abs=1e-6)
    assert x.sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-6)


def test_gavel_never_gives_a_job_time_on_a_type_it_cannot_fit_or_use() -> None:
    # job 0 needs 4 GPUs (the fast type has 2); job 1 cannot run at all
    x, _ = max_min_fractions(
        np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([4.0, 1.0]), np.array([8.0, 2.0])
    )
    assert x[0, 1] == 0 and x[1].sum() == 0
    assert x[0, 0] == pytest.approx(1.0)
    nothing, zero = max_min_fractions(np.zeros((1, 2)), np.ones(1), np.ones(2))
    assert nothing.sum() == 0 and zero == 0


def _jobs(rng: np.random.Generator, count: int, types: Sequence[str]) -> list[JobInfo]:
    out = []
    for i in range(count):
        speeds = {t: float(rng.uniform(0.3, 4.0)) for t in types}
        allowed = (types[int(rng.integers(len(types)))],) if rng.random() < 0.2 else ()
        modelled = rng.random() < 0.7
        out.append(
            JobInfo(
                name=f"j{i}",
                speedup=sublinear if modelled else JobInfo("x").speedup,
                max_replicas=int(rng.integers(1, 17)),
                max_profiled_replicas=int(rng.integers(1, 9)) if modelled else 0,
                age_s=float(rng.uniform(0, 7200)),
                submit_order=i,
                type_speed=speeds,
                gpu_types=allowed,
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
def test_sia_per_type_keeps_every_job_on_one_allowed_type_and_places_all(seed: int) -> None:
    rng = np.random.default_rng(seed)
    types = ("V100", "P100", "K80")
    nodes = mixed_nodes([("V100", 2), ("P100", 3), ("K80", 3)])
    jobs = _jobs(rng, 14, types)
    policy = SiaPolicy()
    previous: Allocation = {}
    for _ in range(3):  # rounds in a row: kept placements, moves and restarts
        answer = policy.optimize(jobs, nodes, previous)
        check_placeable(answer, jobs, nodes, mixing=False)
        assert sum(len(v) for v in answer.values()) > 0
        previous = answer


def test_sia_puts_a_job_where_it_runs_fastest() -> None:
    nodes = mixed_nodes([("slow", 1), ("fast", 1)])
    job = JobInfo(
        "j",
        speedup=sublinear,
        max_replicas=4,
        max_profiled_replicas=4,
        type_speed={"slow": 1.0, "fast": 3.0},
    )
    answer = SiaPolicy().optimize([job], nodes, {})
    assert answer == {"j": ["n1"] * 4}


@pytest.mark.parametrize("seed", range(4))
def test_gavel_rounds_to_placeable_one_type_allocations(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    types = ("V100", "K80")
    nodes = mixed_nodes([("V100", 2), ("K80", 2)])
    jobs = _jobs(rng, 10, types)
    policy = GavelPolicy(settings=GavelSettings(lease_calls=1))
    previous: Allocation = {}
    ran: Counter[str] = Counter()
    for _ in range(8):
        answer = policy.optimize(jobs, nodes, previous)
        check_placeable(answer, jobs, nodes, mixing=False)
        for name, held in answer.items():  # all of a job's fixed GPUs (at most a type's)
            assert len(held) == min(next(j for j in jobs if j.name == name).max_replicas, 8)
        ran.update(list(answer))
        previous = answer
    # time sharing: over the rounds every job the LP gave time to ran at least once
    assert {j for j, f in policy.last_fractions.items() if sum(f.values()) > 0.1} <= set(ran)


def test_gavel_keeps_leases_between_its_rounds() -> None:
    nodes = mixed_nodes([("V100", 1), ("K80", 1)])
    a = JobInfo("a", max_replicas=4, submit_order=0, type_speed={"V100": 2.0})
    b = JobInfo("b", max_replicas=4, submit_order=1, type_speed={"V100": 2.0})
    policy = GavelPolicy(settings=GavelSettings(lease_calls=3))
    first = policy.optimize([a, b], nodes, {})
    assert sorted(len(v) for v in first.values()) == [4, 4]
    late = JobInfo("c", max_replicas=1, submit_order=2)
    # mid-round: the same leases, the newcomer waits for the next round
    assert policy.optimize([a, b, late], nodes, first) == first
    assert policy.optimize([a, late], nodes, first) == {"a": first["a"]}


def test_type_agnostic_pollux_spans_types_to_grow_a_job() -> None:
    nodes = mixed_nodes([("V100", 1), ("K80", 1)], gpus=2)
    job = JobInfo("j", speedup=sublinear, max_replicas=4, max_profiled_replicas=4, age_s=1e4)
    settings = PolluxSettings(population=20, generations=30, type_agnostic=True)
    answer = PolluxTypeAgnosticPolicy(seed=1, settings=settings).optimize([job], nodes, {})
    check_placeable(answer, [job], nodes, mixing=True)
    assert sorted(answer["j"]) == ["n0", "n0", "n1", "n1"]  # both types: the GPUs are all it sees
