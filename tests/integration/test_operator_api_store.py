"""The API service over the operator's store (AdaptiveJob objects in kmock): per-job tokens,
hints into status, rendezvous facts, metrics."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock fixtures)
from operator_harness import objects

from adl.api.app import create_app
from adl.operator.api_store import OperatorApiStore
from adl.operator.store import MERGE, KubeStore, api_client

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "t:1", "command": ["python"]}]}}


async def make_job(name: str, token: str, status: dict[str, Any] | None = None) -> None:
    custom = client.CustomObjectsApi(api_client())
    digest = hashlib.sha256(token.encode()).hexdigest()
    body = {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {"adl.dev/token-sha256": digest},
        },
        "spec": {"template": TEMPLATE, "gpusPerReplica": 2},
    }
    await asyncio.to_thread(
        custom.create_namespaced_custom_object, "adl.dev", "v1", "ns", "adaptivejobs", body
    )
    if status:
        await asyncio.to_thread(
            custom.patch_namespaced_custom_object_status,
            "adl.dev",
            "v1",
            "ns",
            "adaptivejobs",
            name,
            {"status": status},
            _content_type=MERGE,
        )


async def test_hints_tokens_group_and_metrics(k8s: Any) -> None:
    await make_job(
        "a", "token-a", {"phase": "Running", "group": 3, "allocation": ["n1", "n1", "n2"]}
    )
    await make_job("b", "token-b")
    app = create_app(OperatorApiStore(KubeStore()))
    hints = {"initBatchSize": 32, "batchSize": 128, "goodput": 7.5, "localBszBounds": [8, 64]}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://adl") as http:
        url = "/v1/jobs/ns/a/hints"
        assert (await http.put(url, json=hints)).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert (await http.put(url, json=hints, headers=bad)).status_code == 401
        other = {"Authorization": "Bearer token-b"}
        assert (await http.put(url, json=hints, headers=other)).status_code == 403
        own = {"Authorization": "Bearer token-a"}
        assert (await http.put(url, json=hints, headers=own)).status_code == 204
        stored = objects(k8s, "adaptivejobs", "ns")["a"]["status"]
        assert stored["hints"]["batchSize"] == 128 and stored["hints"]["localBszBounds"] == [8, 64]
        assert stored["group"] == 3  # the rest of the status is untouched

        again = {"initBatchSize": 32}
        assert (await http.put(url, json=again, headers=own)).status_code == 204
        assert "batchSize" not in objects(k8s, "adaptivejobs", "ns")["a"]["status"]["hints"]

        group = (await http.get("/v1/jobs/ns/a/group", headers=own)).json()
        assert group["group"] == 3 and group["worldSize"] == 3 and group["numNodes"] == 2
        assert group["masterAddr"] == "a-g3-0.a.ns.svc" and group["masterPort"] == 29500

        assert (await http.get("/readyz")).status_code == 200
        metrics = (await http.get("/metrics")).text
        assert 'adl_jobs{phase="Running"} 1.0' in metrics
        assert 'adl_job_gpus{name="a",namespace="ns"} 6.0' in metrics
