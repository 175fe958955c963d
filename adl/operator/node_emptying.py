"""The operator's side of emptying nodes (``adl.sched.emptying``): which nodes adl alone keeps,
and how each job on a node being emptied is told.

adl never cordons or taints a Node: it only stops offering the node to its jobs (the driver
holds it back), the jobs move off at the next round, and the autoscaler's own emptiness
consolidation removes the empty node. So only a node that nothing but adl's workers keep is
worth emptying: another pod (not a DaemonSet's, which every node runs, nor a static pod) keeps
its node alive whatever adl does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from adl.contract import LABEL_CAPACITY_FOR
from adl.operator.capacity_sync import EventSink
from adl.operator.pods import LABEL_JOB
from adl.sched.emptying import NodeToEmpty

log = logging.getLogger(__name__)

#: the Event a job on a node being emptied gets (``adl describe`` shows it)
EMPTIED = "NodeEmptied"
#: the annotation of a static pod's mirror on the API server
_MIRROR = "kubernetes.io/config.mirror"


def _ignored_by_consolidation(pod: Mapping[str, Any]) -> bool:
    """A pod that does not keep its node from being empty: adl's own (a worker moves, a
    placeholder is deleted), a DaemonSet's, a static pod's mirror, or one that has ended."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if LABEL_JOB in labels or LABEL_CAPACITY_FOR in labels:
        return True
    if _MIRROR in (meta.get("annotations") or {}):
        return True
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return True
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def nodes_kept_by_others(pods: Sequence[Mapping[str, Any]]) -> set[str]:
    """The nodes on which some pod other than adl's keeps the node from being empty."""
    return {
        str((p.get("spec") or {}).get("nodeName"))
        for p in pods
        if (p.get("spec") or {}).get("nodeName") and not _ignored_by_consolidation(p)
    }


def say_emptied(
    chosen: Sequence[NodeToEmpty],
    released: Sequence[str],
    bodies: Mapping[str, Mapping[str, Any]],
    events: EventSink,
) -> None:
    """One ``NodeEmptied`` event on each job with replicas on a node being emptied, saying
    what happens to them and why; the rest is logged."""
    for choice in chosen:
        log.info("emptying %s", choice.why)
        for job, message in choice.moves:
            body = bodies.get(job)
            if body is not None:
                events(body, "Normal", EMPTIED, message)
    if released:
        log.info(
            "offering %s again: the jobs' new demand would use them before any new node",
            ", ".join(released),
        )
