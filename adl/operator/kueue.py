"""adl under Kueue: the division of labour is that Kueue decides how much a team may use and adl
decides, within what Kueue admitted, which job gets how many GPUs and when.

An AdaptiveJob labelled ``kueue.x-k8s.io/queue-name`` (the convention of every Kueue
integration) is represented to Kueue by one ``Workload`` the operator creates and owns (the
documented way for a job API whose controller is not written in Go; Kueue's configuration lists
the kind under ``integrations.externalFrameworks``). Its one pod set counts replicas: ``count``
is ``maxReplicas`` and ``minCount`` ``minReplicas`` (partial admission), each with the
template's requests plus ``gpusPerReplica`` GPUs. The admitted count is a hard ceiling for adl's
rounds; nothing admitted (before admission, or once evicted) means the job sits out, and an
evicted job is stopped through a checkpoint like any preempted job. Once its pods are gone the
operator clears the Workload's quota reservation, as Kueue's own job integrations do, so that
Kueue requeues it; a finished job finishes its Workload, which gives the quota back.

The admission names a ResourceFlavor per resource of the pod set. A flavor with node labels
is a node pool: the job's pods carry its labels as a nodeSelector and its tolerations (as
Kueue's own integrations do when they start an admitted job), and, since adl binds pods to
nodes itself, the round offers the job only the nodes of that pool whose taints it tolerates
(``JobRecord.nodes``).

Pure functions over API objects (dicts); ``adl.operator.handlers`` reads and writes them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from adl.contract import QUEUE_LABEL as QUEUE_LABEL  # re-exported: callers import it here
from adl.models import AdaptiveJobSpec
from adl.operator.crd import GROUP, KIND, VERSION
from adl.operator.pods import GPU_RESOURCE, NodePool
from adl.operator.scheduling import quantity

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
WORKLOADS = "workloads"
RESOURCE_FLAVORS = "resourceflavors"
LOCAL_QUEUES = "localqueues"
CLUSTER_QUEUES = "clusterqueues"
#: the pod set of an AdaptiveJob's Workload: one entry per replica
POD_SET = "replicas"
#: Workload names: Kubernetes object names, kept well under the 253-character limit
_NAME_LIMIT = 63


def queue_of(body: Mapping[str, Any]) -> str | None:
    """The Kueue LocalQueue an AdaptiveJob asks to run in (its label), or None."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    return str(queue) if queue else None


def workload_name(job_name: str, uid: str) -> str:
    """``adaptivejob-NAME-UID5``: unique per job object (a job deleted and created again under
    the same name gets a new Workload, not the old one's admission)."""
    suffix = f"-{uid.replace('-', '')[:5]}"
    return f"adaptivejob-{job_name}"[: _NAME_LIMIT - len(suffix)].rstrip("-") + suffix


def _replica_template(spec: AdaptiveJobSpec, resource: str) -> dict[str, Any]:
    """The pod template Kueue accounts one replica by: the job's template with the replica's
    GPUs requested by its first container (as the pods adl creates request them)."""
    template = copy.deepcopy(spec.template)
    container = template["spec"]["containers"][0]
    res = container.setdefault("resources", {})
    if spec.gpus_per_replica:
        for part in ("requests", "limits"):
            res.setdefault(part, {})[resource] = str(spec.gpus_per_replica)
    return template


def workload_manifest(
    body: Mapping[str, Any], spec: AdaptiveJobSpec, resource: str = GPU_RESOURCE
) -> dict[str, Any]:
    """The Workload that stands for this job in its queue, owned by the job."""
    meta = body["metadata"]
    queue = queue_of(body)
    if queue is None:
        raise ValueError(f"{meta['name']} is in no queue (label {QUEUE_LABEL})")
    pod_set: dict[str, Any] = {
        "name": POD_SET,
        "count": spec.max_replicas,
        "template": _replica_template(spec, resource),
    }
    if spec.min_replicas < spec.max_replicas:
        pod_set["minCount"] = spec.min_replicas  # partial admission: fewer, down to this
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {QUEUE_LABEL: queue},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"queueName": queue, "podSets": [pod_set]},
    }


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(workload: Mapping[str, Any], kind: str) -> bool:
    cond = _condition(workload, kind)
    return cond is not None and cond.get("status") == "True"


@dataclass(frozen=True)
class QueueUsage:
    """A ClusterQueue's GPUs against its quota, as a waiting job's status says it: ``in_use``
    reserved by the workloads it admitted (borrowed ones included), ``nominal`` its own quota
    (all flavors), ``borrowed`` what of ``in_use`` comes from its cohort."""

    in_use: int
    nominal: int
    borrowed: int = 0

    def __str__(self) -> str:
        said = f"{self.in_use} GPUs of {self.nominal} in use"
        return said + (f" ({self.borrowed} borrowed from its cohort)" if self.borrowed else "")


def _resource_total(flavors: Sequence[Mapping[str, Any]], resource: str, key: str) -> int:
    return sum(
        quantity(r.get(key))
        for f in flavors
        for r in f.get("resources") or []
        if r.get("name") == resource
    )


def queue_usage(cluster_queue: Mapping[str, Any], resource: str = GPU_RESOURCE) -> QueueUsage:
    """The ClusterQueue's use of ``resource`` against its nominal quota. Reserved quota
    (``flavorsReservation``) is what keeps a waiting Workload out, so it counts; a Kueue that
    reports only ``flavorsUsage`` (admitted) is read from that."""
    status = cluster_queue.get("status") or {}
    used = status.get("flavorsReservation") or status.get("flavorsUsage") or []
    nominal = sum(
        _resource_total(group.get("flavors") or [], resource, "nominalQuota")
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    )
    return QueueUsage(
        in_use=_resource_total(used, resource, "total"),
        nominal=nominal,
        borrowed=_resource_total(used, resource, "borrowed"),
    )


