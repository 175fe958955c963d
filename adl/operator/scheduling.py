"""The scheduling round on Kubernetes: the GPU pool from Node objects and the jobs from their CRD
objects, for the controller's round (``adl.controller.rounds``). Pure functions; the handlers
fetch the objects and run the round in a worker thread (the optimization can take a
while and must not block kopf's event loop)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from adl.contract import (
    LABEL_CAPACITY_FOR,
    LABEL_GPU_PRODUCT,
    SPOT_NODE_LABELS,
    JobKey,
    normalize_gpu_type,
)
from adl.controller.job_record import JobRecord
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus
from adl.operator.disruption import leaving_reason
from adl.operator.pods import ANNOTATION_ALLOCATION, GPU_RESOURCE, LABEL_JOB
from adl.operator.taints import Toleration, tolerates_node
from adl.operator.timestamps import parse_time
from adl.sched.types import NodeInfo


def quantity(value: Any) -> int:
    """Whole devices from a resource quantity ("2", 2, "2000m")."""
    if value is None:
        return 0
    text = str(value)
    if text.endswith("m"):
        return int(text[:-1]) // 1000
    return int(float(text))


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True  # no conditions reported (e.g. a fake API server): assume ready


def gpus_used_by_others(
    pods: Sequence[Mapping[str, Any]], resource: str = GPU_RESOURCE
) -> dict[str, int]:
    """GPUs requested per node by live pods that adl does not manage. A bound placeholder
    (``adl.operator.capacity_pods``) counts as none: it asked for its node on adl's behalf and
    is deleted in the round that sees it bound, so the round may already use its GPUs."""
    used: dict[str, int] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        phase = (pod.get("status") or {}).get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        if (
            LABEL_JOB in labels
            or LABEL_CAPACITY_FOR in labels
            or not node
            or phase in ("Succeeded", "Failed")
        ):
            continue
        for c in (pod.get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            want = (res.get("limits") or {}).get(
                resource, (res.get("requests") or {}).get(resource)
            )
            used[node] = used.get(node, 0) + quantity(want)
    return used


def nodes_from_objects(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    resource: str = GPU_RESOURCE,
    selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Sequence[Toleration]] = (),
    gpu_type_label: str = LABEL_GPU_PRODUCT,
) -> list[NodeInfo]:
    """Schedulable nodes with their free GPUs: allocatable minus non-adl requests; not-ready and
    unselected nodes are left out, so is a node about to go away whatever a job tolerates
    (cordoned, tainted by an autoscaler or a termination handler, being deleted:
    ``adl.operator.disruption``), and so is a node with a NoSchedule/NoExecute
    taint that no job of the round tolerates (``tolerations``: each job's pods'). A job that
    does not tolerate every node given is confined to those it does (:func:`confinements`):
    never a pod where it is not tolerated.
    A node's GPU type is its ``gpu_type_label`` (GPU feature discovery's product label unless
    the operator is told another, e.g. an instance-type label), written as a label value; a
    node without the label has type "" (unknown)."""
    used = gpus_used_by_others(pods, resource)
    out: list[NodeInfo] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if selector and any(labels.get(k) != v for k, v in selector.items()):
            continue
        if leaving_reason(node) is not None or not _ready(node):
            continue  # about to go away (a cordon among the rest), or down
        if not any(tolerates_node(tol, node) for tol in tolerations or [()]):
            continue
        allocatable = quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource))
        free = allocatable - used.get(meta["name"], 0)
        if free > 0:
            preemptible = any(labels.get(k) == v for k, v in SPOT_NODE_LABELS)
            gpu_type = normalize_gpu_type(str(labels.get(gpu_type_label) or ""))
            out.append(
                NodeInfo(name=meta["name"], gpus=free, preemptible=preemptible, gpu_type=gpu_type)
            )
    return sorted(out, key=lambda n: n.name)


def pool_nodes(
    nodes: Sequence[Mapping[str, Any]],
    tolerations: Sequence[Toleration],
    node_labels: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """The nodes a job's pods may land on: labelled with all of ``node_labels`` (its pool's,
    e.g. its Kueue flavor's) and with every blocking taint tolerated by ``tolerations``."""
    out = set()
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in (node_labels or {}).items()):
            continue
        if tolerates_node(tolerations, node):
            out.add(str(meta["name"]))
    return frozenset(out)


def confinements(
    nodes: Sequence[Mapping[str, Any]],
    jobs: Mapping[str, tuple[Sequence[Toleration], Mapping[str, str] | None]],
) -> dict[str, frozenset[str] | None]:
    """Per job (key -> its pods' tolerations and its pool's node labels): the only nodes it
    may run on, or None when it may run on every node the round can offer (any node some job
    tolerates; :func:`nodes_from_objects`), which keeps the policy on its fast path. Jobs
    mostly share their tolerations and pool, so each distinct pair is matched once: a round of
    a thousand jobs on a thousand nodes costs a few scans of the nodes, not a million."""
    kinds: dict[str, tuple[Sequence[Toleration], Mapping[str, str] | None]] = {}
    kind_of: dict[str, str] = {}
    for key, (tolerations, labels) in jobs.items():
        kind = json.dumps([list(tolerations), sorted((labels or {}).items())], sort_keys=True)
        kinds.setdefault(kind, (tolerations, labels))
        kind_of[key] = kind
    offered = frozenset(
        str((n.get("metadata") or {})["name"])
        for n in nodes
        if any(tolerates_node(tol, n) for tol, _ in kinds.values())
    )
    allowed: dict[str, frozenset[str] | None] = {}
    for kind, (tolerations, labels) in kinds.items():
        mine = pool_nodes(nodes, tolerations, labels)
        allowed[kind] = None if offered <= mine else mine
    return {key: allowed[kind] for key, kind in kind_of.items()}


def job_key(body: Mapping[str, Any]) -> str:
    meta = body["metadata"]
    return str(JobKey(meta.get("namespace", ""), meta["name"]))


def desired_allocation(body: Mapping[str, Any]) -> list[str] | None:
    """The scheduler's latest answer for this job, kept in an annotation; None before any."""
    raw = ((body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ALLOCATION)
    if raw is None:
        return None
    value = json.loads(raw)
    return [str(n) for n in value] if isinstance(value, list) else None


def _created(body: Mapping[str, Any]) -> datetime | None:
    return parse_time((body.get("metadata") or {}).get("creationTimestamp"))


def job_records(bodies: Sequence[Mapping[str, Any]]) -> list[JobRecord]:
    """AdaptiveJob objects as the controller's round reads them. Left out: objects whose spec
    does not validate (the reconcile step marks them Failed with the reason) and jobs being
    deleted (their workers are stopping; the GPUs they held go to the others)."""
    out = []
    for body in bodies:
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            continue
        try:
            spec = AdaptiveJobSpec.model_validate(body.get("spec") or {})
            status = AdaptiveJobStatus.from_object(body)
        except ValueError:
            continue
        created = _created(body) or datetime.fromtimestamp(0, UTC)
        out.append(JobRecord(job_key(body), spec, status, created, desired_allocation(body)))
    return out
