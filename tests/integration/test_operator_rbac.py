"""Every API call the running operator makes is allowed by the chart's rendered RBAC, and every
namespaced and cluster grant is really used (nothing more is granted).

kmock records each request; the operator's own calls are told apart by their user agents
(kopf's and adl-operator's), the test's by the default client agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import helm_python as helm
import kmock
import yaml
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock/operator fixtures)
from operator_harness import Operator, ScriptedPolicy, eventually, objects

from adl.operator import permissions as perms
from adl.operator.store import api_client

CHART = Path(__file__).resolve().parents[2] / "charts" / "adl"


def rendered_permissions() -> frozenset[perms.Permission]:
    """What the default (cluster-wide) install of the chart grants the operator."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render({}, name="adl", namespace="adl-system", is_install=True)
    granted: set[perms.Permission] = set()
    docs = (yaml.safe_load_all(t) for n, t in out.items() if n.endswith(".yaml"))
    for doc in (d for ds in docs for d in ds if d):
        if doc.get("kind") == "ClusterRole":
            granted |= perms.from_rules(doc["rules"], perms.CLUSTER)
        elif doc.get("kind") == "Role":
            granted |= perms.from_rules(doc["rules"], perms.NAMESPACED)
    return frozenset(granted)


VERBS = {
    "LIST": "list",
    "WATCH": "watch",
    "FETCH": "get",
    "CREATE": "create",
    "UPDATE": "patch",
    "DELETE": "delete",
}


def operator_calls(k8s: Any) -> set[tuple[perms.Permission, bool]]:
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
        calls.add((call, req.namespace is not None))
        owners = (
            (req.data or {}).get("metadata", {}).get("ownerReferences")
            if isinstance(req.data, dict)
            else None
        )
        if req.action == kmock.action.CREATE and any(
            o.get("blockOwnerDeletion") for o in owners or []
        ):
            # the API server checks this when an object blocks its owner's deletion
            calls.add((perms.Permission("adl.dev", "adaptivejobs/finalizers", "update"), True))
    return calls


async def test_operator_calls_match_rendered_rbac(k8s: Any, policy: ScriptedPolicy) -> None:
    k8s.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
        kind="ClusterKopfPeering",
        singular="clusterkopfpeering",
        namespaced=False,
        verbs={"get", "list", "watch", "create", "patch"},
    )
    custom = client.CustomObjectsApi(api_client())
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "adl"},
    }
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
    allowed = rendered_permissions()
    denied = sorted(
        str(c) for c, in_ns in calls if not perms.covers(allowed, c, in_namespace=in_ns)
    )
    assert denied == [], f"operator calls not allowed by the chart's RBAC: {denied}"
    used = {(c.group, c.resource, c.verb) for c, _ in calls}
    unused = sorted(str(p) for p in allowed if (p.group, p.resource, p.verb) not in used)
    assert unused == [], f"granted but never used: {unused}"
