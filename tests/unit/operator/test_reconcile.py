"""The pure reconcile step: (spec, status, observed pods, desired allocation, now) -> actions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from adl.operator.observe import PodPhase, PodState
from adl.operator.reconcile import (
    CreatePods,
    DeletePods,
    EmitEvent,
    EnsureResources,
    Observed,
    SetStatus,
    Timing,
    backoff_s,
    reconcile,
    same_placement,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}


def spec(**kw: object) -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate({"template": TEMPLATE, **kw})


def pod(group: int, index: int, phase: PodPhase, **kw: object) -> PodState:
    return PodState(name=f"j-g{group}-{index}", group=group, index=index, phase=phase, **kw)


def running(group: int = 1, n: int = 1, **extra: object) -> AdaptiveJobStatus:
    return AdaptiveJobStatus.model_validate(
        {"phase": "Running", "group": group, "allocation": ["a"] * n, "replicas": n, **extra}
    )


def status_of(actions: list) -> AdaptiveJobStatus:
    (st,) = [a.status for a in actions if isinstance(a, SetStatus)]
    return st


def of(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def test_pending_waits_for_an_allocation() -> None:
    actions = reconcile(spec(), AdaptiveJobStatus(), Observed(desired=None), NOW)
    st = status_of(actions)
    assert st.phase == Phase.PENDING and st.reason == "WaitingForAllocation"
    assert not of(actions, CreatePods)


def test_pending_respects_min_replicas() -> None:
    actions = reconcile(spec(minReplicas=3), AdaptiveJobStatus(), Observed(desired=["a", "b"]), NOW)
    assert not of(actions, CreatePods) and status_of(actions).phase == Phase.PENDING


def test_start_records_status_before_creating_pods() -> None:
    actions = reconcile(spec(), AdaptiveJobStatus(), Observed(desired=["a", "a", "b"]), NOW)
    assert isinstance(actions[0], SetStatus)
    st = status_of(actions)
    assert (st.phase, st.group, st.replicas, st.allocation) == (
        Phase.STARTING,
        1,
        3,
        ["a", "a", "b"],
    )
    assert st.start_time == NOW
    assert of(actions, EnsureResources)
    (create,) = of(actions, CreatePods)
    assert create.group == 1 and create.indices == (0, 1)


def test_running_when_all_pods_run_and_ready_count() -> None:
    st0 = running(group=1, n=2).model_copy(update={"phase": Phase.STARTING})
    pods = [pod(1, 0, PodPhase.RUNNING, ready=True)]
    actions = reconcile(spec(), st0, Observed(pods=pods, desired=["a", "a"]), NOW)
    st = status_of(actions)
    assert st.phase == Phase.RUNNING and st.ready_replicas == 2
    running_cond = next(c for c in st.conditions if c.type == "Running")
    assert running_cond.status == "True"


def test_steady_state_is_a_no_op() -> None:
    st0 = running(group=1, n=1)
    pods = [pod(1, 0, PodPhase.RUNNING, ready=True)]
    first = reconcile(spec(), st0, Observed(pods=pods, desired=["a"]), NOW)
    settled = status_of(first)
    again = reconcile(spec(), settled, Observed(pods=pods, desired=["a"]), NOW + timedelta(1))
    assert again == []


def test_resize_counts_as_resize_and_stops_gracefully() -> None:
    pods = [pod(1, 0, PodPhase.RUNNING)]
    actions = reconcile(
        spec(terminationGracePeriodSeconds=45),
        running(),
        Observed(pods=pods, desired=["a", "b"]),
        NOW,
    )
    st = status_of(actions)
    assert st.phase == Phase.RESTARTING and st.restarts == {"resize": 1}
    assert of(actions, DeletePods) == [DeletePods(("j-g1-0",), 45)]
    assert not of(actions, CreatePods)


def test_same_placement_in_another_order_is_not_a_resize() -> None:
    assert same_placement(["a", "b", "a"], ["b", "a", "a"])
    assert not same_placement(["a", "b"], ["a", "a"])
    actions = reconcile(
        spec(),
        running(n=2).model_copy(update={"allocation": ["a", "b"]}),
        Observed(
            pods=[pod(1, 0, PodPhase.RUNNING), pod(1, 1, PodPhase.RUNNING)], desired=["b", "a"]
        ),
        NOW,
    )
    assert not of(actions, DeletePods)


def test_next_group_only_after_the_old_one_is_gone() -> None:
    restarting = running().model_copy(update={"phase": Phase.RESTARTING})
    still_there = [pod(1, 0, PodPhase.RUNNING, deleting=True)]
    actions = reconcile(spec(), restarting, Observed(pods=still_there, desired=["a", "b"]), NOW)
    assert not of(actions, CreatePods)
    actions = reconcile(spec(), restarting, Observed(pods=[], desired=["a", "b"]), NOW)
    (create,) = of(actions, CreatePods)
    assert create.group == 2 and status_of(actions).group == 2


def test_stale_group_pods_are_deleted() -> None:
    pods = [pod(1, 0, PodPhase.RUNNING), pod(2, 0, PodPhase.RUNNING)]
    actions = reconcile(spec(), running(group=2), Observed(pods=pods, desired=["a"]), NOW)
    assert DeletePods(("j-g1-0",), 60) in of(actions, DeletePods)


@pytest.mark.parametrize(("failures", "expected"), [(1, 10.0), (2, 20.0), (3, 40.0), (10, 300.0)])
def test_backoff_doubles_up_to_a_cap(failures: int, expected: float) -> None:
    assert backoff_s(failures) == expected


def test_failure_restarts_with_backoff_then_fails() -> None:
    failed = [pod(1, 0, PodPhase.FAILED, reason="Error", message="exit 1")]
    actions = reconcile(spec(maxRestarts=2), running(), Observed(pods=failed, desired=["a"]), NOW)
    st = status_of(actions)
    assert st.phase == Phase.RESTARTING and st.restarts == {"failure": 1}
    (set_status,) = of(actions, SetStatus)
    assert set_status.restart_after == NOW + timedelta(seconds=10)

    restarting = st
    waiting = reconcile(
        spec(maxRestarts=2),
        restarting,
        Observed(pods=[], desired=["a"], restart_after=set_status.restart_after),
        NOW + timedelta(seconds=5),
    )
    assert not of(waiting, CreatePods) and status_of(waiting).reason == "BackingOff"
    later = reconcile(
        spec(maxRestarts=2),
        restarting,
        Observed(pods=[], desired=["a"], restart_after=set_status.restart_after),
        NOW + timedelta(seconds=11),
    )
    assert of(later, CreatePods)

    exhausted = running(restarts={"failure": 2, "resize": 5})
    final = reconcile(spec(maxRestarts=2), exhausted, Observed(pods=failed, desired=["a"]), NOW)
    st = status_of(final)
    assert st.phase == Phase.FAILED and st.reason == "Error"
    assert "maxRestarts=2" in st.message and st.completion_time == NOW
    assert any(e.type == "Warning" for e in of(final, EmitEvent))


def test_resizes_do_not_spend_the_failure_budget() -> None:
    st0 = running(restarts={"resize": 50})
    failed = [pod(1, 0, PodPhase.FAILED, reason="Error")]
    actions = reconcile(spec(maxRestarts=1), st0, Observed(pods=failed, desired=["a"]), NOW)
    assert status_of(actions).phase == Phase.RESTARTING


def test_graceful_stop_outside_adl_is_a_preemption() -> None:
    stopped = [pod(1, 0, PodPhase.STOPPED)]
    actions = reconcile(spec(maxRestarts=0), running(), Observed(pods=stopped, desired=["a"]), NOW)
    st = status_of(actions)
    assert st.phase == Phase.RESTARTING and st.restarts == {"preemption": 1}


def test_all_succeeded() -> None:
    pods = [pod(1, 0, PodPhase.SUCCEEDED), pod(1, 1, PodPhase.SUCCEEDED)]
    st0 = running(n=2).model_copy(update={"allocation": ["a", "b"]})
    actions = reconcile(spec(), st0, Observed(pods=pods, desired=["a", "b"]), NOW)
    st = status_of(actions)
    assert st.phase == Phase.SUCCEEDED and st.completion_time == NOW
    assert not of(actions, DeletePods)  # finished pods are kept for their logs


def test_missing_pods_of_a_starting_group_are_created() -> None:
    st0 = running(n=2).model_copy(update={"phase": Phase.STARTING, "allocation": ["a", "b"]})
    actions = reconcile(
        spec(), st0, Observed(pods=[pod(1, 0, PodPhase.PENDING)], desired=["a", "b"]), NOW
    )
    (create,) = of(actions, CreatePods)
    assert create.indices == (1,) and create.group == 1


def test_unschedulable_is_surfaced_then_restarted() -> None:
    st0 = running().model_copy(update={"phase": Phase.STARTING})
    stuck = [pod(1, 0, PodPhase.PENDING, reason="Unschedulable", message="no gpu", since=NOW)]
    actions = reconcile(spec(), st0, Observed(pods=stuck, desired=["a"]), NOW)
    st = status_of(actions)
    assert (st.phase, st.reason) == (Phase.STARTING, "Unschedulable") and "no gpu" in st.message
    late = reconcile(
        spec(), st0, Observed(pods=stuck, desired=["a"]), NOW + timedelta(seconds=301), Timing()
    )
    assert status_of(late).restarts == {"failure": 1}
    assert of(late, DeletePods)


def test_suspend_and_resume() -> None:
    actions = reconcile(
        spec(suspend=True),
        running(),
        Observed(pods=[pod(1, 0, PodPhase.RUNNING)], desired=["a"]),
        NOW,
    )
    st = status_of(actions)
    assert st.phase == Phase.SUSPENDED and st.replicas == 0 and of(actions, DeletePods)
    resumed = reconcile(spec(), st, Observed(pods=[], desired=["a"]), NOW)
    assert status_of(resumed).phase == Phase.STARTING and of(resumed, CreatePods)


def test_finished_jobs_only_clean_up() -> None:
    done = AdaptiveJobStatus(phase=Phase.FAILED, group=1, completion_time=NOW)
    actions = reconcile(
        spec(), done, Observed(pods=[pod(1, 0, PodPhase.RUNNING)], desired=["a"]), NOW
    )
    assert of(actions, DeletePods) and not of(actions, CreatePods)


def test_hints_feed_the_printer_columns() -> None:
    st0 = running(hints={"initBatchSize": 32, "batchSize": 256, "goodput": 12.5})
    actions = reconcile(
        spec(), st0, Observed(pods=[pod(1, 0, PodPhase.RUNNING)], desired=["a"]), NOW
    )
    st = status_of(actions)
    assert st.batch_size == 256 and st.goodput == 12.5
