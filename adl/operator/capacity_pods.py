"""Asking an autoscaler for GPUs: the pending pods Karpenter and cluster-autoscaler read.

Neither autoscaler takes requests; both add nodes for pods that cannot be scheduled. So each
replica adl would add to a job (``adl.sched.capacity``) becomes one *placeholder* pod: the GPUs
of one replica, the CPU and memory of the job's trainer container, and the job's own node
requirements (its template's nodeSelector, node affinity and tolerations, its Kueue flavor's
labels), so the autoscaler launches a node that the job's pods may use, of the right shape.
A job that must not be preempted asks for on-demand capacity; any other prefers spot
(``capacityTypeLabel``: Karpenter's label by default).

A placeholder has done its work once the scheduler binds it: its node exists. It is then
deleted, and the next round places the job there (placeholders are not counted as using a
node's GPUs, see ``adl.operator.scheduling.gpus_used_by_others``). A placeholder that stays
pending while the jobs' gain goes (a job finished, shrank, or was given GPUs that freed up) is
deleted too, so the autoscaler stops adding nodes, and its consolidation removes the empty ones.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adl.contract import LABEL_CAPACITY_FOR
from adl.models import AdaptiveJobSpec
from adl.operator.pods import JobRef, NodePool, owner_reference
from adl.operator.taints import pod_tolerations
from adl.sched.capacity import CapacityAsk

#: Karpenter's capacity-type label and values (a chart value names another autoscaler's)
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
SPOT, ON_DEMAND = "spot", "on-demand"
#: the image of a placeholder: it never needs to run more than the pause process
PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"
#: the most placeholder pods one job keeps (a bound on the objects adl creates)
MAX_PLACEHOLDERS_PER_JOB = 64


@dataclass(frozen=True)
class PlaceholderSettings:
    resource: str
    capacity_type_label: str = CAPACITY_TYPE_LABEL
    image: str = PLACEHOLDER_IMAGE


def placeholder_name(job: str, index: int) -> str:
    """``<job>-capacity-<i>``, cut with a digest of the job's name to stay a valid name."""
    name = f"{job}-capacity-{index}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(job.encode()).hexdigest()[:8]
    return f"{job[: 63 - len(digest) - len(str(index)) - 11]}-{digest}-capacity-{index}"


def _capacity_type(
    affinity: Mapping[str, Any] | None, label: str, preemptible: bool
) -> dict[str, Any]:
    """The template's affinity plus the capacity type: on-demand required for a job that must
    not be preempted, spot preferred for any other (the autoscaler falls back to on-demand
    when no spot capacity is offered)."""
    out = copy.deepcopy(dict(affinity or {}))
    na = out.setdefault("nodeAffinity", {})
    if not preemptible:
        expr = {"key": label, "operator": "In", "values": [ON_DEMAND]}
        required = na.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        required["nodeSelectorTerms"] = [
            {**t, "matchExpressions": [*(t.get("matchExpressions") or []), expr]} for t in terms
        ]
    else:
        preferred = na.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
        preferred.append(
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [{"key": label, "operator": "In", "values": [SPOT]}]
                },
            }
        )
    return out


def placeholder_pod(
    body: Mapping[str, Any],
    spec: AdaptiveJobSpec,
    index: int,
    settings: PlaceholderSettings,
    pool: NodePool | None = None,
) -> dict[str, Any]:
    """Placeholder ``index`` of the job ``body``: one replica's GPUs, and the job's trainer's
    CPU and memory requests, wherever the job's own pods may run."""
    job = JobRef.from_body(body)
    template = spec.template.get("spec") or {}
    trainer = (template.get("containers") or [{}])[0]
    requests = {
        k: v
        for k, v in ((trainer.get("resources") or {}).get("requests") or {}).items()
        if k in ("cpu", "memory")
    }
    gpus = str(max(spec.gpus_per_replica, 1))
    pspec: dict[str, Any] = {
        "containers": [
            {
                "name": "placeholder",
                "image": settings.image,
                "resources": {
                    "requests": {**requests, settings.resource: gpus},
                    "limits": {settings.resource: gpus},
                },
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "affinity": _capacity_type(
            template.get("affinity"), settings.capacity_type_label, spec.preemptible
        ),
    }
    selector = {**(template.get("nodeSelector") or {}), **(pool.node_labels if pool else {})}
    if selector:
        pspec["nodeSelector"] = selector
    tolerations = [dict(t) for t in template.get("tolerations") or []]
    tolerations += [
        dict(t) for t in (pool.tolerations if pool else ()) if dict(t) not in tolerations
    ]
    pspec["tolerations"] = pod_tolerations({"tolerations": tolerations}, settings.resource, 1)
    meta = {
        "name": placeholder_name(job.name, index),
        "namespace": job.namespace,
        "labels": {LABEL_CAPACITY_FOR: job.name, "app.kubernetes.io/managed-by": "adl"},
        "ownerReferences": [owner_reference(job)],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pspec}


@dataclass(frozen=True)
class PlaceholderPlan:
    """What to do with the placeholder pods: create these manifests' pods, delete these
    (namespace, name) pairs; ``bound``: those deleted because their node now exists."""

    create: list[dict[str, Any]]
    delete: list[tuple[str, str]]
    bound: list[tuple[str, str]]


def plan_placeholders(
    asks: Sequence[CapacityAsk],
    bodies: Mapping[str, Mapping[str, Any]],
    specs: Mapping[str, AdaptiveJobSpec],
    existing: Sequence[Mapping[str, Any]],
    settings: PlaceholderSettings,
    pools: Mapping[str, NodePool | None] | None = None,
) -> PlaceholderPlan:
    """Placeholders wanted for ``asks`` (job key -> its body and spec) against the
    ``existing`` placeholder pods (any namespace): a bound one goes (its node exists), a
    pending one beyond what its job asks for goes, and the missing ones are made, numbered
    from the lowest free index so names are reused rather than growing."""
    wanted = {a.job: min(a.replicas, MAX_PLACEHOLDERS_PER_JOB) for a in asks if a.job in bodies}
    pending: dict[str, list[tuple[int, str, str]]] = {}
    delete: list[tuple[str, str]] = []
    bound: list[tuple[str, str]] = []
    for pod in existing:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if meta.get("deletionTimestamp"):
            continue
        job = f"{ns}/{(meta.get('labels') or {}).get(LABEL_CAPACITY_FOR, '')}"
        if (pod.get("spec") or {}).get("nodeName"):
            bound.append((ns, name))
            continue
        suffix = name.rsplit("-", 1)[-1]
        pending.setdefault(job, []).append((int(suffix) if suffix.isdigit() else 0, ns, name))
    create: list[dict[str, Any]] = []
    for job, have in pending.items():
        have.sort()
        for _, ns, name in have[wanted.get(job, 0) :]:
            delete.append((ns, name))
    for job, count in wanted.items():
        taken = {i for i, _, _ in pending.get(job, [])}
        missing = count - len(taken)
        index = 0
        while missing > 0:
            if index not in taken:
                create.append(
                    placeholder_pod(
                        bodies[job], specs[job], index, settings, (pools or {}).get(job)
                    )
                )
                missing -= 1
            index += 1
    return PlaceholderPlan(create, delete, bound)
