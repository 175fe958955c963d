"""What the disruption scenarios share (``test_loop_disruption.py``, and Karpenter's in
``test_loop_karpenter_disruption.py``): a short example job that grows to two replicas and holds
there (``held_synthetic.py``) until a node under it is disrupted, the checks that it moved off
that node with a committed checkpoint and says why, and that it then finishes exactly."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_support import SIZE, TIMEOUT_S, Jobs, assert_exact, epoch_records, held_variant

from adl.operator.crd import GROUP, PLURAL, VERSION

#: epochs of the job: one or two at one replica, two held at two, the rest after the move
EPOCHS = 5
#: ``held_synthetic.HELD_FROM``: the grown job holds before this epoch
HELD_FROM = 2
#: what every rank logs once a stop's collective checkpoint is written (adl.client_lib)
CHECKPOINTED = "stopped for preemption after checkpointing"
#: the status reason and event of a group moved off a node that is being disrupted
NODE_DISRUPTED = "NodeDisrupted"
#: the operator's rounds this far apart: within a test only the causes (a new job, a spec
#: change, a node's mark) run one, so what moves the job is the node's mark itself
QUIET_ROUNDS = "--round-interval=600"
#: the goal for the time from a node's mark to the job's committed checkpoint (issue 31: GKE's
#: notice, the shortest)
NOTICE_S = 15.0


def held_manifest(tmp: Path, name: str, **spec: Any) -> Path:
    """The example at one replica at most (the test lets it grow once its hints are in), run
    by ``held_synthetic.py``; hung-rank detection off (a held job makes no progress on
    purpose)."""
    defaults: dict[str, Any] = {"maxReplicas": 1, "terminationGracePeriodSeconds": 30}
    return held_variant(tmp, name, epochs=EPOCHS, hold_grown="every", **{**defaults, **spec})


def events(jobs: Jobs, name: str, reason: str) -> list[str]:
    items = jobs.core.list_namespaced_event(
        jobs.namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return [e.message for e in items if e.reason == reason]


def held_records(jobs: Jobs, pod: str) -> list[str]:
    return [line for line in jobs.log(pod).splitlines() if line.startswith('{"held"')]


def grow_and_hold(jobs: Jobs, name: str, details: Callable[[], str]) -> int:
    """Once the job has reported its model, let it grow to two replicas (a spec change: a round
    at once), and wait until the grown group holds; returns that group."""
    jobs.wait(
        f"{name}'s throughput model reported",
        lambda: (jobs.status(name).get("hints") or {}).get("perfParams"),
        TIMEOUT_S,
        details,
    )
    jobs.custom.patch_namespaced_custom_object(
        GROUP, VERSION, jobs.namespace, PLURAL, name, {"spec": {"maxReplicas": 2}}
    )

    def grown() -> int | None:
        st = jobs.status(name)
        group = int(st.get("group") or 0)
        if len(st.get("allocation") or []) != 2 or st.get("readyReplicas") != 2:
            return None
        return group if held_records(jobs, f"{name}-g{group}-0") else None

    group: int = jobs.wait(f"{name} grown to two replicas and held", grown, TIMEOUT_S, details)
    return group


def checkpointed_within(
    jobs: Jobs, name: str, group: int, since: float, details: Callable[[], str]
) -> float:
    """Seconds from ``since`` (monotonic) until rank 0 of ``group`` said its stop's checkpoint
    was written (waited for up to a minute: past any notice)."""
    jobs.wait(
        f"group {group}'s checkpoint on its way out",
        lambda: CHECKPOINTED in jobs.log(f"{name}-g{group}-0"),
        60,
        details,
    )
    return time.monotonic() - since


def moved_to(jobs: Jobs, name: str, group: int, node: str, details: Callable[[], str]) -> None:
    """Wait until a later group runs on ``node`` alone."""

    def running_there() -> bool:
        st = jobs.status(name)
        return (
            st.get("group", 0) > group
            and st.get("allocation") == [node]
            and st.get("readyReplicas") == 1
        )

    jobs.wait(f"{name} running on {node}", running_there, TIMEOUT_S, details)


def said_disrupted(jobs: Jobs, name: str, node: str, why: str, details: Callable[[], str]) -> None:
    """The job's event says which node, why, and what adl does about it."""
    said = jobs.wait(
        "the NodeDisrupted event", lambda: events(jobs, name, NODE_DISRUPTED), 30, details
    )
    assert f"node {node} is being disrupted ({why}" in said[0], said
    assert "checkpointing and moving off it" in said[0], said


def finished_exactly(
    jobs: Jobs, name: str, group: int, node: str, details: Callable[[], str]
) -> None:
    """The job Succeeded with what an undisturbed run prints (every epoch once to its end,
    every sample of each once), no later group on the disrupted ``node``, no failure restart,
    and the group after ``group`` resumed from its checkpoint (the held epoch, not the start)."""
    jobs.wait(
        f"{name} Succeeded",
        lambda: jobs.status(name).get("phase") == "Succeeded",
        TIMEOUT_S,
        details,
    )
    final = jobs.status(name)
    assert not (final.get("restarts") or {}).get("failure"), final
    later = [
        p.metadata.name
        for p in jobs.pods(name)
        if int(p.metadata.labels["adl.dev/group"]) > group and p.spec.node_name == node
    ]
    assert not later, later
    records = assert_exact(jobs.kubelet, jobs.namespace, name)
    last = {r["epoch"]: r for _, r in records}
    assert sorted(last) == list(range(EPOCHS)), records
    assert last[EPOCHS - 1]["samples"] == SIZE * EPOCHS
    first_after = next(r for g, r in records if g > group)
    assert first_after["epoch"] == HELD_FROM, records
    assert epoch_records(jobs.kubelet, jobs.namespace, name)
