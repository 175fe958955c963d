"""The simulator's elastic cluster (``adl.sched.sim.elastic``): nodes wait out provisioning and
start-up, go when idle, are interrupted on a seeded clock, are billed for their lives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from sim_kit import write_app

from adl.sched.sim.elastic import ElasticCluster, ElasticConfig
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import Allocation, JobInfo, NodeInfo

ONE_GPU_JOB = JobInfo("j", max_replicas=1)  # wants exactly one GPU


def names(cluster: ElasticCluster) -> list[str]:
    return [n.name for n in cluster.offered()]


def test_a_node_is_ready_after_provisioning_and_start_up_and_goes_once_idle():
    cluster = ElasticCluster(ElasticConfig(interruptions_per_node_h=0.0))
    cluster.after_round(0, [ONE_GPU_JOB], {})
    assert names(cluster) == []
    assert cluster.begin_round(60, {}) == set() and names(cluster) == []
    cluster.after_round(60, [ONE_GPU_JOB], {})  # on its way: not asked for twice
    assert cluster.begin_round(120, {}) == set() and names(cluster) == ["spot-0000"]
    cluster.after_round(120, [ONE_GPU_JOB], {"j": ["spot-0000"]})
    held = {"j": ["spot-0000"]}
    cluster.begin_round(180, held)
    assert cluster.begin_round(240, {}) == set()  # idle from 240 ...
    assert cluster.begin_round(480, {}) == set()  # ... 240 s < 300 s
    assert cluster.begin_round(540, {}) == {"spot-0000"}  # consolidated after 300 s idle
    assert names(cluster) == []
    (life,) = cluster.lives(end_s=600)
    assert (life.launched_s, life.ended_s, life.ended_by) == (60, 540, "consolidated")
    assert cluster.bill(600).dollars == pytest.approx(480 / 3600 * 4.41)


def test_interruptions_come_on_the_seeded_clock_with_their_notice():
    config = ElasticConfig(interruptions_per_node_h=1.0, seed=7, provisioning_s=0, startup_s=0)
    cluster = ElasticCluster(config)
    cluster.after_round(0, [ONE_GPU_JOB], {})
    # the node is ready at 0: its notice comes after an exponential wait of mean 1 h
    notice = float(np.random.default_rng(7).exponential(3600.0))
    held = {"j": ["spot-0000"]}
    t = 0
    while not cluster.begin_round(t, held):
        t += 60
        assert t < 100 * 3600
    assert t - 60 < notice <= t  # noticed at the first round after it
    (life,) = cluster.lives(end_s=t)
    assert life.ended_by == "interrupted"
    assert life.ended_s == pytest.approx(notice + config.notice_s)  # billed until it is gone
    assert cluster.bill(t).interruptions == 1


def test_the_cap_counts_nodes_on_their_way_and_on_demand_when_spot_is_off():
    hungry = JobInfo("big", max_replicas=64, max_profiled_replicas=32)
    cluster = ElasticCluster(ElasticConfig(max_nodes=2, spot=False))
    cluster.after_round(0, [hungry], {})
    cluster.after_round(60, [hungry], {})
    cluster.begin_round(120, {})
    assert names(cluster) == ["od-0000", "od-0001"]
    assert all(not n.preemptible for n in cluster.offered())
    assert cluster.bill(120).on_demand_node_hours > 0 and cluster.bill(120).interruptions == 0


def test_pollux_empties_the_nodes_beyond_its_size_and_they_are_billed_until_consolidated():
    cluster = ElasticCluster(ElasticConfig(autoscaler="pollux", provisioning_s=0, startup_s=0))
    sqrt = lambda n, k: np.sqrt(np.asarray(k, dtype=np.float64))  # noqa: E731
    infos = [JobInfo(n, speedup=sqrt, max_replicas=16, max_profiled_replicas=16) for n in "ab"]
    cluster.after_round(0, infos, {})  # no nodes: one
    cluster.begin_round(0, {})
    cluster.after_round(0, infos, {"a": ["spot-0000"] * 2, "b": ["spot-0000"] * 2})  # two
    cluster.begin_round(60, {})
    nodes = names(cluster)
    assert nodes == ["spot-0000", "spot-0001"]
    # both jobs on 4 GPUs each: utility 0.5, inside the band: kept
    spread = {"a": ["spot-0000"] * 4, "b": ["spot-0001"] * 4}
    cluster.after_round(60, infos, spread)
    assert cluster.begin_round(120, spread) == set()
    # one job left, on one GPU of each node: utility sqrt(2) / 8 < 0.35: back to one node
    thin = {"a": ["spot-0000", "spot-0001"]}
    cluster.after_round(120, infos[:1], thin)
    assert cluster.begin_round(180, thin) == {"spot-0001"}  # emptied: its job moves
    life = next(x for x in cluster.lives(180) if x.name == "spot-0001")
    assert (life.ended_s, life.ended_by) == (180 + 300, "consolidated")


def test_adl_empties_a_low_value_node_and_offers_it_again_when_new_demand_comes():
    config = ElasticConfig(provisioning_s=0, startup_s=0, drop_low_value=True)
    cluster = ElasticCluster(config)
    sqrt = lambda n, k: np.sqrt(np.asarray(k, dtype=np.float64))  # noqa: E731
    linear = lambda n, k: np.asarray(k, dtype=np.float64)  # noqa: E731
    hungry = JobInfo("h", speedup=linear, max_replicas=8, max_profiled_replicas=4)
    cluster.after_round(0, [hungry], {})  # h wants 8 GPUs: two nodes
    cluster.begin_round(0, {})
    assert names(cluster) == ["spot-0000", "spot-0001"]
    # h is gone; a poor scaler holds one node and one GPU of the other
    poor = JobInfo("a", speedup=sqrt, max_replicas=16, max_profiled_replicas=8)
    thin = {"a": ["spot-0000"] * 4 + ["spot-0001"]}
    cluster.after_round(60, [poor], thin)
    assert cluster.begin_round(120, thin) == {"spot-0001"}  # emptied: a's 5th replica goes
    assert names(cluster) == ["spot-0000"]
    # a new job wants 4 GPUs before consolidation took spot-0001: it is offered again
    wants = JobInfo("b", speedup=linear, max_replicas=4, max_profiled_replicas=2, submit_order=1)
    held = {"a": ["spot-0000"] * 4}
    cluster.after_round(120, [poor, wants], held)
    cluster.begin_round(180, held)
    assert names(cluster) == ["spot-0000", "spot-0001"]
    assert len(cluster.lives(180)) == 2  # no node launched for b


class OneGpuEach:
    """Every job one GPU: where it already is, else on any node with room."""

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        room = {n.name: n.gpus for n in nodes}
        out: Allocation = {}
        for job in jobs:
            held = [n for n in previous.get(job.name, []) if room.get(n, 0) > 0][:1]
            if not held:
                held = [n for n, free in room.items() if free > 0][:1]
            for n in held:
                room[n] -= 1
            if held:
                out[job.name] = held
        return out


def test_a_replay_on_an_elastic_cluster_waits_for_its_node_and_pays_for_it(tmp_path: Path):
    apps = {"toy": load_app(write_app(tmp_path))}
    work = [WorkloadJob("a", 0, "toy", 1, 8)]
    elastic = ElasticConfig(interruptions_per_node_h=0.0)
    config = SimConfig(gpus_per_node=4, elastic=elastic)
    result = Simulator(work, OneGpuEach(), apps, config).run()
    (job,) = result.jobs
    # asked for at the first round (60), billed from 120, ready at 180: it starts at the round
    # of 180 and needs 30 s of restart and 150 s of work
    assert job.completion_s == 180 + 30 + 150
    assert job.restarts == 0
    assert result.bill is not None
    # up when the workload ends: it idles until consolidation takes it (300 s later)
    assert result.bill.dollars == pytest.approx((360 + 300 - 120) / 3600 * 4.41)
    assert result.cluster_timeline[0] == (60, 0, 1)


def test_an_interrupted_job_restarts_elsewhere_and_still_finishes(tmp_path: Path):
    apps = {"toy": load_app(write_app(tmp_path))}
    work = [WorkloadJob("a", 0, "toy", 1, 8)]
    calm = SimConfig(gpus_per_node=4, elastic=ElasticConfig(interruptions_per_node_h=0.0))
    base = Simulator(work, OneGpuEach(), apps, calm).run().jobs[0]
    stormy = ElasticConfig(interruptions_per_node_h=60.0, seed=3)  # one a minute on average
    result = Simulator(work, OneGpuEach(), apps, SimConfig(gpus_per_node=4, elastic=stormy)).run()
    (job,) = result.jobs
    assert result.bill is not None and result.bill.interruptions >= 1
    assert job.restarts >= 1  # each node lost is a restart, its progress kept
    assert job.completion_s is not None and base.completion_s is not None
    assert job.completion_s > base.completion_s
    # a job loses no progress it made: it needs the same 150 s of work, plus a 30 s restart
    # each time it started, plus the time it waited for nodes
    assert job.gpu_seconds == pytest.approx(150 + 30 * (job.restarts + 1))
