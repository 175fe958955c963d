"""``type_fill`` (issue 33, on by default): the replica-count knapsack counts GPUs, not GPUs per
type, and the greedy after it grows a running job on its own type only, so a long job can be
left on one fast GPU while the slow GPUs, which no one else wants, stay idle. The pass moves
such a job whole onto the idle type when that, with the GPUs it leaves handed to others, is
worth more to the policy's own objective."""

from dataclasses import replace

import numpy as np
import pytest
from policy_kit import amdahl, job, random_jobs

from adl.sched.policy import AdlPolicy
from adl.sched.policy_knobs import Knobs
from adl.sched.types import NodeInfo

FAST, SLOW = "Tesla-V100", "Tesla-K80"
NODES = [NodeInfo(f"v{i}", 4, gpu_type=FAST) for i in range(2)] + [
    NodeInfo(f"k{i}", 4, gpu_type=SLOW) for i in range(4)
]


def _jobs():  # type: ignore[no-untyped-def]
    # a short job holds a V100 node; the long one was squeezed onto one V100 (the slow type
    # runs it at 0.4 of that); a third job starts on a K80
    def one(name: str, order: int, remaining: float, age: float, slow: float):  # type: ignore[no-untyped-def]
        return job(
            name,
            order,
            max_replicas=16,
            remaining_s=remaining,
            age_s=age,
            speedup=amdahl(0.1),
            type_speed={FAST: 1.0, SLOW: slow},
        )

    return [
        one("short", 0, 2481.0, 5524.0, 0.25),
        one("long", 1, 40493.0, 11250.0, 0.4),
        one("mid", 2, 9645.0, 2744.0, 0.25),
    ]


PREVIOUS = {"short": ["v1"] * 4, "long": ["v0"], "mid": ["k1"]}


def _types(allocation: dict[str, list[str]]) -> dict[str, set[str]]:
    return {name: {node[0] for node in nodes} for name, nodes in allocation.items()}


def test_a_job_left_on_one_fast_gpu_moves_to_the_idle_slow_ones() -> None:
    jobs = _jobs()
    plain = AdlPolicy(type_fill=0)  # the pass off
    before = plain.optimize(jobs, NODES, {**PREVIOUS})
    after = AdlPolicy(type_fill=2).optimize(jobs, NODES, {**PREVIOUS})
    # without the pass: the long job keeps one V100 and all 16 K80s stay idle
    assert len(before["long"]) == 1 and _types(before)["long"] == {"v"}
    assert not any(n.startswith("k") for nodes in before.values() for n in nodes)
    # with it: the long job runs on the K80s and the V100 it left goes to another job
    assert _types(after)["long"] == {"k"} and len(after["long"]) == 16
    assert len(after["mid"]) > len(before["mid"])
    # worth more by the policy's own objective (each kept move must raise it)
    assert plain.objective(jobs, NODES, PREVIOUS, after) > plain.objective(
        jobs, NODES, PREVIOUS, before
    )


def test_one_type_nothing_changes() -> None:
    nodes = [NodeInfo(f"n{i}", 4) for i in range(4)]
    jobs = _jobs()
    prev = {"short": ["n1"] * 4, "long": ["n0"], "mid": ["n2"]}
    assert AdlPolicy(type_fill=8).optimize(jobs, nodes, prev) == AdlPolicy().optimize(
        jobs, nodes, prev
    )


@pytest.mark.parametrize("bad", [-1.0, 65.0])
def test_the_moves_a_round_are_bounded(bad: float) -> None:
    with pytest.raises(ValueError, match="type_fill"):
        Knobs(type_fill=bad)


@pytest.mark.parametrize("seed", range(32))  # the pass moves a job in 7 of them
def test_the_pass_never_lowers_the_objective_nor_mixes_types(seed: int) -> None:
    rng = np.random.default_rng(seed)
    jobs = [
        replace(j, type_speed={FAST: 1.0, SLOW: float(rng.choice([0.16, 0.25, 0.4, 1.3]))})
        for j in random_jobs(seed, 5)
    ]
    names = [n.name for n in NODES]
    previous = {
        j.name: [names[int(rng.integers(len(names)))]] * int(rng.integers(1, 3))
        for j in jobs
        if rng.random() < 0.7
    }
    plain = AdlPolicy(type_fill=0)
    before = plain.optimize(jobs, NODES, previous)
    after = AdlPolicy(type_fill=4).optimize(jobs, NODES, previous)
    kind = {n.name: n.gpu_type for n in NODES}
    used: dict[str, int] = {}
    for held in after.values():
        assert len({kind[n] for n in held}) <= 1
        for n in held:
            used[n] = used.get(n, 0) + 1
    assert all(used[n.name] <= n.gpus for n in NODES if n.name in used)
    gain = plain.objective(jobs, NODES, previous, after)
    assert gain >= plain.objective(jobs, NODES, previous, before) * (1 - 1e-9)
