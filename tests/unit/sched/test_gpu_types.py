"""Mixed GPU types (issue 33): no job ever spans two types, every allocation is placeable, jobs
keep to the types they allow, and a job goes where it runs faster."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from adl.models import AdaptiveJobSpec, Hints, PerfParamsModel
from adl.sched.baselines import FifoPolicy, PolluxPolicy, PolluxSettings, SiaPolicy, TiresiasPolicy
from adl.sched.decisions import explain
from adl.sched.gpu_types import one_type_per_job
from adl.sched.hints import MIN_TYPE_SPEED, type_speed_from_models
from adl.sched.placement import Cluster, validate_allocation
from adl.sched.policy import AdlPolicy
from adl.sched.types import JobInfo, NodeInfo
from tests.unit.sched.policy_kit import amdahl, job

A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"


def mixed(a100_nodes: int = 1, t4_nodes: int = 1, gpus: int = 4) -> list[NodeInfo]:
    return [NodeInfo(f"a{i}", gpus, gpu_type=A100) for i in range(a100_nodes)] + [
        NodeInfo(f"t{i}", gpus, gpu_type=T4) for i in range(t4_nodes)
    ]


def problems(allocation, jobs: list[JobInfo], nodes: list[NodeInfo]) -> list[str]:
    return validate_allocation(
        allocation,
        nodes,
        {j.name: max(j.gpus_per_replica, 1) for j in jobs},
        {j.name: j.gpu_types for j in jobs},
    )


def types_of(allocation, nodes: list[NodeInfo], name: str) -> set[str]:
    kind = {n.name: n.gpu_type for n in nodes}
    return {kind[n] for n in allocation.get(name, [])}


# ------------------------------------------------------------------ the adl policy


def test_a_job_twice_as_fast_on_one_type_gets_that_type_when_both_are_free() -> None:
    nodes = mixed()
    for fast in (A100, T4):  # the name of the type does not decide: its speed does
        jobs = [job("j", max_replicas=4, type_speed={fast: 2.0})]
        got = AdlPolicy().optimize(jobs, nodes, {})
        assert len(got["j"]) == 4
        assert types_of(got, nodes, "j") == {fast}


def test_a_job_never_spans_two_types_even_when_that_would_give_it_more_gpus() -> None:
    nodes = mixed()
    jobs = [job("j", max_replicas=8, speedup=amdahl(0.0, 1.0))]  # linear: 8 GPUs would pay
    got = AdlPolicy().optimize(jobs, nodes, {})
    assert len(got["j"]) == 4
    assert len(types_of(got, nodes, "j")) == 1


def test_a_job_keeps_to_the_types_it_allows_even_where_another_is_faster() -> None:
    nodes = mixed()
    jobs = [job("j", max_replicas=4, gpu_types=(T4,), type_speed={A100: 3.0})]
    got = AdlPolicy().optimize(jobs, nodes, {})
    assert types_of(got, nodes, "j") == {T4}


def test_a_job_whose_types_the_cluster_lacks_waits() -> None:
    got = AdlPolicy().optimize([job("j", gpu_types=("H100",))], mixed(), {})
    assert not got.get("j")


def test_two_jobs_share_the_fast_type_by_who_gains_more_there() -> None:
    # both run on either type; "keen" is 3x faster on A100, "flat" runs alike on both: the
    # A100s go to the one that gains from them, and both run
    nodes = mixed()
    jobs = [
        job("flat", 0, max_replicas=4),
        job("keen", 1, max_replicas=4, type_speed={A100: 3.0, T4: 1.0}),
    ]
    got = AdlPolicy().optimize(jobs, nodes, {})
    assert types_of(got, nodes, "keen") == {A100}
    assert types_of(got, nodes, "flat") == {T4}


def test_a_running_job_moves_to_a_much_faster_type_once_it_is_free() -> None:
    nodes = mixed()
    long = {"remaining_s": 1e6, "age_s": 3600.0, "restart_cost_s": 30.0, "max_replicas": 4}
    on_t4 = {"j": ["t0"] * 4}
    fast = job("j", type_speed={A100: 3.0, T4: 1.0}, **long)
    assert types_of(AdlPolicy().optimize([fast], nodes, on_t4), nodes, "j") == {A100}
    alike = job("j", type_speed={A100: 1.02, T4: 1.0}, **long)  # within the change margin
    assert AdlPolicy().optimize([alike], nodes, on_t4) == on_t4


def test_a_previous_allocation_that_mixed_types_is_not_kept() -> None:
    nodes = mixed()
    jobs = [job("j", max_replicas=4)]
    got = AdlPolicy().optimize(jobs, nodes, {"j": ["a0", "a0", "t0", "t0"]})
    assert len(types_of(got, nodes, "j")) == 1
    assert not problems(got, jobs, nodes)


def test_a_uniform_cluster_places_as_before_types_existed() -> None:
    plain = [NodeInfo(f"n{i}", 4) for i in range(3)]
    typed = [NodeInfo(f"n{i}", 4, gpu_type=A100) for i in range(3)]
    jobs = [job(f"j{i}", i, max_replicas=6) for i in range(3)]
    assert AdlPolicy().optimize(jobs, plain, {}) == AdlPolicy().optimize(jobs, typed, {})


def test_the_cluster_places_a_job_on_the_type_it_is_asked_for() -> None:
    cluster = Cluster(mixed(2, 2))
    assert cluster.type_names == (A100, T4)
    placed = cluster.place(6, 1, (), T4)
    assert placed is not None and {cluster.types[i] for i in placed} == {T4}
    assert cluster.place(9, 1, (), T4) is None  # 8 T4s only, though 16 GPUs are free
    assert cluster.place(2, 1, (), "H100") is None
    cluster.take("x", placed)
    assert cluster.free_of(T4) == 2 and cluster.free_of(A100) == 8


type_names = st.sampled_from(["", A100, T4, "H100"])


@st.composite
def clusters_and_jobs(draw):
    nodes = [
        NodeInfo(f"n{i}", draw(st.integers(0, 8)), gpu_type=draw(type_names))
        for i in range(draw(st.integers(1, 6)))
    ]
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        lo = draw(st.integers(0, 3))
        jobs.append(
            job(
                f"j{i}",
                i,
                speedup=amdahl(draw(st.floats(0.0, 0.3)), draw(st.floats(0.5, 1.0))),
                min_replicas=lo,
                max_replicas=draw(st.integers(max(lo, 1), 12)),
                gpus_per_replica=draw(st.integers(1, 2)),
                max_profiled_replicas=draw(st.integers(0, 8)),
                gpu_types=tuple(draw(st.sets(type_names, max_size=2))),
                type_speed=draw(st.dictionaries(type_names, st.floats(0.25, 4.0), max_size=3)),
                preemptible=draw(st.booleans()),
            )
        )
    # a previous allocation that may mix types and overfill nodes: the policy must not trust it
    names = [n.name for n in nodes]
    previous = {
        j.name: draw(st.lists(st.sampled_from(names), max_size=6))
        for j in jobs
        if draw(st.booleans())
    }
    return nodes, jobs, previous


@settings(max_examples=150, deadline=None)
@given(clusters_and_jobs(), st.sampled_from([{}, {"dp": 0.0}, {"dp": 0.0, "local_search": 0.0}]))
def test_every_adl_allocation_is_placeable_and_one_type_per_job(case, knobs) -> None:
    # the default solvers, and the greedy alone (with and without its local search)
    nodes, jobs, previous = case
    got = AdlPolicy(**knobs).optimize(jobs, nodes, previous)
    assert not problems(got, jobs, nodes)
    for j in jobs:
        n = len(got.get(j.name, []))
        if j.name not in previous:  # (one that may not be preempted keeps what it held)
            assert n == 0 or j.min_replicas <= n <= j.max_replicas


@settings(max_examples=150, deadline=None)
@given(clusters_and_jobs())
def test_the_shared_rule_makes_any_placeable_answer_one_type_per_job(case) -> None:
    nodes, jobs, _ = case
    # a count-only placement, as the baselines make: fills nodes in order, mixing types
    free = {n.name: n.gpus for n in nodes}
    answer: dict[str, list[str]] = {}
    for j in jobs:
        g = max(j.gpus_per_replica, 1)
        got: list[str] = []
        for n in nodes:
            while len(got) < j.max_replicas and free[n.name] >= g:
                got.append(n.name)
                free[n.name] -= g
        answer[j.name] = got
    # (count-only placements may share a node between distributed jobs: not this rule's
    # business, only capacities and types are)
    fixed = one_type_per_job(answer, jobs, nodes)
    assert not [p for p in problems(fixed, jobs, nodes) if "distributed" not in p]
    whole = one_type_per_job(answer, jobs, nodes, whole=True)
    assert not [p for p in problems(whole, jobs, nodes) if "distributed" not in p]
    for j in jobs:  # all or nothing
        assert len(whole.get(j.name, [])) in (0, len(answer[j.name]))


def test_the_shared_rule_moves_a_mixed_job_whole_onto_one_type_with_room() -> None:
    nodes = mixed(1, 2)
    jobs = [job("j", max_replicas=4, type_speed={A100: 2.0})]
    fixed = one_type_per_job({"j": ["a0", "a0", "t0", "t0"]}, jobs, nodes)
    # both types have room for all four; A100 is where it runs faster
    assert sorted(fixed["j"]) == ["a0"] * 4


# ------------------------------------------------------------------ the baselines


def test_no_baseline_mixes_types_within_a_job() -> None:
    # 4 GPUs of each type, the types interleaved: count-only placements of 3 replicas straddle
    a100, t4 = mixed(2, 0, gpus=2), mixed(0, 2, gpus=2)
    nodes = [a100[0], t4[0], a100[1], t4[1]]
    jobs = [
        job(f"j{i}", i, max_replicas=3, max_profiled_replicas=4, age_s=3600.0) for i in range(3)
    ]
    policies = [
        FifoPolicy(),
        TiresiasPolicy(),
        SiaPolicy(),
        PolluxPolicy(settings=PolluxSettings(population=20, generations=10)),
    ]
    for policy in policies:
        got = policy.optimize(jobs, nodes, {})
        assert not problems(got, jobs, nodes), type(policy).__name__
        assert any(got.values()), type(policy).__name__


# ------------------------------------------------------------------ the decision log


def test_the_decision_says_why_a_type_was_chosen() -> None:
    nodes = mixed()
    info = job("j", max_replicas=4, speedup=amdahl(0.0, 1.0), type_speed={A100: 2.0, T4: 1.0})
    decided = explain(
        {"j": ["a0"] * 4},
        {"j": ["t0"] * 4},
        {"j": info},
        free_gpus=4,
        reported={"j": True},
        node_types={n.name: n.gpu_type for n in nodes},
    )
    assert decided["j"].message == (f"moved to 4 x {A100}: speedup 8.00 there vs 4.00 on {T4}")


def test_a_move_to_more_gpus_of_a_slower_type_is_told_against_what_it_left() -> None:
    # a job on one fast GPU moved onto four idle slow ones (``type_fill``): the fast type
    # would be faster at four, but none is free there. The decision compares the move with
    # what the job left, and says why not four of the fast type (it said "speedup 2.00 there
    # vs 4.00 on A100", as if the policy had picked the worse of two open choices)
    nodes = mixed()
    info = job("j", max_replicas=4, speedup=amdahl(0.0, 1.0), type_speed={A100: 1.0, T4: 0.5})
    decided = explain(
        {"j": ["t0"] * 4},
        {"j": ["a0"]},
        {"j": info},
        free_gpus=4,
        reported={"j": True},
        node_types={n.name: n.gpu_type for n in nodes},
        free_by_type={A100: 1, T4: 0},
    )
    assert decided["j"].message == (
        f"grew 1 -> 4 (4 x {T4}): speedup 2.00 there vs 1.00 on 1 x {A100} before"
        f" (4 x {A100} would be 4.00, but 1 free), 4 GPUs free"
    )


def test_the_decision_says_when_the_types_speeds_are_estimates() -> None:
    nodes = mixed()
    decided = explain(
        {"j": ["a0"] * 2},
        {},
        {"j": job("j", speedup=amdahl(0.0, 1.0))},
        free_gpus=8,
        reported={"j": True},
        node_types={n.name: n.gpu_type for n in nodes},
    )
    text = decided["j"].message
    assert text.startswith(f"started with 2 replicas ({'2 x ' + A100})")
    assert "not measured on both: estimated alike" in text


def test_a_uniform_cluster_decision_names_no_type() -> None:
    decided = explain(
        {"j": ["n0"] * 2},
        {},
        {"j": job("j", speedup=amdahl(0.0, 1.0))},
        free_gpus=4,
        reported={"j": True},
        node_types={"n0": ""},
    )
    assert decided["j"].message == "started with 2 replicas: speedup 2.00, 4 GPUs free"


# ------------------------------------------------------------------ bounds of the inputs


def test_spec_gpu_types_are_bounded_label_values() -> None:
    template = {"spec": {"containers": [{"name": "t", "command": ["python"]}]}}
    ok = AdaptiveJobSpec(template=template, gpuTypes=[A100, T4])
    assert ok.gpu_types == [A100, T4]
    for bad in (
        [f"gpu-{i}" for i in range(17)],  # more than 16
        ["NVIDIA A100"],  # a space: torch's name, not the label's
        ["x" * 64],  # longer than a label value
        [""],
    ):
        with pytest.raises(ValidationError):
            AdaptiveJobSpec(template=template, gpuTypes=bad)


def test_per_type_speeds_need_a_current_type_and_are_clamped() -> None:
    perf = PerfParamsModel(
        alpha_c=0.01, beta_c=0.001, alpha_n=0.0, beta_n=0.0, alpha_r=0.0, beta_r=0.0, gamma=1.0
    )
    crawl = perf.model_copy(update={"alpha_c": 1000.0})
    hints = Hints(init_batch_size=10, perf_params=perf)
    assert type_speed_from_models(hints, {T4: crawl}) == {}  # no type: nothing is known
    typed = hints.model_copy(update={"gpu_type": A100})
    assert type_speed_from_models(typed, {T4: crawl}) == {A100: 1.0, T4: MIN_TYPE_SPEED}
    with pytest.raises(ValidationError):
        Hints(init_batch_size=10, gpuType="Tesla T4")


def test_a_job_in_a_node_pool_takes_the_faster_type_inside_its_pool_only() -> None:
    """Node pools (a Kueue flavor's nodes) and GPU types together: the pool holds one A100 node
    and one T4 node of the four; the job, faster on T4, gets the pool's T4 node, never the T4
    node outside it; the shared rule moving a mixed answer keeps to the pool too."""
    nodes = mixed(a100_nodes=2, t4_nodes=2)
    pool = frozenset({"a1", "t1"})
    jobs = [job("j", max_replicas=8, speedup=amdahl(0.0, 1.0), type_speed={T4: 2.0})]
    jobs = [JobInfo(**{**jobs[0].__dict__, "nodes": pool})]
    got = AdlPolicy().optimize(jobs, nodes, {})
    assert got["j"] and set(got["j"]) == {"t1"}, got
    # an answer mixing types (as a baseline might give) is re-seated within the pool: its T4
    # node has one GPU, so both replicas go to its A100 node, not to the T4 node outside it
    small = [NodeInfo("a1", 4, gpu_type=A100), NodeInfo("t1", 1, gpu_type=T4)]
    small += [NodeInfo("t0", 4, gpu_type=T4), NodeInfo("a0", 4, gpu_type=A100)]
    fixed = one_type_per_job({"j": ["a1", "t1"]}, jobs, small)
    assert fixed["j"] == ["a1", "a1"], fixed
