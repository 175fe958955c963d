"""The scheduling round: JobInfos from job state, any Policy, changed allocations."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from adl.controller.rounds import (
    DEFAULT_RESTART_COST_S,
    FINISHING_PIN_S,
    JobRecord,
    RoundLog,
    SpeedupCache,
    accrue_service,
    job_info,
    plan_round,
    timed_plan_round,
)
from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    PerfParamsModel,
    Phase,
    RestartCause,
)
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo, linear_speedup
from tests.fakes import FixedPolicy, GreedyPolicy

NOW = datetime(2024, 5, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": ["python"]}]}}


def record(
    name: str,
    age_s: float = 0,
    phase: Phase = Phase.PENDING,
    desired: list[str] | None = None,
    spec: dict[str, Any] | None = None,
    **status: Any,
) -> JobRecord:
    return JobRecord(
        key=f"ns/{name}",
        spec=AdaptiveJobSpec(template=TEMPLATE, **(spec or {})),
        status=AdaptiveJobStatus(phase=phase, **status),
        created=NOW - timedelta(seconds=age_s),
        desired=desired,
    )


HINTS = Hints(
    init_batch_size=32,
    max_batch_size=512,
    local_bsz_bounds=(16, 128),
    perf_params=PerfParamsModel(
        alpha_c=0.01,
        beta_c=0.001,
        alpha_n=0.05,
        beta_n=0.01,
        alpha_r=0.01,
        beta_r=0.001,
        gamma=1.5,
    ),
    grad_params=GradParamsModel(sqr=1.0, var=10.0),
    max_profiled_replicas=2,
    progress=100.0,
    total_progress=1000.0,
    restart_cost_s=12.0,
)


def test_job_info_from_spec_status_and_hints() -> None:
    rec = record(
        "a",
        age_s=90,
        phase=Phase.RUNNING,
        spec={
            "min_replicas": 1,
            "max_replicas": 4,
            "weight": 2.0,
            "preemptible": False,
            "priority": 7,
        },
        hints=HINTS,
        attained_service_s=50.0,
        restarts={RestartCause.RESIZE: 2, RestartCause.FAILURE: 1},
    )
    info = job_info(rec, NOW, order=3)
    assert info.name == "ns/a" and info.submit_order == 3
    assert (info.min_replicas, info.max_replicas, info.weight) == (1, 4, 2.0)
    assert info.age_s == 90 and info.restarts == 3 and info.attained_service_s == 50.0
    assert info.restart_cost_s == 12.0 and info.max_profiled_replicas == 2
    assert info.preemptible is False and info.priority == 7
    assert info.remaining_s is not None and info.remaining_s > 0
    assert info.speedup is not linear_speedup
    assert float(np.asarray(info.speedup(1, 1))) == pytest.approx(1.0)
    assert float(np.asarray(info.speedup(1, 2))) > 1.0


def test_job_info_before_any_report_is_optimistic() -> None:
    info = job_info(record("b"), NOW)
    assert info.speedup is linear_speedup
    assert info.remaining_s is None
    assert info.restart_cost_s == DEFAULT_RESTART_COST_S


def test_round_skips_finished_and_suspended_and_orders_by_age() -> None:
    policy = GreedyPolicy()
    jobs = [
        record("young", age_s=10, spec={"max_replicas": 3}),
        record(
            "old",
            age_s=100,
            spec={"max_replicas": 3},
            phase=Phase.RUNNING,
            allocation=["n0"],
            desired=["n0"],
        ),
        record("done", age_s=200, phase=Phase.SUCCEEDED, desired=["n0"]),
        record("paused", age_s=300, spec={"suspend": True}),
    ]
    result = plan_round(policy, jobs, [NodeInfo("n0", 4)], NOW)
    ((infos, _nodes, previous),) = policy.calls
    assert [i.name for i in infos] == ["ns/old", "ns/young"]
    assert previous == {"ns/old": ["n0"], "ns/young": []}
    assert result.allocation == {"ns/old": ["n0"] * 3, "ns/young": ["n0"]}
    # the finished job still held a desired allocation: it is given back
    assert result.changed == {"ns/old": ["n0"] * 3, "ns/young": ["n0"], "ns/done": []}
    assert result.jobs == 2


def test_a_job_that_reported_all_its_work_done_keeps_its_slots() -> None:
    """It is exiting: moving it would kill a finished run and restart it from an older
    checkpoint. The policy shares out only the other slots."""
    policy = GreedyPolicy()
    done = HINTS.model_copy(update={"progress": 1000.0, "total_progress": 1000.0})
    almost = HINTS.model_copy(update={"progress": 999.0, "total_progress": 1000.0})
    jobs = [
        record("exiting", age_s=100, spec={"max_replicas": 4}, phase=Phase.RUNNING,
               allocation=["n0", "n0"], desired=["n0", "n0"], hints=done),
        record("busy", age_s=90, spec={"max_replicas": 4}, phase=Phase.RUNNING,
               allocation=["n0"], desired=["n0"], hints=almost),
        record("new", age_s=10, spec={"max_replicas": 4}),
    ]  # fmt: skip
    result = plan_round(policy, jobs, [NodeInfo("n0", 4), NodeInfo("n1", 1)], NOW)
    ((infos, nodes, previous),) = policy.calls
    assert [i.name for i in infos] == ["ns/busy", "ns/new"]
    assert [(n.name, n.gpus) for n in nodes] == [("n0", 2), ("n1", 1)]
    assert "ns/exiting" not in previous
    assert result.allocation["ns/exiting"] == ["n0", "n0"]
    assert "ns/exiting" not in result.changed
    assert result.allocation["ns/busy"] == ["n0", "n0", "n1"]
    # without a declared total, nothing is pinned
    free = HINTS.model_copy(update={"progress": 5000.0, "total_progress": None})
    policy2 = GreedyPolicy()
    jobs2 = [record("x", phase=Phase.RUNNING, allocation=["n0"], desired=["n0"], hints=free)]
    plan_round(policy2, jobs2, [NodeInfo("n0", 4)], NOW)
    assert [i.name for i in policy2.calls[0][0]] == ["ns/x"]


def test_a_held_replica_takes_all_of_its_gpus_out_of_what_the_policy_shares() -> None:
    """A job kept where it is (finishing, or left out of the round) holds gpusPerReplica GPUs
    per replica: found by the property tests, a pinned 8-GPU replica took 1 GPU out of its node
    and the policy handed out the other 7 again (9 of 8 GPUs in use)."""
    policy = GreedyPolicy()
    done = HINTS.model_copy(update={"progress": 1000.0, "total_progress": 1000.0})
    jobs = [
        record("big", age_s=100, spec={"gpus_per_replica": 8}, phase=Phase.RUNNING,
               allocation=["n0"], desired=["n0"], hints=done),
        record("new", age_s=10, spec={"max_replicas": 8}),
    ]  # fmt: skip
    plan_round(policy, jobs, [NodeInfo("n0", 8), NodeInfo("n1", 2)], NOW)
    ((_, nodes, _),) = policy.calls
    assert [(n.name, n.gpus) for n in nodes] == [("n0", 0), ("n1", 2)]


def test_a_job_that_says_it_is_done_but_keeps_running_is_pinned_for_a_while_only() -> None:
    """A report of all work done (or of ``totalProgress: 0``) while the job keeps running must
    not hold its GPUs against every other job, a higher priority tier included."""
    zero = HINTS.model_copy(update={"progress": 5.0, "total_progress": 0.0})
    since = NOW - timedelta(seconds=FINISHING_PIN_S)

    def jobs(finishing_since: datetime | None) -> list[JobRecord]:
        low = record("low", age_s=100, spec={"max_replicas": 4, "priority": -10},
                     phase=Phase.RUNNING, allocation=["n0"] * 4, desired=["n0"] * 4,
                     hints=zero, finishing_since=finishing_since)  # fmt: skip
        return [low, record("high", spec={"max_replicas": 4, "priority": 100})]

    fresh = GreedyPolicy()
    plan_round(fresh, jobs(NOW - timedelta(seconds=60)), [NodeInfo("n0", 4)], NOW)
    assert [i.name for i in fresh.calls[0][0]] == ["ns/high"]  # pinned: saving and exiting
    late = GreedyPolicy()
    plan_round(late, jobs(since), [NodeInfo("n0", 4)], NOW)
    assert {i.name for i in late.calls[0][0]} == {"ns/low", "ns/high"}
    result = plan_round(AdlPolicy(), jobs(since), [NodeInfo("n0", 4)], NOW)
    assert result.allocation["ns/high"]  # before: nothing, the low job kept all four


def test_unchanged_allocation_is_not_reported() -> None:
    jobs = [record("a", spec={"max_replicas": 2}, desired=["n0", "n0"])]
    result = plan_round(GreedyPolicy(), jobs, [NodeInfo("n0", 2)], NOW)
    assert result.changed == {}


def test_a_new_job_left_waiting_has_that_answer_recorded_once() -> None:
    """The operator runs a round at once for a job no round has answered (desired None); an
    empty answer must be recorded too, or every event of the waiting job would force one."""
    running = record("a", age_s=10, spec={"max_replicas": 2}, phase=Phase.RUNNING,
                     allocation=["n0", "n0"], desired=["n0", "n0"])  # fmt: skip
    first = plan_round(GreedyPolicy(), [running, record("b")], [NodeInfo("n0", 2)], NOW)
    assert first.changed == {"ns/b": []}
    again = plan_round(GreedyPolicy(), [running, record("b", desired=[])], [NodeInfo("n0", 2)], NOW)
    assert again.changed == {}


def test_a_resumed_job_takes_part_holding_nothing() -> None:
    """spec.suspend cleared, phase still Suspended: its next group will start on this round's
    answer, not on the one it had before (another job holds that GPU now)."""
    policy = GreedyPolicy()
    holder = record("holder", age_s=20, phase=Phase.RUNNING, allocation=["n0"], desired=["n0"])
    back = record("back", age_s=10, phase=Phase.SUSPENDED, desired=["n0"])
    still = record("still", age_s=5, phase=Phase.SUSPENDED, spec={"suspend": True})
    result = plan_round(policy, [holder, back, still], [NodeInfo("n0", 1)], NOW)
    ((infos, _nodes, previous),) = policy.calls
    assert [i.name for i in infos] == ["ns/holder", "ns/back"]
    assert previous == {"ns/holder": ["n0"], "ns/back": []}
    assert result.changed == {"ns/back": []}


def test_previous_falls_back_to_running_allocation() -> None:
    policy = GreedyPolicy()
    plan_round(policy, [record("a", phase=Phase.RUNNING, allocation=["n1"])], [], NOW)
    assert policy.calls[0][2] == {"ns/a": ["n1"]}


def test_no_jobs_no_policy_call() -> None:
    policy = GreedyPolicy()
    assert plan_round(policy, [], [NodeInfo("n0", 1)], NOW).allocation == {}
    assert policy.calls == []


def test_run_round_times_the_policy_and_log_summarizes() -> None:
    log = RoundLog()
    for _ in range(3):
        result = timed_plan_round(GreedyPolicy(), [record("a")], [NodeInfo("n0", 1)], NOW)
        assert result.duration_s > 0
        log.add(result)
    summary = log.summary()
    assert summary["rounds"] == 3 and summary["max_s"] >= summary["median_s"] > 0


def test_accrue_service_only_while_holding_replicas() -> None:
    st = AdaptiveJobStatus(phase=Phase.RUNNING, replicas=3, allocation=["a"] * 3)
    assert accrue_service(st, 2, 10.0).attained_service_s == 60.0
    pending = st.model_copy(update={"phase": Phase.PENDING})
    assert accrue_service(pending, 2, 10.0).attained_service_s == 0.0


def test_with_the_real_policy() -> None:
    policy = AdlPolicy(seed=0)
    jobs = [
        record("a", age_s=60, spec={"min_replicas": 1, "max_replicas": 4}, hints=HINTS),
        record("b", age_s=30, spec={"min_replicas": 1, "max_replicas": 4}),
    ]
    nodes = [NodeInfo("n0", 2), NodeInfo("n1", 2)]
    result = plan_round(policy, jobs, nodes, NOW)
    assert set(result.allocation) == {"ns/a", "ns/b"}
    used = [n for alloc in result.allocation.values() for n in alloc]
    assert used and all(n in {"n0", "n1"} for n in used)
    assert used.count("n0") <= 2 and used.count("n1") <= 2
    for key, alloc in result.allocation.items():
        assert alloc == [] or 1 <= len(alloc) <= 4, key
    # deterministic: the same inputs give the same answer
    assert plan_round(AdlPolicy(seed=0), jobs, nodes, NOW).allocation == (result.allocation)


def test_a_higher_priority_job_gets_the_slots_of_a_running_one() -> None:
    # Two slots, held by an older job; a newer one of higher priority takes them, and the
    # older one waits (it would keep them were the priorities equal).
    old = record("old", age_s=600, phase=Phase.RUNNING, desired=["n0", "n0"], hints=HINTS)
    new = record("new", age_s=10, spec={"max_replicas": 2, "priority": 1}, hints=HINTS)
    nodes = [NodeInfo("n0", 2)]
    assert plan_round(AdlPolicy(), [old, new], nodes, NOW).allocation == {
        "ns/old": [],
        "ns/new": ["n0", "n0"],
    }
    same = record("new", age_s=10, spec={"max_replicas": 2}, hints=HINTS)
    assert plan_round(AdlPolicy(), [old, same], nodes, NOW).allocation["ns/new"] == []


def test_speedup_cache_reuses_functions_while_the_model_is_unchanged() -> None:
    cache = SpeedupCache()
    rec = record("a", hints=HINTS)
    first = job_info(rec, NOW, speedups=cache).speedup
    # progress moves on every report; the model does not
    moved = HINTS.model_copy(update={"progress": 500.0})
    again = job_info(record("a", hints=moved), NOW, speedups=cache).speedup
    assert again is first
    refit = HINTS.model_copy(update={"grad_params": GradParamsModel(sqr=1.0, var=50.0)})
    changed = job_info(record("a", hints=refit), NOW, speedups=cache).speedup
    assert changed is not first
    assert float(np.asarray(changed(1, 4))) != float(np.asarray(first(1, 4)))


def test_speedup_cache_forgets_jobs_that_left() -> None:
    cache = SpeedupCache()
    policy = GreedyPolicy()
    nodes = [NodeInfo("n0", 2)]
    plan_round(policy, [record("a", hints=HINTS), record("b")], nodes, NOW, cache)
    assert len(cache) == 2
    fn_a = policy.calls[0][0][0].speedup
    plan_round(policy, [record("a", hints=HINTS)], nodes, NOW, cache)
    assert len(cache) == 1
    assert policy.calls[1][0][0].speedup is fn_a


def test_current_goodput_from_the_reported_model() -> None:
    from adl.controller.status_hints import current_goodput
    from adl.sched.hints import goodput_from_hints

    assert current_goodput(None, 2) is None
    assert current_goodput(HINTS.model_copy(update={"perf_params": None}), 2) is None
    h = HINTS.model_copy(update={"batch_size": 128, "local_bsz": 64, "accum_steps": 0})
    fn = goodput_from_hints(h)
    assert fn is not None
    expected = float(fn.evaluate(1, 2, 64, 0))
    assert current_goodput(h, 2) == pytest.approx(expected) and expected > 0
    # without local_bsz, it follows from the global batch and the replicas
    h2 = h.model_copy(update={"local_bsz": None})
    assert current_goodput(h2, 2) == pytest.approx(expected)
    # more replicas at the same local batch: a different (here larger) figure
    assert current_goodput(h, 4) != pytest.approx(expected)
    # the job's own figure wins
    assert current_goodput(h.model_copy(update={"goodput": 7.5}), 2) == 7.5


def test_a_job_left_waiting_is_told_what_is_free_after_the_round_not_before() -> None:
    # Two free GPUs before the round; the older job takes both. The newer one waits because
    # none are left, not because two are "too few for its minimum".
    jobs = [
        record("old", age_s=60, spec={"max_replicas": 2}),
        record("new", age_s=30, spec={"max_replicas": 2}),
    ]
    result = plan_round(GreedyPolicy(), jobs, [NodeInfo("n0", 2)], NOW)
    assert len(result.allocation["ns/old"]) == 2
    assert result.decisions["ns/new"].message == "waiting: no GPUs free"


def test_a_job_waits_with_gpus_free_that_are_too_few_for_its_minimum() -> None:
    jobs = [
        record("old", age_s=60, spec={"max_replicas": 1}),
        record("big", age_s=30, spec={"min_replicas": 2, "max_replicas": 2}),
    ]
    policy = FixedPolicy()
    policy.replicas = {"old": 1, "big": 0}
    result = plan_round(policy, jobs, [NodeInfo("n0", 2)], NOW)
    assert result.decisions["ns/big"].message == (
        "waiting: 1 GPU free, too few for its minimum of 2"
    )


def test_on_cpu_slots_the_decisions_count_slots_not_gpus() -> None:
    """The local backend's CPU slots are no GPUs: its events say ``3 slots free``."""
    jobs = [
        record("a", age_s=60, spec={"max_replicas": 1}),
        record("b", age_s=30, spec={"min_replicas": 4, "max_replicas": 4}),
    ]
    policy = FixedPolicy()
    policy.replicas = {"a": 1, "b": 0}
    slots = plan_round(policy, jobs, [NodeInfo("n0", 4)], NOW, unit="slot")
    started, waiting = slots.decisions["ns/a"].message, slots.decisions["ns/b"].message
    assert "4 slots free" in started and "GPU" not in started
    assert waiting == "waiting: 3 slots free, too few for its minimum of 4"
    gpus = plan_round(policy, jobs, [NodeInfo("n0", 4)], NOW)  # the default: real GPUs
    assert "4 GPUs free" in gpus.decisions["ns/a"].message


