"""The round on a cluster of two GPU types (issue 33): a job's measured models per type make it
start where it runs faster, the decision says why, and no policy's answer mixes types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.controller.rounds import job_info, plan_round
from adl.models import Hints, Phase
from adl.sched.policy import AdlPolicy
from adl.sched.types import Allocation, JobInfo, NodeInfo
from tests.unit.controller.test_rounds import HINTS, NOW, record

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
NODES = [NodeInfo("t0", 4, gpu_type=T4), NodeInfo("a0", 4, gpu_type=A100)]
# a long job (hours on one GPU): its restart cost does not decide where it starts
ON_T4 = HINTS.model_copy(update={"gpu_type": T4, "total_progress": 1e6})
ON_A100_MODEL = HINTS.perf_params.model_copy(  # type: ignore[union-attr]
    update={"alpha_c": 0.005, "beta_c": 0.0005}  # twice as fast at compute
)


def test_a_job_measured_on_both_types_starts_where_it_runs_faster_and_says_why() -> None:
    assert HINTS.perf_params is not None
    job = record("j", hints=ON_T4, type_models={T4: HINTS.perf_params, A100: ON_A100_MODEL})
    info = job_info(job, NOW)
    assert info.type_speed[T4] == 1.0 and info.type_speed[A100] > 1.9
    result = plan_round(AdlPolicy(), [job], NODES, NOW)
    assert set(result.allocation["ns/j"]) == {"a0"}
    text = result.decisions["ns/j"].message
    assert text.startswith(f"started with {len(result.allocation['ns/j'])} replicas (")
    assert f"x {A100})" in text and "there vs " in text and f"on {T4}" in text
    assert "estimated" not in text  # both types measured


def test_a_job_never_measured_on_a_type_counts_it_as_fast_as_its_own() -> None:
    info = job_info(record("j", hints=ON_T4), NOW)
    assert info.speed_on(A100) == 1.0 and A100 not in info.type_speed
    plain = job_info(record("k", hints=Hints(init_batch_size=8)), NOW)
    assert plain.type_speed == {}


class Straddling:
    """A count-only policy: every job gets one GPU on each node, across types."""

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        return {j.name: [n.name for n in nodes] for j in jobs[:1]}


def test_the_round_keeps_any_policys_answer_to_one_type_per_job() -> None:
    result = plan_round(Straddling(), [record("j")], NODES, NOW)
    kind = {n.name: n.gpu_type for n in NODES}
    assert len({kind[n] for n in result.allocation["ns/j"]}) == 1


def test_a_job_restricted_to_a_type_is_placed_only_there() -> None:
    job = record("j", spec={"gpuTypes": [T4]}, hints=ON_T4, type_models={A100: ON_A100_MODEL})
    result = plan_round(AdlPolicy(), [job], NODES, NOW)
    assert set(result.allocation["ns/j"]) == {"t0"}


def test_a_waiting_job_is_told_when_no_one_type_has_room_for_it() -> None:
    two_and_two = [NodeInfo("t0", 2, gpu_type=T4), NodeInfo("a0", 2, gpu_type=A100)]
    wide = record("wide", spec={"minReplicas": 3, "maxReplicas": 3})
    result = plan_round(AdlPolicy(), [wide], two_and_two, NOW)
    assert not result.allocation["ns/wide"]
    assert result.decisions["ns/wide"].message == (
        "waiting: 4 GPUs free, at most 2 of one type it may use, too few for its minimum of 3"
        " (a job's GPUs are all of one type)"
    )
    elsewhere = record("elsewhere", spec={"gpuTypes": ["NVIDIA-H100-80GB-HBM3"]})
    result = plan_round(AdlPolicy(), [elsewhere], two_and_two, NOW)
    assert result.decisions["ns/elsewhere"].message == (
        "waiting: 4 GPUs free, none of the types it may use (NVIDIA-H100-80GB-HBM3)"
    )


# ---------------------------------------------------------------- trying a type not measured
ONE_REPLICA = {"maxReplicas": 1}


def test_a_running_job_tries_a_free_type_it_never_measured_and_says_so() -> None:
    job = record("j", 0, Phase.RUNNING, desired=["t0"], spec=ONE_REPLICA, hints=ON_T4)
    result = plan_round(AdlPolicy(), [job], NODES, NOW)
    assert result.allocation["ns/j"] == ["a0"]
    text = result.decisions["ns/j"].message
    assert text.startswith(f"moved to 1 x {A100}: speedup 1.50 there vs 1.00 on {T4}"), text
    assert f"trying {A100}: not measured there yet" in text


def test_after_the_try_a_slower_type_gives_the_job_back_by_a_measured_move() -> None:
    # it ran on the A100s and measured them slower than its T4 model (kept in typeModels)
    assert HINTS.perf_params is not None
    slow = HINTS.perf_params.model_copy(update={"alpha_c": 0.02, "beta_c": 0.002})
    on_a100 = ON_T4.model_copy(update={"gpu_type": A100, "perf_params": slow})
    job = record(
        "j",
        0,
        Phase.RUNNING,
        desired=["a0"],
        spec=ONE_REPLICA,
        hints=on_a100,
        type_models={T4: HINTS.perf_params, A100: slow},
    )
    result = plan_round(AdlPolicy(), [job], NODES, NOW)
    assert result.allocation["ns/j"] == ["t0"]
    text = result.decisions["ns/j"].message
    assert text.startswith(f"moved to 1 x {T4}: speedup 2.00 there vs 1.00 on {A100}"), text
    assert "trying" not in text and "estimated" not in text


def test_after_the_try_a_faster_type_keeps_the_job() -> None:
    on_a100 = ON_T4.model_copy(update={"gpu_type": A100, "perf_params": ON_A100_MODEL})
    assert HINTS.perf_params is not None
    job = record(
        "j",
        0,
        Phase.RUNNING,
        desired=["a0"],
        spec=ONE_REPLICA,
        hints=on_a100,
        type_models={T4: HINTS.perf_params, A100: ON_A100_MODEL},
    )
    result = plan_round(AdlPolicy(), [job], NODES, NOW)
    assert result.allocation["ns/j"] == ["a0"] and "ns/j" not in result.changed


def test_a_type_whose_gpus_are_held_is_not_tried() -> None:
    # another job holds every A100: the try would take GPUs from it, so none is made
    running = record("j", 0, Phase.RUNNING, desired=["t0"], spec=ONE_REPLICA, hints=ON_T4)
    holder = record(
        "h", 0, Phase.RUNNING, desired=["a0"] * 4, spec={"gpuTypes": [A100]}, hints=HINTS
    )
    result = plan_round(AdlPolicy(), [running, holder], NODES, NOW)
    assert result.allocation["ns/j"] == ["t0"]


def test_a_type_its_kind_measured_is_estimated_from_those_jobs_not_tried() -> None:
    from adl.sched.type_history import TypeSpeedHistory

    assert HINTS.perf_params is not None
    kind = {"jobKind": "bert"}
    veteran = record(
        "v",
        0,
        Phase.RUNNING,
        desired=["t0"],
        spec={**kind, **ONE_REPLICA},
        hints=ON_T4,
        type_models={T4: HINTS.perf_params, A100: ON_A100_MODEL},
    )
    newcomer = record(
        "n", 0, Phase.RUNNING, desired=["t0"], spec={**kind, **ONE_REPLICA}, hints=ON_T4
    )
    result = plan_round(
        AdlPolicy(), [veteran, newcomer], NODES, NOW, type_history=TypeSpeedHistory()
    )
    # the A100 node has room for both: the veteran knows it runs 2x faster there, and the
    # newcomer of its kind is estimated so (not tried at 1.5x)
    assert result.allocation == {"ns/v": ["a0"], "ns/n": ["a0"]}
    estimated = result.decisions["ns/n"].message
    assert estimated == (
        f"moved to 1 x {A100}: speedup 2.00 there vs 1.00 on {T4}"
        " (not measured on both: estimated from jobs of its kind)"
    )
    assert result.decisions["ns/v"].message == (
        f"moved to 1 x {A100}: speedup 2.00 there vs 1.00 on {T4}"
    )
    # without the history the newcomer could only have tried the A100 (1.5x)
    info = {i.name: i for i in result.infos}["ns/n"]
    assert info.estimated_types == (A100,) and info.type_speed[A100] > 1.9
