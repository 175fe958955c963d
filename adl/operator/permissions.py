"""Every Kubernetes API permission the operator needs, declared once.

The Helm chart's RBAC must grant exactly these (a chart test renders it and compares), and the
kmock integration tests record every request the running operator makes and check each one is
covered here, so the RBAC is least-privilege by construction rather than by review.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from adl.contract import API_GROUP, PLURAL

NAMESPACED = "namespaced"
CLUSTER = "cluster"


@dataclass(frozen=True)
class Permission:
    """One (apiGroup, resource[/subresource], verb), granted per namespace or cluster-wide."""

    group: str
    resource: str
    verb: str
    scope: str = NAMESPACED


def _grant(group: str, resource: str, verbs: str, scope: str = NAMESPACED) -> list[Permission]:
    return [Permission(group, resource, v, scope) for v in verbs.split()]


#: Needed in every namespace whose jobs the operator runs.
NAMESPACED_PERMISSIONS: frozenset[Permission] = frozenset(
    [
        *_grant(API_GROUP, PLURAL, "get list watch patch"),
        *_grant(API_GROUP, f"{PLURAL}/status", "patch"),
        # owner references with blockOwnerDeletion need update on the owner's finalizers
        *_grant(API_GROUP, f"{PLURAL}/finalizers", "update"),
        *_grant("", "pods", "list watch create delete"),
        *_grant("", "services", "get create"),
        # one `<job>-adl-token` Secret per job: create it, and get it back (its token after an
        # operator restart, its ownerReference before the job uses it). Per-job names are not
        # known when the chart is installed, so resourceNames cannot narrow either verb; no
        # list/watch/update/delete. Namespaced installs keep it to the watched namespaces.
        *_grant("", "secrets", "get create"),
        *_grant("", "persistentvolumeclaims", "get create"),
        *_grant("", "events", "create"),
    ]
)

#: With Kueue (``--kueue``, the chart's ``kueue.enabled``), in the same namespaces: the Workloads
#: that stand for each queued job (a second one asks to grow it: ``kueue_slices``), read for
#: their admission (listed once a round, and by the job's label when it is reconciled), their
#: status patched to give an evicted or finished job's quota back. No update or delete: the job
#: owns them (garbage collection). And get on the LocalQueue a waiting job names: its ClusterQueue,
#: whose use of its quota the job's wait message states.
KUEUE_PERMISSIONS: frozenset[Permission] = frozenset(
    [
        *_grant("kueue.x-k8s.io", "workloads", "get list create"),
        *_grant("kueue.x-k8s.io", "workloads/status", "patch"),
        *_grant("kueue.x-k8s.io", "localqueues", "get"),
    ]
)

#: With Kueue, cluster-wide (ResourceFlavors are cluster-scoped): the flavors a job was admitted
#: on, whose node labels and tolerations its pods take and whose nodes it is kept to. Only
#: list: one LIST a round names them all, and a cluster has a handful. And get on the
#: ClusterQueue behind a waiting job's LocalQueue (cluster-scoped too): GPUs in use and quota.
KUEUE_CLUSTER_PERMISSIONS: frozenset[Permission] = frozenset(
    [
        *_grant("kueue.x-k8s.io", "resourceflavors", "list", CLUSTER),
        *_grant("kueue.x-k8s.io", "clusterqueues", "get", CLUSTER),
    ]
)

#: With ``--disruption-budgets`` (the chart's ``scheduler.disruptionBudgets``), in the same
#: namespaces: one PodDisruptionBudget per job, created once; the job owns it (garbage
#: collection deletes it), so no get, update or delete.
DISRUPTION_BUDGET_PERMISSIONS: frozenset[Permission] = frozenset(
    _grant("policy", "poddisruptionbudgets", "create")
)

#: kopf peering (one active operator): namespaced installs use KopfPeering objects.
NAMESPACED_PEERING: frozenset[Permission] = frozenset(
    _grant("kopf.dev", "kopfpeerings", "list watch patch")
)

#: Needed cluster-wide in every install: the GPU pool, and GPUs used by pods adl does not run.
CLUSTER_PERMISSIONS: frozenset[Permission] = frozenset(
    [
        # watch: a node that starts going away (a disruption taint, a cordon) is acted on at
        # once (``adl.operator.disruption``), not at the next round
        *_grant("", "nodes", "list watch", CLUSTER),
        *_grant("", "pods", "list", CLUSTER),
    ]
)

#: kopf peering for cluster-wide installs.
CLUSTER_PEERING: frozenset[Permission] = frozenset(
    _grant("kopf.dev", "clusterkopfpeerings", "list watch patch", CLUSTER)
)


def required(
    *, namespaced: bool, peering: bool, kueue: bool = False, disruption_budgets: bool = False
) -> frozenset[Permission]:
    """What an install needs. Cluster-wide installs get the namespaced grants cluster-wide."""
    perms = set(CLUSTER_PERMISSIONS) | (KUEUE_CLUSTER_PERMISSIONS if kueue else set())
    scope = NAMESPACED if namespaced else CLUSTER
    local = NAMESPACED_PERMISSIONS | (KUEUE_PERMISSIONS if kueue else frozenset())
    if disruption_budgets:
        local |= DISRUPTION_BUDGET_PERMISSIONS
    perms |= {Permission(p.group, p.resource, p.verb, scope) for p in local}
    if peering:
        peer = NAMESPACED_PEERING if namespaced else CLUSTER_PEERING
        perms |= peer
    return frozenset(perms)


def from_rules(rules: Iterable[dict[str, object]], scope: str) -> frozenset[Permission]:
    """Expand RBAC PolicyRules (Role/ClusterRole ``rules``) into single permissions."""
    out: set[Permission] = set()
    for rule in rules:
        groups = rule.get("apiGroups") or []
        resources = rule.get("resources") or []
        verbs = rule.get("verbs") or []
        assert isinstance(groups, list) and isinstance(resources, list)
        assert isinstance(verbs, list)
        for g in groups:
            for r in resources:
                for v in verbs:
                    out.add(Permission(str(g), str(r), str(v), scope))
    return frozenset(out)


def covers(granted: Iterable[Permission], call: Permission, *, in_namespace: bool) -> bool:
    """Whether a call is allowed: a cluster grant covers calls in any namespace, a namespaced
    grant only namespaced calls."""
    for g in granted:
        if (g.group, g.resource, g.verb) != (call.group, call.resource, call.verb):
            continue
        if g.scope == CLUSTER or in_namespace:
            return True
    return False
