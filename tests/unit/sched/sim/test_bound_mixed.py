"""The typed lower bound (several GPU types) must stay below every schedule the simulator can
run, and reduce to the uniform bound on a cluster of one type."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from adl.sched.sim.bound import ClusterShape, lower_bound
from adl.sched.sim.bound_mixed import TypedCluster, typed_lower_bound
from adl.sched.sim.bound_rates import rate_envelope
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import AppTrace, load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import Allocation, JobInfo, NodeInfo
from tests.unit.sched.sim_kit import write_app

RESTART_S = 2
ROUND_S = 6
SPEEDS = {"toy": {"fast": 2.0, "slow": 0.5}}


@pytest.fixture(scope="module")
def short_app(tmp_path_factory: pytest.TempPathFactory) -> AppTrace:
    # about 16 s on one GPU of the traces' speed, with gradient noise (batch trade-offs)
    root: Path = tmp_path_factory.mktemp("typed")
    write_app(root, var=(4.0, 4.0), epoch_ends=((5, 10, 16), (6, 11, 17)))
    return load_app(root / "toy")


class NodePicker:
    """Gives every node to one active job or to none (not all to none: a schedule must end),
    the ``choice``-th way of all such ways."""

    def __init__(self) -> None:
        self.choice, self.options = 0, 0

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        names: list[str | None] = [j.name for j in jobs]
        ways = [w for w in itertools.product([*names, None], repeat=len(nodes)) if any(w)]
        # likely good ways first (no job spanning types, no idle node): the search below
        # prunes more once it has found a good schedule
        ways.sort(key=lambda w: (len(w) - len(set(w)), w.count(None)))
        self.options = len(ways)
        if not ways:
            return {}
        owner = ways[min(self.choice, len(ways) - 1)]
        out: dict[str, list[str]] = {}
        for node, name in zip(nodes, owner, strict=True):
            if name is not None:
                out.setdefault(name, []).extend([node.name] * node.gpus)
        return out


def best_typed_schedule(workload: list[WorkloadJob], app: AppTrace) -> float:
    """Lowest average JCT over every round-by-round way to hand a fast and a slow GPU to the
    active jobs (a subset of all schedules: the bound must lie below each)."""
    policy = NodePicker()
    config = SimConfig(
        num_nodes=2,
        gpus_per_node=1,
        node_types=(("fast", 1), ("slow", 1)),
        type_speeds=SPEEDS,
        round_s=ROUND_S,
        restart_delay_s=RESTART_S,
        rounds_on_events=False,  # decisions every round only: a search of seconds
    )
    best = [np.inf]
    keep = {id(app): app, id(policy): policy}

    def search(sim: Simulator, first: bool) -> None:
        # every job's JCT so far: a floor under any schedule that continues this one
        jcts = [
            ((j.completion_time or 0) if j.done else max(sim.now, j.spec.submit_time))
            - j.spec.submit_time
            for j in sim.jobs
        ]
        if float(np.mean(jcts)) >= best[0]:
            return  # branch and bound: nothing below can beat the best found
        if all(j.done for j in sim.jobs):
            best[0] = float(np.mean(jcts))
            return
        choice = 0
        while True:
            child = copy.deepcopy(sim, memo=dict(keep))
            policy.choice, policy.options = choice, 1
            if first:  # the round at time 0: jobs submitted then need not wait
                child.allocation = {}
                child._schedule()
            else:
                child.step()
            options = policy.options
            search(child, False)
            choice += 1
            if choice >= options:
                return

    search(Simulator(workload, policy, {app.name: app}, config), True)
    return best[0]


def typed_toy_cluster() -> TypedCluster:
    return TypedCluster(
        (("fast", 1), ("slow", 1)), gpus_per_node=1, restart_delay_s=RESTART_S, speeds=SPEEDS
    )


@pytest.mark.parametrize("submits", [(0,), (0, 6)])
def test_typed_bound_is_below_the_best_searched_schedule(
    short_app: AppTrace, submits: tuple[int, ...]
) -> None:
    workload = [WorkloadJob(f"j{i}", t, "toy", 1, 8) for i, t in enumerate(submits)]
    best = best_typed_schedule(workload, short_app)
    res = typed_lower_bound(workload, typed_toy_cluster(), slot_s=2, traces={"toy": short_app})
    assert res.alone_avg_jct_s - 1e-9 <= res.avg_jct_s <= best
    # and the types matter: on two GPUs of the slow type the bound is far higher
    slow = TypedCluster((("slow", 2),), gpus_per_node=1, restart_delay_s=RESTART_S, speeds=SPEEDS)
    res_slow = typed_lower_bound(workload, slow, slot_s=2, traces={"toy": short_app})
    assert res_slow.avg_jct_s > 1.5 * res.avg_jct_s


def test_one_type_of_speed_one_gives_the_uniform_bound(short_app: AppTrace) -> None:
    workload = [WorkloadJob(f"j{i}", t, "toy", 1, 8) for i, t in enumerate((0, 0, 0, 1))]
    uniform = lower_bound(
        workload,
        ClusterShape(num_nodes=2, gpus_per_node=1, restart_delay_s=RESTART_S),
        slot_s=2,
        traces={"toy": short_app},
    )
    # one type listed as two groups of nodes: still one type
    typed = typed_lower_bound(
        workload,
        TypedCluster((("a", 1), ("a", 1)), gpus_per_node=1, restart_delay_s=RESTART_S),
        slot_s=2,
        traces={"toy": short_app},
    )
    assert typed.alone_avg_jct_s == pytest.approx(uniform.alone_avg_jct_s, rel=1e-12)
    assert typed.avg_jct_s == pytest.approx(uniform.avg_jct_s, rel=1e-6)
    assert typed.avg_jct_s > typed.alone_avg_jct_s  # the instance has contention


def test_envelope_at_a_speed_dominates_every_rate_on_that_type(short_app: AppTrace) -> None:
    rng = np.random.default_rng(1)
    placements = [(1,), (2,), (1, 1), (2, 1), (2, 2)]
    for speed in (0.3, 2.5):
        env = rate_envelope(short_app, kmax=4, gpus_per_node=2, num_nodes=2, speed=speed)
        base = rate_envelope(short_app, kmax=4, gpus_per_node=2, num_nodes=2)
        # faster GPUs never lower the envelope, slower never raise it
        assert np.all((env.epoch_rates[:, 1:] > base.epoch_rates[:, 1:]) == (speed > 1.0))
        for _ in range(200):
            p = placements[rng.integers(len(placements))]
            m = int(rng.integers(1, short_app.max_local_bsz + 1))
            s = int(rng.integers(0, 3))
            if sum(p) * m * (s + 1) > short_app.max_batch_size:
                continue
            e = int(rng.integers(short_app.max_epochs))
            assert short_app.rate(p, m, s, e, speed) <= env.epoch_rates[e, sum(p)]


def test_typed_cluster_rejects_an_empty_type_list() -> None:
    with pytest.raises(ValueError, match="node_types"):
        TypedCluster(())
