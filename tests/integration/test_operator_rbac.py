"""Every API call the running operator makes is allowed by the chart's rendered RBAC, and every
namespaced and cluster grant is really used (nothing more is granted).

kmock records each request; the operator's own calls are told apart by their user agents
(kopf's and adl-operator's), the test's by the default client agent.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import helm_python as helm
import kmock
import pytest
import yaml
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock/operator fixtures)
from operator_harness import Operator, ScriptedPolicy, objects

from adl.operator import handlers
from adl.operator import permissions as perms
from adl.operator.store import api_client
from tests.waiting import eventually

CHART = Path(__file__).resolve().parents[2] / "charts" / "adl"


def rendered_permissions(
    values: dict[str, Any] | None = None,
) -> tuple[frozenset[perms.Permission], set[str]]:
    """What an install of the chart grants the operator, and the namespaces of its Roles."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name="adl", namespace="adl-system", is_install=True)
    granted: set[perms.Permission] = set()
    role_namespaces: set[str] = set()
    docs = (yaml.safe_load_all(t) for n, t in out.items() if n.endswith(".yaml"))
    for doc in (d for ds in docs for d in ds if d):
        labels = (doc.get("metadata") or {}).get("labels") or {}
        if labels.get("app.kubernetes.io/component") == "user-roles":
            continue  # aggregated into admin/edit/view for people, bound to no operator
        if doc.get("kind") == "ClusterRole":
            granted |= perms.from_rules(doc["rules"], perms.CLUSTER)
        elif doc.get("kind") == "Role":
            granted |= perms.from_rules(doc["rules"], perms.NAMESPACED)
            role_namespaces.add(doc["metadata"]["namespace"])
    return frozenset(granted), role_namespaces


VERBS = {
    "LIST": "list",
    "WATCH": "watch",
    "FETCH": "get",
    "CREATE": "create",
    "UPDATE": "patch",
    "DELETE": "delete",
}


def operator_calls(k8s: Any) -> set[tuple[perms.Permission, str | None]]:
    """(permission, namespace or None for cluster-scoped calls) of every operator request."""
    calls = set()
    for req in list(k8s):
        agent = req.headers.get("User-Agent", "")
        if not agent.startswith(("kopf/", "adl-operator/")) or req.resource is None:
            continue
        if req.resource.plural is None:  # discovery: non-resource URLs, open to everyone
            continue
        plural = req.resource.plural
        resource = f"{plural}/{req.subresource}" if req.subresource else plural
        group = req.resource.group or ""
        call = perms.Permission(group, resource, VERBS[req.action.name])
        calls.add((call, req.namespace))
        owners = (
            (req.data or {}).get("metadata", {}).get("ownerReferences")
            if isinstance(req.data, dict)
            else None
        )
        if req.action == kmock.action.CREATE and any(
            o.get("blockOwnerDeletion") for o in owners or []
        ):
            # the API server checks this when an object blocks its owner's deletion
            finalizers = perms.Permission("adl.dev", "adaptivejobs/finalizers", "update")
            calls.add((finalizers, req.namespace))
    return calls


PEERINGS = {
    "cluster": ("kopf.dev/v1/clusterkopfpeerings", "ClusterKopfPeering", False),
    "namespaced": ("kopf.dev/v1/kopfpeerings", "KopfPeering", True),
}


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
async def test_operator_calls_match_rendered_rbac(
    k8s: Any, policy: ScriptedPolicy, monkeypatch: Any, scope: str
) -> None:
    namespaced = scope == "namespaced"
    values = {"namespaced": True, "watchNamespaces": ["default"]} if namespaced else {}
    allowed, role_namespaces = rendered_permissions(values)
    path, kind, in_namespace = PEERINGS[scope]
    k8s.resources[path] = kmock.ResourceInfo(
        kind=kind,
        singular=kind.lower(),
        namespaced=in_namespace,
        verbs={"get", "list", "watch", "create", "patch"},
    )
    custom = client.CustomObjectsApi(api_client())
    peering = {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": "adl"}}
    if namespaced:  # the chart creates one KopfPeering per watched namespace
        for ns in sorted(role_namespaces):
            await asyncio.to_thread(
                custom.create_namespaced_custom_object,
                "kopf.dev",
                "v1",
                ns,
                "kopfpeerings",
                {**peering, "metadata": {"name": "adl", "namespace": ns}},
            )
        monkeypatch.setattr(
            handlers,
            "DEFAULT_CONFIG",
            replace(handlers.DEFAULT_CONFIG, namespaces=sorted(role_namespaces)),
        )
        operator = Operator("--peering=adl", "--priority=100", namespaces=sorted(role_namespaces))
    else:
        await asyncio.to_thread(
            custom.create_cluster_custom_object, "kopf.dev", "v1", "clusterkopfpeerings", peering
        )
        operator = Operator("--peering=adl", "--priority=100")
    await operator.start()
    try:
        policy.answer = {"default/rbac": ["node-a"]}
        container = {"name": "trainer", "image": "t:1", "command": ["python", "t.py"]}
        job = {
            "apiVersion": "adl.dev/v1",
            "kind": "AdaptiveJob",
            "metadata": {"name": "rbac", "namespace": "default"},
            "spec": {
                "template": {"spec": {"containers": [container]}},
                "checkpoint": {"storageClass": "fast"},
            },
        }
        await asyncio.to_thread(
            custom.create_namespaced_custom_object, "adl.dev", "v1", "default", "adaptivejobs", job
        )
        pods = lambda: set(objects(k8s, "pods"))  # noqa: E731
        await eventually(lambda: pods() == {"rbac-g1-0"}, timeout=15)
        policy.answer = {"default/rbac": ["node-b"]}  # resize: delete + create
        await eventually(lambda: pods() == {"rbac-g2-0"}, timeout=15)
        await asyncio.to_thread(
            custom.delete_namespaced_custom_object,
            "adl.dev",
            "v1",
            "default",
            "adaptivejobs",
            "rbac",
        )
        await eventually(lambda: "rbac" not in objects(k8s, "adaptivejobs") and not pods())
    finally:
        await operator.stop()

    calls = operator_calls(k8s)
    denied = sorted(
        f"{c} in {ns or 'the cluster'}"
        for c, ns in calls
        if not perms.covers(allowed, c, in_namespace=ns is not None)
        or (namespaced and ns is not None and not _granted_in(allowed, c, ns, role_namespaces))
    )
    assert denied == [], f"operator calls not allowed by the chart's RBAC: {denied}"
    used = {(c.group, c.resource, c.verb) for c, _ in calls}
    unused = sorted(str(p) for p in allowed if (p.group, p.resource, p.verb) not in used)
    assert unused == [], f"granted but never used: {unused}"


def _granted_in(
    allowed: frozenset[perms.Permission],
    call: perms.Permission,
    namespace: str,
    role_namespaces: set[str],
) -> bool:
    """A namespaced call is allowed by a cluster grant, or by a Role in that very namespace."""
    cluster = {p for p in allowed if p.scope == perms.CLUSTER}
    if perms.covers(cluster, call, in_namespace=True):
        return True
    return namespace in role_namespaces
