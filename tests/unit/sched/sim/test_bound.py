"""The LP lower bound must stay below every schedule the simulator can run, on instances small
enough to search every schedule of a round-based policy exhaustively."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from adl.sched.sim.bound import ClusterShape, lower_bound
from adl.sched.sim.bound_makespan import deadline_avg_jct_bound, makespan_bound
from adl.sched.sim.bound_rates import concave_hull, rate_envelope
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import AppTrace, load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import Allocation, JobInfo, NodeInfo
from tests.unit.sched.sim_kit import write_app

ROUND_S = 10
RESTART_S = 2


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> AppTrace:
    # Short jobs (about 16 s on one GPU) with real batch-size trade-offs (gradient noise).
    root: Path = tmp_path_factory.mktemp("toy")
    write_app(root, var=(4.0, 4.0), epoch_ends=((5, 10, 16), (6, 11, 17)))
    return load_app(root / "toy")


class Scripted:
    """Hands the GPUs out by the ``choice``-th way of :func:`splits` among the active jobs."""

    def __init__(self, gpus: int) -> None:
        self.gpus, self.choice, self.options = gpus, 0, 0

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        ways = splits([j.name for j in jobs], self.gpus)
        self.options = len(ways)
        split = ways[min(self.choice, len(ways) - 1)]
        return {n: [nodes[0].name] * k for n, k in split.items() if k}


def splits(names: list[str], gpus: int) -> list[dict[str, int]]:
    """Every way to hand all ``gpus`` (or all the active jobs can use) to the active jobs."""
    return [
        dict(zip(names, counts, strict=True))
        for counts in itertools.product(range(gpus + 1), repeat=len(names))
        if sum(counts) == gpus
    ]


def best_schedule(workload: list[WorkloadJob], app: AppTrace, gpus: int) -> float:
    """Lowest average JCT over every round-by-round allocation of one ``gpus``-GPU node."""
    return every_schedule(workload, app, gpus)[0][1]


def every_schedule(
    workload: list[WorkloadJob], app: AppTrace, gpus: int
) -> list[tuple[float, float]]:
    """(makespan, average JCT) of every round-by-round allocation of one ``gpus``-GPU node,
    the lowest average JCT first."""
    policy = Scripted(gpus)
    config = SimConfig(
        num_nodes=1,
        gpus_per_node=gpus,
        round_s=ROUND_S,
        restart_delay_s=RESTART_S,
        rounds_on_events=True,  # also decide the moment a job arrives or finishes
        event_tick_s=1,
    )
    outcomes: list[tuple[float, float]] = []

    def search(sim: Simulator) -> None:
        if all(j.done for j in sim.jobs):
            jcts = [(j.completion_time or 0) - j.spec.submit_time for j in sim.jobs]
            first = min(j.spec.submit_time for j in sim.jobs)
            span = max(j.completion_time or 0 for j in sim.jobs) - first
            outcomes.append((float(span), float(np.mean(jcts))))
            return
        choice = 0
        while True:
            child = copy.deepcopy(sim, memo={id(app): app, id(policy): policy})
            policy.choice, policy.options = choice, 1
            child.step()
            options = policy.options  # the recursion below reuses the policy
            search(child)
            choice += 1
            if choice >= options:
                return

    root = Simulator(workload, policy, {app.name: app}, config)
    search_first_round(root, search)
    return sorted(outcomes, key=lambda o: (o[1], o[0]))


def search_first_round(sim: Simulator, search: Callable[[Simulator], None]) -> None:
    """Every choice of the round at time 0 (jobs submitted then need not wait), then the rest."""
    policy = sim.policy
    assert isinstance(policy, Scripted)
    choice = 0
    while True:
        child = copy.deepcopy(sim, memo={id(a): a for a in (policy, *(j.app for j in sim.jobs))})
        policy.choice = choice
        child.allocation = {}
        child._schedule()
        options = policy.options
        search(child)
        choice += 1
        if choice >= options:
            return


def toy_jobs(submits: Sequence[int]) -> list[WorkloadJob]:
    return [WorkloadJob(f"j{i}", t, "toy", 1, 8) for i, t in enumerate(submits)]


@pytest.mark.parametrize(
    ("submits", "gpus"),
    [((0, 0), 2), ((0, 7), 2), ((0, 0, 3), 1)],
)
def test_bound_is_below_the_best_exhaustive_schedule(
    toy: AppTrace, submits: tuple[int, ...], gpus: int
) -> None:
    workload = toy_jobs(submits)
    best = best_schedule(workload, toy, gpus)
    shape = ClusterShape(num_nodes=1, gpus_per_node=gpus, restart_delay_s=RESTART_S)
    res = lower_bound(workload, shape, slot_s=2, traces={"toy": toy})
    assert res.avg_jct_s <= best
    assert res.avg_jct_s >= res.alone_avg_jct_s - 1e-9


@pytest.mark.parametrize(
    ("submits", "gpus"),
    [((0, 0), 2), ((0, 7), 2), ((0, 0, 3), 1)],
)
def test_deadline_bounds_are_below_every_exhaustive_schedule(
    toy: AppTrace, submits: tuple[int, ...], gpus: int
) -> None:
    workload = toy_jobs(submits)
    outcomes = every_schedule(workload, toy, gpus)
    shape = ClusterShape(num_nodes=1, gpus_per_node=gpus, restart_delay_s=RESTART_S)
    span = makespan_bound(workload, shape, slot_s=2, traces={"toy": toy})
    shortest = min(o[0] for o in outcomes)
    assert span.alone_s <= span.makespan_s <= shortest
    if len(submits) == 3:  # three jobs on one GPU: the work itself, not the alone time, binds
        assert span.makespan_s > 2 * span.alone_s
    assert span.unsettled == 0
    # the best mean among the schedules that meet each deadline stays above the deadline LP
    for deadline in sorted({o[0] for o in outcomes}):
        best = min(o[1] for o in outcomes if o[0] <= deadline)
        bound = deadline_avg_jct_bound(workload, deadline, shape, slot_s=2, traces={"toy": toy})
        assert bound is not None
        assert bound <= best + 1e-9
    # and no schedule finishes before the makespan bound: the deadline LP says so too
    assert (
        deadline_avg_jct_bound(workload, span.makespan_s - 2, shape, slot_s=2, traces={"toy": toy})
        is None
    )


def test_sharing_makes_the_bound_exceed_the_alone_bound(toy: AppTrace) -> None:
    res = lower_bound(
        toy_jobs((0, 0, 0)),
        ClusterShape(num_nodes=1, gpus_per_node=1, restart_delay_s=RESTART_S),
        slot_s=2,
        traces={"toy": toy},
    )
    # three identical jobs on one GPU cannot all finish as if alone
    assert res.avg_jct_s > 1.4 * res.alone_avg_jct_s


def test_shorter_slots_only_tighten_the_bound(toy: AppTrace) -> None:
    shape = ClusterShape(num_nodes=1, gpus_per_node=2, restart_delay_s=RESTART_S)
    jobs = toy_jobs((0, 1, 2, 9))
    values = [lower_bound(jobs, shape, slot_s=s, traces={"toy": toy}).avg_jct_s for s in (8, 4, 2)]
    assert values[0] <= values[1] + 1e-6 <= values[2] + 2e-6


def test_envelope_dominates_every_rate_the_simulator_can_run(toy: AppTrace) -> None:
    env = rate_envelope(toy, kmax=4, gpus_per_node=2, num_nodes=2, fixed_batches=(8,))
    rng = np.random.default_rng(0)
    placements = [(1,), (2,), (1, 1), (2, 1), (1, 2), (2, 2)]
    for _ in range(300):
        p = placements[rng.integers(len(placements))]
        k = sum(p)
        m = int(rng.integers(1, toy.max_local_bsz + 1))
        s = int(rng.integers(0, 4))
        if k * m * (s + 1) > toy.max_batch_size:
            continue
        e = int(rng.integers(toy.max_epochs))
        assert toy.rate(p, m, s, e) <= env.epoch_rates[e, k]


def test_concave_hull_is_a_concave_majorant() -> None:
    values = np.array([0.0, 0.3, 0.35, 0.9, 0.95, 0.7])
    slopes, intercepts = concave_hull(values)
    ks = np.arange(len(values))
    hull = np.min(slopes[:, None] * ks[None, :] + intercepts[:, None], axis=0)
    assert np.all(hull >= values - 1e-12)
    assert hull[0] == pytest.approx(0.0)
    assert np.all(np.diff(slopes) <= 1e-12)  # slopes fall: concave
    assert hull[-1] == pytest.approx(values.max())  # flat beyond the maximum


def test_vectorized_step_times_match_the_scalar_lookup(toy: AppTrace) -> None:
    m = np.arange(1, toy.max_local_bsz + 1, dtype=np.float64)
    for placement in [(1,), (2,), (1, 3), (2, 2), (3, 1, 1), (4, 4)]:
        steps, syncs = toy.step_sync_times(placement, m)
        for i, mi in enumerate(m.tolist()):
            assert (steps[i], syncs[i]) == pytest.approx(toy.step_sync_time(placement, mi))