def test_an_outside_quota_ceiling_bounds_the_round() -> None:
    """Kueue's admitted count is a hard ceiling: a job admitted for 2 of its 4 replicas is
    offered at most 2 (and its minimum no more than that) however many GPUs are free; one with
    nothing admitted sits out and gives back what it had; no ceiling is today's round."""
    spec = {"minReplicas": 3, "maxReplicas": 4}
    capped = replace(record("capped", age_s=30, spec=spec), ceiling=2)
    waiting = replace(record("waiting", age_s=20, desired=["n0"], spec=spec), ceiling=0)
    free = record("free", age_s=10, spec=spec)
    policy = GreedyPolicy()
    result = plan_round(policy, [capped, waiting, free], [NodeInfo("n0", 16)], NOW)
    infos = {i.name: i for i in policy.calls[0][0]}
    assert (infos["ns/capped"].min_replicas, infos["ns/capped"].max_replicas) == (2, 2)
    assert "ns/waiting" not in infos
    assert infos["ns/free"].max_replicas == 4
    assert len(result.allocation["ns/capped"]) == 2
    assert result.changed["ns/waiting"] == []
    assert len(result.allocation["ns/free"]) == 4


def test_a_job_confined_to_nodes_is_kept_to_them_whatever_the_policy():
    """``JobRecord.nodes`` (Kueue: the admitted flavor's nodes) reaches the policy, and a
    policy that does not read it (the baselines; here one that hands out slots in node order)
    has its replicas outside them removed: fewer than the job's minimum is none."""
    nodes = [NodeInfo("a", 2), NodeInfo("b", 2)]
    confined = replace(record("c", age_s=30, spec={"maxReplicas": 3}), nodes=frozenset({"b"}))
    gang = replace(
        record("g", age_s=20, spec={"minReplicas": 3, "maxReplicas": 3}), nodes=frozenset({"b"})
    )
    policy = GreedyPolicy()
    result = plan_round(policy, [confined, gang], nodes, NOW)
    seen = {info.name: info.nodes for info in policy.calls[0][0]}
    assert seen == {"ns/c": frozenset({"b"}), "ns/g": frozenset({"b"})}
    assert result.allocation == {"ns/c": ["b"], "ns/g": []}
    # adl's own policy places it there in the first place
    adl = plan_round(AdlPolicy(), [confined], nodes, NOW)
    assert adl.allocation["ns/c"] and set(adl.allocation["ns/c"]) == {"b"}
