"""A node about to go away (issue 31): ``ObservedWorkers.nodes_leaving`` names it with why (a
disruption taint, a cordon). The group with a replica there is stopped gracefully at once (it
checkpoints within the notice; a preemption, not a failure), the status and one event say why,
and the next group starts only on an answer without the node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, SetStatus
from adl.controller.lifecycle import (
    NODE_DISRUPTED,
    NODE_LOST,
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    Timing,
    step,
)
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase, RestartCause

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
JOB = "ns/train"
ALLOC = ["n1", "n2"]
TIMING = Timing(node_lost_s=60)
R, S = ReplicaPhase.RUNNING, ReplicaPhase.STOPPED
KARPENTER = {"n2": "karpenter.sh/disrupted"}


def spec() -> AdaptiveJobSpec:
    return AdaptiveJobSpec(
        template={"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}},
        termination_grace_period_seconds=30,
    )


def running(group: int = 2, allocation: list[str] | None = None) -> AdaptiveJobStatus:
    alloc = ALLOC if allocation is None else allocation
    return AdaptiveJobStatus(
        phase=Phase.RUNNING,
        reason="Running",
        group=group,
        allocation=alloc,
        replicas=len(alloc),
        ready_replicas=len(alloc),
    )


def observed(
    leaving: dict[str, str], *replicas: ReplicaState, down: dict[str, datetime] | None = None
) -> ObservedWorkers:
    replicas = replicas or (ReplicaState(2, 0, R, node="n1"), ReplicaState(2, 1, R, node="n2"))
    return ObservedWorkers(replicas, nodes_down=down or {}, nodes_leaving=leaving)


def drive(
    st: AdaptiveJobStatus, obs: ObservedWorkers, desired: list[str]
) -> tuple[AdaptiveJobStatus, list[Action]]:
    actions = step(JOB, spec(), st, obs, desired, NOW, TIMING)
    for a in actions:
        if isinstance(a, SetStatus):
            st = a.status
    return st, [a for a in actions if not isinstance(a, SetStatus)]


def events(actions: list[Action]) -> list[tuple[str, str, str]]:
    return [(a.type, a.reason, a.message) for a in actions if isinstance(a, EmitEvent)]


def test_a_running_group_on_a_disrupted_node_is_stopped_gracefully_at_once() -> None:
    """Before any round has answered without the node (``desired`` still names it): the
    group is told to stop now, with its grace period, and the reason is said once."""
    st, acts = drive(running(), observed(KARPENTER), ALLOC)
    assert st.phase == Phase.RESTARTING and st.reason == NODE_DISRUPTED
    message = "node n2 is being disrupted (karpenter.sh/disrupted); checkpointing and moving off it"
    assert st.message == message
    assert st.restarts == {RestartCause.PREEMPTION: 1} and st.restart_after is None
    assert [a for a in acts if isinstance(a, DeleteGroup)] == [DeleteGroup(JOB, 2, 30)]
    assert events(acts) == [("Warning", NODE_DISRUPTED, message)]
    assert not any(isinstance(a, CreateGroup) for a in acts)
    # level-triggered: the same look again (the pods now terminating) does nothing more
    stopping = observed(
        KARPENTER,
        ReplicaState(2, 0, R, node="n1", terminating=True),
        ReplicaState(2, 1, R, node="n2", terminating=True),
    )
    again, more = drive(st, stopping, ALLOC)
    assert (again.phase, again.reason, again.restarts) == (st.phase, st.reason, st.restarts)
    assert more == []


def test_the_next_group_waits_for_an_answer_without_the_node_then_starts_on_it() -> None:
    st, _ = drive(running(), observed(KARPENTER), ALLOC)
    gone = observed(
        KARPENTER,
        ReplicaState(2, 0, S, ready=False, exit_code=143, node="n1"),
        ReplicaState(2, 1, S, ready=False, exit_code=143, node="n2"),
    )
    # both checkpointed and exited; the round has not answered yet: nothing starts on n2
    waiting, acts = drive(st, gone, ALLOC)
    assert waiting.phase == Phase.RESTARTING and waiting.reason == NODE_DISRUPTED
    assert "waiting for the scheduler to place it on other nodes" in waiting.message
    assert not any(isinstance(a, CreateGroup) for a in acts)
    # the round's answer without n2: group 3 on n1
    started, acts = drive(waiting, gone, ["n1"])
    assert started.phase == Phase.STARTING and started.group == 3
    assert [a for a in acts if isinstance(a, CreateGroup)] == [
        CreateGroup(JOB, 3, ("n1",), (0,), NOW.timestamp())
    ]
    assert started.restarts == {RestartCause.PREEMPTION: 1}


def test_a_replica_an_eviction_already_stopped_is_the_same_disruption() -> None:
    """A drain's eviction may reach the pod before adl acts: its checkpointing exit is said to
    be the disruption, not an unexplained preemption."""
    evicted = observed(
        {"n2": "cordoned: spec.unschedulable"},
        ReplicaState(2, 0, R, node="n1"),
        ReplicaState(2, 1, S, ready=False, exit_code=143, node="n2", terminating=True),
    )
    st, acts = drive(running(), evicted, ALLOC)
    assert st.reason == NODE_DISRUPTED
    assert st.message.startswith("node n2 is being disrupted (cordoned: spec.unschedulable)")
    # rank 0 is stopped gracefully too (the evicted one is already stopping)
    assert [a for a in acts if isinstance(a, DeleteGroup)] == [DeleteGroup(JOB, 2, 30)]


def test_a_disrupted_node_the_group_does_not_use_changes_nothing() -> None:
    st, acts = drive(
        running(allocation=["n1"]), observed(KARPENTER, ReplicaState(2, 0, R, node="n1")), ["n1"]
    )
    assert (st.phase, st.reason, acts) == (Phase.RUNNING, "Running", [])


def test_no_resize_onto_a_disrupted_node() -> None:
    """An answer that grows the job onto the node, from a round before its mark: the group
    keeps running until the next answer, rather than stop to start on a leaving node."""
    one = observed(KARPENTER, ReplicaState(2, 0, R, node="n1"))
    st, acts = drive(running(allocation=["n1"]), one, ALLOC)
    assert (st.phase, st.reason, acts) == (Phase.RUNNING, "Running", [])


def test_a_lost_node_is_lost_whatever_else_marks_it() -> None:
    down = {"n2": NOW - timedelta(seconds=61)}
    st, _ = drive(running(), observed(KARPENTER, down=down), ["n1"])
    assert st.reason == NODE_LOST


def test_a_failed_save_on_the_way_out_names_the_disruption() -> None:
    st, _ = drive(running(), observed(KARPENTER), ALLOC)
    crashed = observed(
        KARPENTER,
        ReplicaState(2, 0, ReplicaPhase.FAILED, ready=False, exit_code=1, node="n1"),
        ReplicaState(2, 1, S, ready=False, exit_code=143, node="n2"),
    )
    _, acts = drive(st, crashed, ["n1"])
    said = events(acts)
    assert said and said[0][1] == "CheckpointFailed", said
    assert "while being stopped for a node disruption" in said[0][2]
