"""Which running jobs try a GPU type they have not measured (``adl.sched.type_explore``)."""

from __future__ import annotations

from adl.sched.type_explore import EXPLORE_SPEED, explore_types
from adl.sched.types import JobInfo, NodeInfo

T4, A100, H100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
NODES = [
    NodeInfo("t0", 4, gpu_type=T4),
    NodeInfo("a0", 2, gpu_type=A100),
    NodeInfo("h0", 4, gpu_type=H100),
]


def measured_on_t4(name: str = "j", **kw: object) -> JobInfo:
    return JobInfo(name, type_speed={T4: 1.0}, **kw)  # type: ignore[arg-type]


def test_a_job_measured_on_its_type_tries_the_free_type_with_most_gpus() -> None:
    [out] = explore_types([measured_on_t4()], NODES, {"j": ["t0"]})
    assert out.exploring == (H100,)
    assert out.type_speed == {T4: 1.0, H100: EXPLORE_SPEED}


def test_measured_types_and_types_it_may_not_use_are_not_tried() -> None:
    job = JobInfo("j", type_speed={T4: 1.0, H100: 0.9}, gpu_types=(T4, H100))
    [out] = explore_types([job], NODES, {"j": ["t0"]})
    assert out is job  # A100 excluded by gpuTypes, H100 measured already


def test_only_types_with_room_for_its_current_size_are_tried() -> None:
    # three replicas: the A100 node's 2 GPUs are too few; the H100s are held by another job
    job = measured_on_t4()
    other = JobInfo("o", gpu_types=(H100,))
    out = explore_types([job, other], NODES, {"j": ["t0"] * 3, "o": ["h0"] * 2})
    assert out[0].exploring == ()
    out = explore_types([job, other], NODES, {"j": ["t0"] * 2, "o": ["h0"] * 2})
    assert out[0].exploring == (A100,)  # 2 free on each: the name breaks the tie


def test_gpus_per_replica_count_in_the_room_needed() -> None:
    job = measured_on_t4(gpus_per_replica=4)
    [out] = explore_types([job], NODES, {"j": ["t0"]})
    assert out.exploring == (H100,)  # the A100 node has 2 of the 4 GPUs one replica needs
    [out] = explore_types([job], NODES[:2], {"j": ["t0"]})
    assert out.exploring == ()


def test_nothing_is_tried_without_a_measured_own_type_or_on_a_uniform_cluster() -> None:
    waiting = measured_on_t4()
    assert explore_types([waiting], NODES, {"j": []}) == [waiting]  # holds nothing
    unmeasured = JobInfo("j")  # no model of its own type yet (e.g. just moved)
    assert explore_types([unmeasured], NODES, {"j": ["t0"]}) == [unmeasured]
    # reported from T4, but it runs on the H100s now (moved, not yet reported there)
    moved = measured_on_t4()
    assert explore_types([moved], NODES, {"j": ["h0"]}) == [moved]
    uniform = [NodeInfo("n0", 4), NodeInfo("n1", 4)]
    assert explore_types([waiting], uniform, {"j": ["n0"]}) == [waiting]
