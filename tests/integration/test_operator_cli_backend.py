"""The CLI's Kubernetes backend against kmock (the user's view: submit, ls, describe, logs,
delete)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock fixtures)
from operator_harness import objects

from adl.cli.backend import BackendError
from adl.models import AdaptiveJobSpec
from adl.operator.client import KubernetesBackend
from adl.operator.store import MERGE, api_client

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "t:1", "command": ["python"]}]}}


async def test_submit_list_get_delete(k8s: Any) -> None:
    core = client.CoreV1Api(api_client())
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}
    await asyncio.to_thread(core.create_node, node)
    backend = KubernetesBackend()
    spec = AdaptiveJobSpec.model_validate({"template": TEMPLATE, "maxReplicas": 4})

    view = await asyncio.to_thread(backend.submit, "bert", "default", spec)
    assert (view.name, view.namespace, view.spec.max_replicas) == ("bert", "default", 4)
    stored = objects(k8s, "adaptivejobs")["bert"]
    assert stored["spec"]["maxReplicas"] == 4 and stored["kind"] == "AdaptiveJob"

    too_big = AdaptiveJobSpec.model_validate({"template": TEMPLATE, "gpusPerReplica": 8})
    with pytest.raises(BackendError, match="largest node has 4"):
        await asyncio.to_thread(backend.submit, "big", "default", too_big)
    assert "big" not in objects(k8s, "adaptivejobs")  # nothing was created

    status = {
        "status": {
            "phase": "Running",
            "group": 1,
            "replicas": 2,
            "allocation": ["n1", "n1"],
            "kopf": {"foreign": "ignored"},
        }
    }
    custom = client.CustomObjectsApi(api_client())
    await asyncio.to_thread(
        custom.patch_namespaced_custom_object_status,
        "adl.dev",
        "v1",
        "default",
        "adaptivejobs",
        "bert",
        status,
        _content_type=MERGE,
    )
    (listed,) = await asyncio.to_thread(backend.list, None)
    assert listed.status.phase == "Running" and listed.status.replicas == 2
    got = await asyncio.to_thread(backend.get, "bert", "default")
    assert got.status.allocation == ["n1", "n1"]

    await asyncio.to_thread(backend.delete, "bert", "default")
    assert "bert" not in objects(k8s, "adaptivejobs")
    with pytest.raises(BackendError, match="not found"):
        await asyncio.to_thread(backend.get, "bert", "default")


class FakeLogs:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self) -> Any:
        yield from self.chunks


def test_logs_pick_the_pod_of_the_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    from adl.cli.backend import JobView
    from adl.models import AdaptiveJobStatus

    backend = KubernetesBackend.__new__(KubernetesBackend)
    backend.api = client.ApiClient()
    view = JobView(
        "j",
        "ns",
        AdaptiveJobSpec.model_validate({"template": TEMPLATE}),
        AdaptiveJobStatus(group=2, allocation=["a", "a", "b"], replicas=3),
    )
    pods = [
        {
            "metadata": {
                "name": f"j-g2-{i}",
                "labels": {"adl.dev/job": "j", "adl.dev/group": "2", "adl.dev/node-index": str(i)},
            },
            "spec": {"containers": [{"name": "trainer"}]},
        }
        for i in (0, 1)
    ] + [
        {
            "metadata": {
                "name": "j-g1-0",
                "labels": {"adl.dev/job": "j", "adl.dev/group": "1", "adl.dev/node-index": "0"},
            },
            "spec": {"containers": [{"name": "trainer"}]},
        }
    ]
    asked: list[tuple[str, bool]] = []

    class Core:
        def read_namespaced_pod_log(self, name: str, ns: str, **kw: Any) -> FakeLogs:
            asked.append((name, kw["follow"]))
            return FakeLogs([b"step 1\nst", b"ep 2\n", b"done"])

    monkeypatch.setattr(backend, "get", lambda name, ns: view)
    monkeypatch.setattr(backend, "_pods", lambda name, ns: pods)
    backend.core = Core()  # type: ignore[assignment]
    assert list(backend.logs("j", "ns", replica=2, follow=True)) == ["step 1", "step 2", "done"]
    assert asked == [("j-g2-1", True)]
    list(backend.logs("j", "ns"))
    assert asked[-1] == ("j-g2-0", False)
    with pytest.raises(BackendError, match="out of range"):
        list(backend.logs("j", "ns", replica=3))
