"""A lost node (issue 36): a node NotReady past ``Timing.node_lost_s`` no longer holds the job.
Its replicas are force-deleted (``DeleteGroup`` with the node, grace 0), the reason is in the
status and one event, and the job starts again on the remaining nodes once they are gone; a
node down for less than the bound changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, SetStatus
from adl.controller.lifecycle import (
    NODE_LOST,
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    Timing,
    lost_nodes,
    step,
)
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase, RestartCause

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
JOB = "ns/train"
ALLOC = ["n1", "n2"]
TIMING = Timing(node_lost_s=60)
R, F = ReplicaPhase.RUNNING, ReplicaPhase.FAILED


def spec(**kw: Any) -> AdaptiveJobSpec:
    base: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}},
        "termination_grace_period_seconds": 30,
    }
    return AdaptiveJobSpec(**(base | kw))


def running(group: int = 2) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(
        phase=Phase.RUNNING,
        reason="Running",
        group=group,
        allocation=ALLOC,
        replicas=2,
        ready_replicas=2,
    )


def observed(down_s: float | None, *, survivor: ReplicaPhase = R, terminating: bool = False):
    """Group 2: rank 0 on n1 (down for ``down_s`` seconds, or up when None), rank 1 on n2."""
    replicas = (
        ReplicaState(2, 0, R, node="n1", terminating=terminating),
        ReplicaState(
            2,
            1,
            survivor,
            node="n2",
            exit_code=1 if survivor == F else None,
            reason="WorkerFailed" if survivor == F else "",
        ),
    )
    down = {} if down_s is None else {"n1": NOW - timedelta(seconds=down_s)}
    return ObservedWorkers(replicas, nodes_down=down)


def drive(st: AdaptiveJobStatus, obs: ObservedWorkers, desired: list[str], now: datetime = NOW):
    actions = step(JOB, spec(), st, obs, desired, now, TIMING)
    for a in actions:
        if isinstance(a, SetStatus):
            st = a.status
    return st, [a for a in actions if not isinstance(a, SetStatus)]


def deletes(actions: list[Action]) -> list[DeleteGroup]:
    return [a for a in actions if isinstance(a, DeleteGroup)]


def test_a_node_down_for_less_than_the_bound_changes_nothing() -> None:
    assert lost_nodes(observed(59), NOW, TIMING) == {}
    st, acts = drive(running(), observed(59), ALLOC)
    assert (st.phase, st.reason, acts) == (Phase.RUNNING, "Running", [])


def test_a_running_group_on_a_lost_node_restarts_without_it() -> None:
    """The survivor is hung in a collective with the dead rank (no error ever reaches it): the
    group is stopped (the survivor gracefully, the lost replica force-deleted) and counted as
    a preemption, not against the failure budget."""
    st, acts = drive(running(), observed(61), ["n2"])
    assert st.phase == Phase.RESTARTING and st.reason == NODE_LOST
    assert st.message.startswith("node n1 NotReady for 61 s: its pods were force-deleted")
    assert "group 2 fenced" in st.message
    assert st.restarts == {RestartCause.PREEMPTION: 1} and st.restart_after is None
    assert deletes(acts) == [DeleteGroup(JOB, 2, 0, ("n1",)), DeleteGroup(JOB, 2, 30)]
    said = [a for a in acts if isinstance(a, EmitEvent)]
    assert [(e.type, e.reason) for e in said] == [("Warning", NODE_LOST)], said
    assert not any(isinstance(a, CreateGroup) for a in acts)


def test_a_stop_stuck_on_a_lost_node_is_force_deleted_and_the_job_goes_on() -> None:
    """The survivor crashed on the lost peer already (a failure restart): the old group's pod
    on the dead node stays Terminating forever. Past the bound it is force-deleted with one
    event, and once it is gone the next group starts on what the scheduler gives."""
    st = running().model_copy(
        update={"phase": Phase.RESTARTING, "reason": "WorkerFailed", "ready_replicas": 0}
    )
    stuck = ObservedWorkers(
        (ReplicaState(2, 0, R, node="n1", terminating=True),),
        nodes_down={"n1": NOW - timedelta(seconds=75)},
    )
    st, acts = drive(st, stuck, ["n2"])
    assert st.phase == Phase.RESTARTING and st.reason == NODE_LOST, st
    assert deletes(acts) == [DeleteGroup(JOB, 2, 0, ("n1",))]
    assert [a.reason for a in acts if isinstance(a, EmitEvent)] == [NODE_LOST]
    assert not any(isinstance(a, CreateGroup) for a in acts)  # not while its pod is listed
    st, acts = drive(st, ObservedWorkers(), ["n2"])
    created = [a for a in acts if isinstance(a, CreateGroup)]
    assert [(c.group, c.allocation) for c in created] == [(3, ("n2",))]
    assert st.phase == Phase.STARTING


def test_before_the_bound_a_stuck_stop_waits_as_before() -> None:
    st = running().model_copy(update={"phase": Phase.RESTARTING, "reason": "Resizing"})
    stuck = ObservedWorkers(
        (ReplicaState(2, 0, R, node="n1", terminating=True),),
        nodes_down={"n1": NOW - timedelta(seconds=10)},
    )
    st, acts = drive(st, stuck, ["n2"])
    assert (st.phase, st.reason, acts) == (Phase.RESTARTING, "Resizing", [])


def test_a_lost_node_under_an_old_group_only_force_deletes_it() -> None:
    """A replica of an older group left on a lost node: removed, said, and the running group
    is left alone."""
    current = ReplicaState(3, 0, R, node="n2")
    old = ReplicaState(2, 0, R, node="n1", terminating=True)
    obs = ObservedWorkers((current, old), nodes_down={"n1": NOW - timedelta(seconds=90)})
    st = running(group=3).model_copy(update={"allocation": ["n2"], "replicas": 1})
    st, acts = drive(st, obs, ["n2"])
    assert st.phase == Phase.RUNNING
    assert deletes(acts) == [DeleteGroup(JOB, 2, 0, ("n1",))]
    assert [a.reason for a in acts if isinstance(a, EmitEvent)] == [NODE_LOST]


def test_the_bound_is_configurable() -> None:
    assert lost_nodes(observed(20), NOW, Timing(node_lost_s=15)) == {"n1": 20.0}
    assert lost_nodes(observed(None), NOW, Timing(node_lost_s=15)) == {}