@dataclass(frozen=True)
class Admission:
    """What Kueue has decided about one job's Workload."""

    queue: str
    #: replicas admitted (0: none, or evicted)
    count: int
    #: Evicted=True: why (Kueue preempted it, its quota was reclaimed, ...), else None
    evicted: str | None = None
    #: the Workload still holds a quota reservation (cleared once the job's pods are gone)
    reserved: bool = False
    finished: bool = False
    #: the ResourceFlavors the admission assigned to the pod set's resources (distinct,
    #: sorted; () before admission)
    flavors: tuple[str, ...] = ()
    #: the queue's GPUs against its quota (read only while the job waits), or why that could
    #: not be read (its LocalQueue or ClusterQueue is missing); None: not read
    usage: QueueUsage | str | None = None

    @property
    def ceiling(self) -> int:
        """The most replicas adl's rounds may give the job now."""
        return 0 if self.evicted is not None or self.finished else self.count

    def waiting_message(self) -> str:
        if self.evicted is not None:
            return f"evicted by Kueue from queue {self.queue}: {self.evicted}"
        said = f"waiting for admission in queue {self.queue}"
        return said if self.usage is None else f"{said}: {self.usage}"


def admission(workload: Mapping[str, Any]) -> Admission:
    """Read a Workload's admission: the admitted replica count of its pod set, once Admitted."""
    queue = str((workload.get("spec") or {}).get("queueName") or "")
    status = workload.get("status") or {}
    count = 0
    flavors: set[str] = set()
    if _true(workload, "Admitted"):
        for assignment in (status.get("admission") or {}).get("podSetAssignments") or []:
            if assignment.get("name") == POD_SET:
                raw = assignment.get("count")
                pod_sets = (workload.get("spec") or {}).get("podSets") or [{}]
                count = int(raw if raw is not None else pod_sets[0].get("count") or 0)
                flavors |= {str(f) for f in (assignment.get("flavors") or {}).values() if f}
    evicted = _condition(workload, "Evicted")
    why = None
    if evicted is not None and evicted.get("status") == "True":
        why = str(evicted.get("message") or evicted.get("reason") or "evicted")
    return Admission(
        queue=queue,
        count=max(count, 0),
        evicted=why,
        reserved=_true(workload, "QuotaReserved") or bool(status.get("admission")),
        finished=_true(workload, "Finished"),
        flavors=tuple(sorted(flavors)),
    )


class FlavorError(ValueError):
    """The admitted flavors give no node pool: one is missing, or two select one node label
    with different values (no node could have both)."""


def flavor_pool(names: Sequence[str], flavors: Mapping[str, Mapping[str, Any]]) -> NodePool:
    """The node pool of an admission's flavors (``flavors``: ResourceFlavor objects by name):
    the union of their node labels and of their tolerations. Several flavors arise when the
    pod set's resources come from different flavors (GPUs from one, CPU from another); a
    pod runs on one node, so that node must carry the labels of all of them."""
    labels: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for name in names:
        flavor = flavors.get(name)
        if flavor is None:
            raise FlavorError(f"ResourceFlavor {name} of its admission does not exist")
        spec = flavor.get("spec") or {}
        for key, value in (spec.get("nodeLabels") or {}).items():
            if labels.setdefault(str(key), str(value)) != str(value):
                raise FlavorError(
                    f"its admitted flavors select node label {key} as both "
                    f"{labels[str(key)]} and {value}: no node has both"
                )
        for toleration in spec.get("tolerations") or []:
            if dict(toleration) not in tolerations:
                tolerations.append(dict(toleration))
    return NodePool(node_labels=labels, tolerations=tuple(tolerations))


def _rfc3339(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(kind: str, status: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": _rfc3339(now),
    }


def release_patch(workload: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The status patch that gives an evicted Workload's quota back once the job's pods are
    gone (Kueue's job integrations do the same): no admission, QuotaReserved and Admitted
    False, and Requeued so Kueue queues it again."""
    evicted = _condition(workload, "Evicted") or {}
    message = str(evicted.get("message") or "evicted")
    reason = str(evicted.get("reason") or "Evicted")
    kept = [
        c
        for c in (workload.get("status") or {}).get("conditions") or []
        if c.get("type") not in ("QuotaReserved", "Admitted", "Requeued")
    ]
    return {
        "status": {
            "admission": None,
            "conditions": [
                *kept,
                _cond("QuotaReserved", "False", "Pending", message, now),
                _cond("Admitted", "False", "NoReservation", "the job's pods are gone", now),
                _cond("Requeued", "True", reason, message, now),
            ],
        }
    }


def finished_patch(
    workload: Mapping[str, Any],
    succeeded: bool,
    message: str,
    now: datetime,
    reason: str | None = None,
) -> dict[str, Any]:
    """Finish the Workload: Kueue releases its quota. ``reason``: other than the job's
    outcome (a slice replaced or withdrawn while the job goes on)."""
    kept = [
        c for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] != "Finished"
    ]
    reason = reason or ("Succeeded" if succeeded else "Failed")
    return {"status": {"conditions": [*kept, _cond("Finished", "True", reason, message, now)]}}


def owner_uid(workload: Mapping[str, Any]) -> str | None:
    """The uid of the AdaptiveJob that owns a Workload (None for others' Workloads)."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
            return str(ref.get("uid"))
    return None
