"""Taints and tolerations, matched the way kube-scheduler's TaintToleration filter matches them.

A node whose NoSchedule or NoExecute taint the round's jobs do not tolerate is not offered to
the policy: a pod placed there would stay Pending. Managed GPU pools taint every GPU node (GKE:
``nvidia.com/gpu=present:NoSchedule``) so that only pods asking for GPUs land there; Kubernetes'
ExtendedResourceToleration admission plugin gives such pods a toleration for a taint keyed by
the resource they request. adl adds that toleration to its GPU pods itself, so it holds whether
or not the cluster runs the plugin, and counts it when matching.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: taint effects that keep a new pod off a node (PreferNoSchedule only steers)
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

Toleration = Mapping[str, Any]


def _matches(toleration: Toleration, taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    if taint.get("effect") == "NoExecute" and toleration.get("tolerationSeconds") is not None:
        return False  # tolerated until evicted: the node is going away, start nothing there
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    # "Equal", the default operator
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerates(tolerations: Sequence[Toleration], taint: Mapping[str, Any]) -> bool:
    """Whether a pod with ``tolerations`` may be scheduled despite ``taint``."""
    if taint.get("effect") not in BLOCKING_EFFECTS:
        return True
    return any(_matches(t, taint) for t in tolerations)


def tolerates_node(tolerations: Sequence[Toleration], node: Mapping[str, Any]) -> bool:
    """Whether every blocking taint of ``node`` is tolerated."""
    taints = (node.get("spec") or {}).get("taints") or []
    return all(tolerates(tolerations, taint) for taint in taints)


def gpu_toleration(resource: str) -> dict[str, str]:
    """The toleration a pod requesting ``resource`` gets (ExtendedResourceToleration's)."""
    return {"key": resource, "operator": "Exists", "effect": "NoSchedule"}


def pod_tolerations(pod_spec: Mapping[str, Any], resource: str, gpus: int) -> list[dict[str, Any]]:
    """The tolerations of a pod built from ``pod_spec`` that requests ``gpus`` of ``resource``:
    the template's own, plus the resource's when it requests any."""
    out = [dict(t) for t in pod_spec.get("tolerations") or []]
    extra = gpu_toleration(resource)
    if gpus > 0 and extra not in out:
        out.append(extra)
    return out
