"""The round's shortcuts change no decision: each value computed once (a fitted model's moved
values a row at a time), target counts that cannot fit or cannot beat the best move not
placed, the fill skipped when nothing is free. A policy without them (every value computed
afresh, every target placed) gives the same answers, round after round, on a mixed cluster
with the optional terms of the value switched on too."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from adl.sched.baselines.pollux import PolluxObjectivePolicy
from adl.sched.placement import Cluster, Placement
from adl.sched.policy import AdlPolicy, _Job
from adl.sched.types import JobInfo, NodeInfo
from tests.unit.sched.policy_kit import amdahl, fitted_speedup


class PlainPolicy(AdlPolicy):
    """:class:`AdlPolicy` computing every value afresh and placing every target count."""

    def _value(
        self, job: _Job, nodes: int, replicas: int, moved: bool, speed: float = 1.0
    ) -> float:
        speedup = np.array([job.table.get(nodes, replicas, job.cap)])
        return float(self._values(job, speedup, np.array([replicas]), moved, speed)[0])

    def _packed_values(
        self, job: _Job, counts: np.ndarray, per_node: int, speed: float
    ) -> np.ndarray:
        return np.array(
            [self._value(job, -(-c // per_node), c, True, speed) for c in counts.tolist()]
        )

    def _best_move(self, job: _Job, cluster: Cluster) -> tuple[float, Placement] | None:
        gpr = job.gpr
        current = job.placement
        cluster.release(job.info.name, current, gpr)
        try:
            options: list[Placement] = []
            if job.replicas == 0 and job.prev is not None and cluster.fits(job.prev, gpr):
                options.append(job.prev)
            prefer = [*current, *(job.prev or ())]
            types = (job.node_types[next(iter(current))],) if current else job.types
            for gpu_type in types:
                for target in self._target_counts(job, cluster.type_max[gpu_type] // gpr):
                    placed = cluster.place(target, gpr, prefer, gpu_type, job.allowed)
                    if placed is not None:
                        options.append(placed)
            best: tuple[float, Placement] | None = None
            for option in options:
                extra = (sum(option.values()) - job.replicas) * gpr
                if extra <= 0:
                    continue
                gain = (self._utility(job, option) - job.utility) / extra
                if gain > 1e-15 and (best is None or gain > best[0] + 1e-15):
                    best = (gain, option)
            return best
        finally:
            cluster.take(job.info.name, current, gpr)


TYPES = ("a100", "t4", "v100")


def cluster() -> list[NodeInfo]:
    """Three types, two node sizes: 96 GPUs."""
    sizes = [(TYPES[0], 8)] * 4 + [(TYPES[1], 4)] * 8 + [(TYPES[2], 4)] * 8
    return [NodeInfo(f"n{i}", gpus, gpu_type=t) for i, (t, gpus) in enumerate(sizes)]


def jobs(seed: int, count: int = 60) -> list[JobInfo]:
    """Fitted models and generic functions; some restricted to a type or a node pool, some
    of two GPUs a replica, some of a fixed minimum."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        fitted = rng.random() < 0.7
        out.append(
            JobInfo(
                name=f"j{i}",
                submit_order=i,
                speedup=fitted_speedup(rng) if fitted else amdahl(float(rng.uniform(0, 0.3))),
                min_replicas=int(rng.choice([0, 0, 0, 2])),
                max_replicas=int(rng.choice([4, 8, 16, 32])),
                age_s=float(rng.uniform(0, 2e4)),
                restarts=int(rng.integers(0, 5)),
                restart_cost_s=float(rng.uniform(10, 60)),
                attained_service_s=float(rng.uniform(0, 5e4)),
                remaining_s=float(10 ** rng.uniform(2, 5)) if rng.random() < 0.8 else None,
                max_profiled_replicas=int(rng.choice([0, 1, 2, 4, 8])),
                gpus_per_replica=int(rng.choice([1, 1, 1, 2])),
                type_speed={t: float(rng.uniform(0.5, 2.0)) for t in TYPES},
                gpu_types=(str(rng.choice(TYPES)),) if rng.random() < 0.2 else (),
                nodes=frozenset({"n0", "n2", "n5"}) if rng.random() < 0.1 else None,
            )
        )
    return out


KNOBS = [
    {},
    {"dp": 0.0},  # the greedy's own answer (the knapsack often supersedes it)
    {
        "efficiency_floor": 0.5,
        "min_tenure_s": 600.0,
        "quiet_growth": 1.0,
        "speedup_power": 0.7,
        "starve_bound_s": 600.0,
        "victim_charge": 1.0,
    },
]


@pytest.mark.parametrize("knobs", KNOBS, ids=["defaults", "greedy-only", "every-term"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_rounds_shortcuts_change_no_answer(seed: int, knobs: dict[str, float]) -> None:
    nodes = cluster()
    current = jobs(seed)
    fast, plain = AdlPolicy(**knobs), PlainPolicy(**knobs)
    previous: dict[str, list[str]] = {}
    rng = np.random.default_rng(seed + 100)
    placed = 0
    for _ in range(5):
        answer = fast.optimize(current, nodes, previous)
        assert answer == plain.optimize(current, nodes, previous)
        placed += sum(len(v) for v in answer.values())
        previous = answer
        current = [
            replace(
                job,
                age_s=job.age_s + 300.0,
                attained_service_s=job.attained_service_s + 300.0 * len(answer[job.name]),
                max_profiled_replicas=max(job.max_profiled_replicas, len(answer[job.name])),
                speedup=fitted_speedup(rng) if rng.random() < 0.2 else job.speedup,
            )
            for job in current
        ]
    assert placed > 0  # the rounds gave GPUs out


class PlainPollux(PolluxObjectivePolicy):
    """Pollux's objective, every target placed."""

    _best_move = PlainPolicy._best_move


@pytest.mark.parametrize("seed", [0, 1])
def test_an_objective_that_replaces_the_value_is_asked_for_every_value(seed: int) -> None:
    # Pollux's objective replaces ``_value``: rows of adl's own values must not stand in for
    # it (as the moved values' ceilings, or the knapsack's values)
    nodes = cluster()
    current = jobs(seed)
    answer = PolluxObjectivePolicy().optimize(current, nodes, {})
    assert answer == PlainPollux().optimize(current, nodes, {})
    again = PolluxObjectivePolicy().optimize(current, nodes, answer)
    assert again == PlainPollux().optimize(current, nodes, answer)
