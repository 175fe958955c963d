"""Nodes that are about to go away, read from the Node object alone.

An autoscaler, a cloud's interruption handler or an admin marks a node before it takes it away:
a taint, a cordon, a deletion. By then the node's pods have a notice of seconds to minutes (GKE
gives a spot VM 30 s and its handler less, AWS two minutes) before they are evicted or killed.
adl treats every such mark as the node leaving: the node is offered to no job any more (a
round), and each job with a pod there is stopped gracefully at once, so it checkpoints within
the notice and the next group starts on the nodes that stay, rather than waiting for an eviction
that may come after the notice has run out.

Everything here is visible on the Node, so nothing depends on the autoscaler's own objects
being installed: Karpenter taints the node of a NodeClaim it disrupts (consolidation, drift,
expiry, a spot interruption, a deleted NodeClaim) and deletes the Node, cluster-autoscaler
taints a node it scales down, the termination handlers of AWS and GCP taint a node whose
instance got a notice, and ``kubectl drain`` cordons. A node with one of these marks that
later loses it (an uncordon, a disruption Karpenter gave up) is offered again.

Pure functions over Node dicts; ``LEAVING_TAINTS`` is the one list of the well-known signals
(documented in ``docs/autoscalers.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: taint key -> who sets it, and when. Matched whatever its value and effect (each is set only
#: on a node that is going away), and whatever a job tolerates: a pod that tolerates the taint
#: may stay, but its node still goes.
LEAVING_TAINTS: Mapping[str, str] = {
    # Karpenter v1: any disruption (consolidation, drift, expiration, interruption, a deleted
    # NodeClaim), before it drains the node through the Eviction API
    "karpenter.sh/disrupted": "Karpenter is disrupting it",
    # Karpenter before v1 (``karpenter.sh/disruption=disrupting:NoSchedule``)
    "karpenter.sh/disruption": "Karpenter is disrupting it",
    # cluster-autoscaler: chosen for scale-down, about to be drained and deleted
    "ToBeDeletedByClusterAutoscaler": "cluster-autoscaler is removing it",
    # GCP's node termination handler: a preemption (spot) or maintenance notice
    "cloud.google.com/impending-node-termination": "its VM is about to be terminated",
    # AWS Node Termination Handler: a spot interruption notice, a scheduled maintenance event,
    # an Auto Scaling group scale-in
    "aws-node-termination-handler/spot-itn": "a spot interruption notice",
    "aws-node-termination-handler/scheduled-maintenance": "scheduled maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination": "its Auto Scaling group ends it",
    # a node that is shut down (non-graceful node shutdown): its pods are force-deleted
    "node.kubernetes.io/out-of-service": "it is out of service",
}
#: what ``leaving_reason`` says of a cordon (``kubectl cordon`` / ``drain``) and a deletion
CORDONED = "cordoned: spec.unschedulable"
DELETED = "deleted: its deletionTimestamp is set"


def leaving_reason(node: Mapping[str, Any]) -> str | None:
    """Why ``node`` is about to go away, or None when nothing says so. A taint names itself
    (``karpenter.sh/disrupted``: the most specific signal, saying who acts), before the
    Node's deletion and a cordon (which a drain by any tool sets)."""
    spec = node.get("spec") or {}
    for taint in spec.get("taints") or []:
        key = str(taint.get("key") or "")
        if key in LEAVING_TAINTS and taint.get("effect") != "PreferNoSchedule":
            return key
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return DELETED
    if spec.get("unschedulable"):
        return CORDONED
    return None


def leaving_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> why it is leaving, for the nodes of ``nodes`` that are."""
    out = {}
    for node in nodes:
        why = leaving_reason(node)
        if why is not None:
            out[str((node.get("metadata") or {}).get("name") or "")] = why
    return out


def describe(why: str) -> str:
    """``why`` (a taint key or a cordon/deletion) with what it means, for events and logs."""
    meaning = LEAVING_TAINTS.get(why)
    return f"{why}: {meaning}" if meaning else why
