"""The real operator's scopes against kmock: namespace-scoped installs touch only their
namespaces, kopf peering keeps a lower-priority operator idle while a higher one is alive, and
the scheduling round's optimization runs off the event loop (pod events are handled while it
is still optimizing)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import kmock
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock/operator fixtures)
from operator_harness import Operator, RoundCounter, ScriptedPolicy, objects

from adl.operator import handlers
from adl.operator.store import MERGE, api_client
from tests.waiting import eventually


def job(name: str, namespace: str) -> dict[str, Any]:
    container = {"name": "trainer", "image": "t:1", "command": ["python", "t.py"]}
    return {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": {"containers": [container]}}, "maxReplicas": 2},
    }


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


async def submit(name: str, namespace: str = "default") -> None:
    await asyncio.to_thread(
        custom().create_namespaced_custom_object,
        "adl.dev",
        "v1",
        namespace,
        "adaptivejobs",
        job(name, namespace),
    )


async def test_namespaced_operator_runs_only_its_namespaces(
    k8s: Any, policy: ScriptedPolicy, round_counter: RoundCounter, monkeypatch: Any
) -> None:
    monkeypatch.setattr(
        handlers, "DEFAULT_CONFIG", replace(handlers.DEFAULT_CONFIG, namespaces=["team-a"])
    )
    policy.answer = {"team-a/mine": ["node-a"], "team-b/other": ["node-b"]}
    op = Operator(namespaces=["team-a"])
    await op.start()
    try:
        await submit("other", "team-b")
        await submit("mine", "team-a")
        await eventually(lambda: "mine-g1-0" in objects(k8s, "pods", "team-a"), what="pod")
        st = await eventually(lambda: objects(k8s, "adaptivejobs", "team-a")["mine"]["status"])
        assert st["phase"] == "Starting" and st["allocation"] == ["node-a"]
        await round_counter.more(3)  # a few rounds and ticks later
    finally:
        await op.stop()
    assert objects(k8s, "pods", "team-b") == {}
    other = objects(k8s, "adaptivejobs", "team-b")["other"]
    assert not other.get("status") and "adl.dev/allocation" not in (
        other["metadata"].get("annotations") or {}
    )
    assert policy.seen == {"team-a/mine"}  # the round never saw the other namespace's job
    writes = [
        (r.method, r.url.path)
        for r in list(k8s)
        if r.namespace == "team-b"
        and r.method in ("POST", "PATCH", "DELETE")
        and r.headers.get("User-Agent", "").startswith(("kopf/", "adl-operator/"))
    ]
    assert writes == [], f"the operator wrote outside its namespaces: {writes}"


def _peer(priority: int, seen: datetime) -> dict[str, Any]:
    return {
        "priority": priority,
        "lifetime": 60,
        "lastseen": seen.isoformat().replace("+00:00", "Z"),
    }


async def test_lower_priority_operator_waits_while_a_higher_peer_lives(
    k8s: Any, policy: ScriptedPolicy
) -> None:
    k8s.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
        kind="ClusterKopfPeering",
        singular="clusterkopfpeering",
        namespaced=False,
        verbs={"get", "list", "watch", "create", "patch"},
    )
    now = datetime.now(UTC)
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "adl"},
        "status": {"the-active-replica": _peer(200, now)},
    }
    await asyncio.to_thread(
        custom().create_cluster_custom_object, "kopf.dev", "v1", "clusterkopfpeerings", peering
    )
    policy.answer = {"default/peer": ["node-a"]}
    op = Operator("--peering=adl", "--priority=100")
    await op.start()
    try:
        await submit("peer")
        # a standby shows nothing that it would do to wait on: it is given time to act wrongly
        await asyncio.sleep(2.0)  # allowed: a standby's inaction has no event
        assert objects(k8s, "pods") == {} and policy.calls == 0, "a standby operator acted"
        assert not objects(k8s, "adaptivejobs")["peer"].get("status")

        # the active replica dies: its keep-alive entry expires, the standby takes over
        expired = {"status": {"the-active-replica": _peer(200, now - timedelta(minutes=5))}}
        await asyncio.to_thread(
            custom().patch_cluster_custom_object,
            "kopf.dev",
            "v1",
            "clusterkopfpeerings",
            "adl",
            expired,
        )
        await eventually(lambda: "peer-g1-0" in objects(k8s, "pods"), timeout=15, what="takeover")
    finally:
        await op.stop()


async def test_round_optimizes_off_the_event_loop(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    policy.answer = {"default/slow": ["node-a"]}
    await submit("slow")
    await eventually(lambda: "slow-g1-0" in objects(k8s, "pods"), what="pod")
    gate = threading.Event()
    policy.gate = gate  # the next round optimizes until the test lets it go
    try:
        await eventually(policy.busy.is_set, timeout=5, what="a slow round in progress")
        status = {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "state": {"running": {}},
                        "image": "t:1",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                    }
                ],
            }
        }
        core = client.CoreV1Api(api_client())
        await asyncio.to_thread(
            core.patch_namespaced_pod_status, "slow-g1-0", "default", status, _content_type=MERGE
        )
        phase = lambda: (objects(k8s, "adaptivejobs")["slow"].get("status") or {}).get("phase")  # noqa: E731
        await eventually(lambda: phase() == "Running", what="Running during the round")
        assert policy.busy.is_set(), "the pod event waited for the optimization to finish"
    finally:
        gate.set()
