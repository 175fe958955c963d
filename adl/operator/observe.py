"""Read worker pods into plain facts the controller understands. Pure: a pod dict in, a
``PodState`` out, so every failure mode (image pull, unschedulable, OOM, graceful stop) is
unit-tested from sample pod statuses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from adl.contract import EXIT_STOPPED
from adl.controller.lifecycle import ObservedWorkers, ReplicaPhase, ReplicaState
from adl.operator.pods import LABEL_GROUP, LABEL_INDEX, node_slots, rank_offsets
from adl.operator.timestamps import parse_time

#: Waiting reasons that will not fix themselves: the group is failed, not "still starting".
FATAL_WAITING = {
    "ErrImagePull": "ImagePullError",
    "ImagePullBackOff": "ImagePullError",
    "InvalidImageName": "ImagePullError",
    "ErrImageNeverPull": "ImagePullError",
    "CreateContainerConfigError": "ContainerConfigError",
    "CreateContainerError": "ContainerConfigError",
    "RunContainerError": "ContainerConfigError",
}


class PodPhase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # exited 143 after a graceful stop (resize / preemption)


@dataclass(frozen=True)
class PodState:
    name: str
    group: int
    index: int
    phase: PodPhase
    ready: bool = False
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    deleting: bool = False
    node: str = ""
    since: datetime | None = None  # when the current reason (e.g. Unschedulable) began
    holds: bool = False  # failed to start, but still bound to its node (see ReplicaState)
    stop_due: datetime | None = None  # deletionTimestamp: the end of its grace period


def _trainer_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    trainer = containers[0].get("name")
    for st in statuses:
        if st.get("name") == trainer:
            return st
    return statuses[0] if statuses else {}


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return {}


def classify(pod: Mapping[str, Any]) -> PodState:
    """One pod's state, reason included, from its status."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    base = {
        "name": meta.get("name", ""),
        "group": int(labels.get(LABEL_GROUP, -1)),
        "index": int(labels.get(LABEL_INDEX, 0)),
        "deleting": bool(meta.get("deletionTimestamp")),
        "stop_due": parse_time(meta.get("deletionTimestamp")),
        "node": (pod.get("spec") or {}).get("nodeName", ""),
    }
    phase = status.get("phase", "Pending")
    trainer = _trainer_status(pod)
    terminated = (trainer.get("state") or {}).get("terminated")
    waiting = (trainer.get("state") or {}).get("waiting") or {}

    if phase in ("Succeeded", "Failed") or terminated:
        code = terminated.get("exitCode") if terminated else None
        if phase == "Succeeded" or code == 0:
            return PodState(**base, phase=PodPhase.SUCCEEDED, exit_code=0)
        if code == EXIT_STOPPED:
            return PodState(**base, phase=PodPhase.STOPPED, exit_code=code, reason="Stopped")
        reason = (terminated or {}).get("reason") or status.get("reason") or "Error"
        message = (terminated or {}).get("message") or status.get("message") or ""
        if code is not None and not message:
            message = f"trainer exited with code {code}"
        return PodState(
            **base, phase=PodPhase.FAILED, exit_code=code, reason=reason, message=message
        )
    if waiting.get("reason") in FATAL_WAITING:
        return PodState(
            **base,
            phase=PodPhase.FAILED,
            holds=True,
            reason=FATAL_WAITING[waiting["reason"]],
            message=f"{waiting['reason']}: {waiting.get('message', '')}".strip(": "),
        )
    if phase == "Running":
        ready = _condition(pod, "Ready").get("status") == "True"
        return PodState(**base, phase=PodPhase.RUNNING, ready=ready)
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return PodState(
            **base,
            phase=PodPhase.PENDING,
            reason="Unschedulable",
            message=scheduled.get("message", ""),
            since=parse_time(scheduled.get("lastTransitionTime")),
        )
    created = parse_time(meta.get("creationTimestamp"))
    return PodState(**base, phase=PodPhase.PENDING, reason=waiting.get("reason", ""), since=created)


def classify_all(pods: Iterable[Mapping[str, Any]]) -> list[PodState]:
    return sorted((classify(p) for p in pods), key=lambda s: (s.group, s.index))


_REPLICA_PHASE = {
    PodPhase.PENDING: ReplicaPhase.PENDING,
    PodPhase.RUNNING: ReplicaPhase.RUNNING,
    PodPhase.SUCCEEDED: ReplicaPhase.SUCCEEDED,
    PodPhase.STOPPED: ReplicaPhase.STOPPED,
    PodPhase.FAILED: ReplicaPhase.FAILED,
}


def node_down_since(node: Mapping[str, Any]) -> datetime | None:
    """Since when a Node has not been Ready (its Ready condition False, or Unknown once the
    node lifecycle controller stopped hearing from its kubelet), None while it is Ready."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return None
            return parse_time(cond.get("lastTransitionTime"))
    return None  # no conditions reported (e.g. a fake API server): taken as Ready


def observed_workers(
    pods: Iterable[PodState],
    group: int,
    allocation: Sequence[str],
    nodes_down: Mapping[str, datetime] | None = None,
) -> ObservedWorkers:
    """The controller's view of the workers: one ReplicaState per replica a pod holds, and
    since when each node that is down (``nodes_down``) has been so.

    Pod ``i`` of the current group holds ranks ``[offset_i, offset_i + n_i)`` of its
    allocation; a pod of an older group stands for one replica (only whether it is alive
    matters for those)."""
    slots = node_slots(list(allocation))
    offsets = rank_offsets(list(allocation))
    out: list[ReplicaState] = []
    for pod in pods:
        if pod.group == group and 0 <= pod.index < len(slots):
            first, count = offsets[pod.index], slots[pod.index][1]
            ranks = range(first, first + count)
        else:
            ranks = range(pod.index, pod.index + 1)
        out += [
            ReplicaState(
                group=pod.group,
                rank=r,
                phase=_REPLICA_PHASE[pod.phase],
                ready=pod.ready,
                exit_code=pod.exit_code,
                reason=pod.reason,
                message=pod.message,
                terminating=pod.deleting,
                since=pod.since,
                holds=pod.holds,
                stop_due=pod.stop_due,
                node=pod.node,
            )
            for r in ranks
        ]
    return ObservedWorkers(tuple(out), nodes_down=dict(nodes_down or {}))


def pod_indices(allocation: Sequence[str], ranks: Iterable[int]) -> list[int]:
    """The pods (node indices) that hold any of ``ranks``."""
    offsets = rank_offsets(list(allocation))
    slots = node_slots(list(allocation))
    wanted = set(ranks)
    return [
        i
        for i, (first, (_, n)) in enumerate(zip(offsets, slots, strict=True))
        if wanted & set(range(first, first + n))
    ]
