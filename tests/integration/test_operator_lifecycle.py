"""The real kopf operator against kmock: create, resize, failure, delete, restart mid-resize."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock/operator fixtures)
from operator_harness import Operator, ScriptedPolicy, eventually, objects

from adl.operator.store import MERGE, api_client

NS = "default"
KEY = f"{NS}/train"


def job_body(name: str = "train", **spec: Any) -> dict[str, Any]:
    container = {"name": "trainer", "image": "train:1", "command": ["python", "train.py"]}
    return {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {"containers": [container]}}, "maxReplicas": 8, **spec},
    }


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


async def submit(body: dict[str, Any]) -> None:
    await asyncio.to_thread(
        custom().create_namespaced_custom_object, "adl.dev", "v1", NS, "adaptivejobs", body
    )


def status(k8s: Any, name: str = "train") -> dict[str, Any]:
    return objects(k8s, "adaptivejobs")[name].get("status") or {}


def pods_of(k8s: Any, job: str = "train") -> dict[str, dict[str, Any]]:
    return {
        n: p
        for n, p in objects(k8s, "pods").items()
        if p["metadata"]["labels"]["adl.dev/job"] == job
    }


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


async def set_pod_phase(name: str, phase: str, exit_code: int | None = None) -> None:
    state: dict[str, Any] = {"running": {}}
    if exit_code is not None:
        state = {
            "terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}
        }
    body = {
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": state,
                    "image": "train:1",
                    "imageID": "",
                    "ready": phase == "Running",
                    "restartCount": 0,
                }
            ],
        }
    }
    core = client.CoreV1Api(api_client())
    await asyncio.to_thread(core.patch_namespaced_pod_status, name, NS, body, _content_type=MERGE)


async def test_create_makes_pods_and_service(k8s: Any, policy: ScriptedPolicy, operator: Operator):
    policy.answer = {KEY: ["node-a", "node-a", "node-b"]}
    await submit(job_body())

    pods = await eventually(lambda: len(pods_of(k8s)) == 2 and pods_of(k8s), what="2 pods")
    assert set(pods) == {"train-g1-0", "train-g1-1"}
    a, b = pods["train-g1-0"], pods["train-g1-1"]
    assert a["metadata"]["labels"]["adl.dev/group"] == "1"
    owner = a["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "AdaptiveJob" and owner["name"] == "train" and owner["controller"]
    assert env_of(a)["ADL_WORLD_SIZE"] == "3" and env_of(a)["ADL_LOCAL_WORLD_SIZE"] == "2"
    assert env_of(b)["ADL_RANK"] == "2" and env_of(b)["ADL_NUM_NODES"] == "2"
    assert env_of(a)["ADL_JOB"] == KEY and env_of(a)["ADL_GROUP"] == "1"
    assert a["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert a["spec"]["containers"][0]["command"][:3] == ["python", "-m", "adl.client_lib.launch"]
    assert "command" not in b["spec"]["containers"][0] or b["spec"]["containers"][0]["command"] == [
        "python",
        "train.py",
    ]

    svc = await eventually(lambda: objects(k8s, "services").get("train"), what="service")
    assert svc["spec"]["clusterIP"] == "None"
    assert "train-adl-token" in objects(k8s, "secrets")
    assert "train-checkpoint" in objects(k8s, "persistentvolumeclaims")
    st = await eventually(lambda: status(k8s).get("phase") == "Starting" and status(k8s))
    assert st["group"] == 1 and st["replicas"] == 3

    for name in pods:
        await set_pod_phase(name, "Running")
    await eventually(lambda: status(k8s).get("phase") == "Running", what="Running")
    assert status(k8s)["readyReplicas"] == 3
