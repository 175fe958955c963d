"""Issue 34's peer-conditions mode of the simulator, and the flapping figures it reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sim_kit import Recorder, write_app

from adl.sched.sim.metrics import max_resumes_within, summarize
from adl.sched.sim.simulator import PEER_RESTART_S, SimConfig, Simulator, peer_conditions
from adl.sched.sim.traces import load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import Allocation, JobInfo, NodeInfo


def test_peer_conditions_are_fixed_rounds_per_model_delays_and_no_oracle() -> None:
    config = peer_conditions()
    assert config.round_s == 60 and not config.rounds_on_events and not config.oracle_info
    assert dict(PEER_RESTART_S) == {
        "cifar10": 50,
        "deepspeech2": 25,
        "yolov3": 80,
        "bert": 120,
        "imagenet": 250,
    }
    assert config.restart_delay_for("yolov3") == 80
    assert config.restart_delay_for("ncf") == 30  # not in the peer's list: the traces' 30 s
    assert peer_conditions(hide_remaining=True).hide_remaining


def test_max_resumes_within_an_hour_counts_the_densest_window() -> None:
    assert max_resumes_within(()) == 0
    assert max_resumes_within((0, 3599, 3600, 7200)) == 2
    assert max_resumes_within((0, 600, 1200, 1800, 2400, 3000, 3599)) == 7
    assert max_resumes_within((0, 1000, 5000)) == 2


class _Flapper:
    """Gives the only job its GPU every other round: a start, then preempt/resume cycles."""

    def __init__(self) -> None:
        self.rounds = 0

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        self.rounds += 1
        return {j.name: [nodes[0].name] for j in jobs} if self.rounds % 2 else {}


def test_the_replay_records_each_resume_and_the_summary_reports_them(tmp_path: Path) -> None:
    apps = {"toy": load_app(write_app(tmp_path, "toy"))}
    work = [WorkloadJob("a", 0, "toy", 1, 8)]
    result = Simulator(work, _Flapper(), apps, SimConfig(num_nodes=1, gpus_per_node=1)).run()
    (job,) = result.jobs
    # started at 60 s, preempted at 120, resumed at 180, 300, ...: 60 s apart from 180 on
    assert job.resume_times[:3] == (180, 300, 420)
    summary = summarize(result)
    assert summary["restarts_per_job_by_app"] == {"toy": float(job.restarts)}
    assert summary["max_resumes_per_hour"] == max_resumes_within(job.resume_times)
    assert summary["max_resumes_per_hour"] >= 2
    assert summary["jobs_flapping"] == 0  # at most 5 resumes within an hour


def test_a_job_resumed_more_than_5_times_within_an_hour_counts_as_flapping(
    tmp_path: Path,
) -> None:
    # ten times the work: the flapper resumes it every 120 s for longer than an hour
    root = write_app(tmp_path, "toy", epoch_ends=((450, 1000, 1500), (500, 1100, 1600)))
    work = [WorkloadJob("a", 0, "toy", 1, 8), WorkloadJob("b", 0, "toy", 1, 8)]
    config = SimConfig(num_nodes=1, gpus_per_node=2)
    summary = summarize(Simulator(work, _Flapper(), {"toy": load_app(root)}, config).run())
    assert summary["max_resumes_per_hour"] > 5
    assert summary["jobs_flapping"] == 2


def test_recorder_sees_the_peer_restart_cost(tmp_path: Path) -> None:
    apps = {"yolov3": load_app(write_app(tmp_path, "yolov3"))}
    policy = Recorder()
    config = peer_conditions(num_nodes=1, gpus_per_node=1)
    Simulator([WorkloadJob("y", 0, "yolov3", 1, 8)], policy, apps, config).run()
    assert {i.restart_cost_s for seen in policy.seen for i in seen} == {80.0}
