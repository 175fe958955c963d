"""The CLI's Kubernetes backend against kmock (the user's view: submit, ls, describe, logs,
delete)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock fixtures)
from operator_harness import objects

from adl.contract import QUEUE_LABEL
from adl.jobs_api import BackendError
from adl.models import AdaptiveJobSpec
from adl.operator.client import KubernetesBackend
from adl.operator.store import MERGE, api_client

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "t:1", "command": ["python"]}]}}


async def patch_status(name: str, status: dict[str, Any]) -> None:
    """Merge-patch a job's status as the operator would (the fake API server keeps it)."""
    custom = client.CustomObjectsApi(api_client())
    await asyncio.to_thread(
        custom.patch_namespaced_custom_object_status,
        "adl.dev",
        "v1",
        "default",
        "adaptivejobs",
        name,
        status,
        _content_type=MERGE,
    )


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
    # an autoscaler adds nodes on demand (cluster-autoscaler's status is there): the nodes of
    # now say nothing of the job's, and the node checks are skipped
    status_map = {"metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"}}
    await asyncio.to_thread(core.create_namespaced_config_map, "kube-system", status_map)
    await asyncio.to_thread(backend.submit, "big", "default", too_big)
    assert "big" in objects(k8s, "adaptivejobs")
    await asyncio.to_thread(backend.delete, "big", "default")

    status = {
        "status": {
            "phase": "Running",
            "group": 1,
            "replicas": 2,
            "allocation": ["n1", "n1"],
            "kopf": {"foreign": "ignored"},
        }
    }
    await patch_status("bert", status)
    (listed,) = await asyncio.to_thread(backend.list, None)
    assert listed.status.phase == "Running" and listed.status.replicas == 2
    got = await asyncio.to_thread(backend.get, "bert", "default")
    assert got.status.allocation == ["n1", "n1"]

    # suspend / resume patch spec.suspend (the operator does the rest)
    assert await asyncio.to_thread(backend.set_suspend, "bert", "default", True) is True
    assert objects(k8s, "adaptivejobs")["bert"]["spec"]["suspend"] is True
    assert await asyncio.to_thread(backend.set_suspend, "bert", "default", True) is False
    assert await asyncio.to_thread(backend.set_suspend, "bert", "default", False) is True
    assert objects(k8s, "adaptivejobs")["bert"]["spec"]["suspend"] is False
    assert objects(k8s, "adaptivejobs")["bert"]["spec"]["maxReplicas"] == 4  # merged, not replaced
    await patch_status("bert", {"status": {"phase": "Succeeded"}})
    with pytest.raises(BackendError, match="has finished"):
        await asyncio.to_thread(backend.set_suspend, "bert", "default", True)
    with pytest.raises(BackendError, match="not found"):
        await asyncio.to_thread(backend.set_suspend, "nobody", "default", True)

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
    from adl.jobs_api import JobView
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


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose current context is the kmock server (nothing else is contacted)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "u"}}],
        "current-context": "kmock",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def manifest(path: Path, name: str, checkpoint: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": TEMPLATE, "maxReplicas": 4, "checkpoint": checkpoint},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_cli_commands_pick_kubernetes_from_the_kube_context(k8s: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from adl.cli.main import app

    core = client.CoreV1Api(api_client())
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}
    await asyncio.to_thread(core.create_node, node)
    storage = client.StorageV1Api(api_client())
    fast = {"metadata": {"name": "fast"}, "provisioner": "example.com/nfs"}
    await asyncio.to_thread(storage.create_storage_class, fast)
    env = {
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", str(k8s.url))),
        "ADL_KUBE_URL": None,  # no shortcut: the CLI must find the cluster in the kubeconfig
        "ADL_BACKEND": None,
        "COLUMNS": "200",
    }
    runner = CliRunner()

    async def adl(*args: str) -> Any:
        return await asyncio.to_thread(runner.invoke, app, list(args), env=env)

    good = manifest(tmp_path / "good.yaml", "bert", {"storageClass": "fast"})
    out = await adl("submit", "-f", str(good))
    assert out.exit_code == 0, out.output
    assert "default/bert submitted" in out.output
    assert objects(k8s, "adaptivejobs")["bert"]["spec"]["checkpoint"]["storageClass"] == "fast"

    for name, checkpoint, error in [
        ("slow", {"storageClass": "slow"}, "storage class 'slow' does not exist"),
        ("claim", {"claimName": "missing"}, "checkpoint claim 'missing' does not exist"),
    ]:
        out = await adl("submit", "-f", str(manifest(tmp_path / f"{name}.yaml", name, checkpoint)))
        assert out.exit_code == 1 and error in out.output, out.output
        assert name not in objects(k8s, "adaptivejobs")  # refused before creating anything

    now = "2026-01-01T12:00:00Z"
    status = {
        "status": {
            "phase": "Running",
            "group": 1,
            "replicas": 2,
            "allocation": ["n1", "n1"],
            "batchSize": 256,
            "goodput": 41.5,
            "conditions": [
                {"type": "Running", "status": "True", "reason": "Running", "message": "group 1"}
            ],
            "hints": {"initBatchSize": 64, "progress": 120.0, "totalProgress": 1000.0},
        }
    }
    await patch_status("bert", status)
    event = {
        "metadata": {"name": "bert.1", "namespace": "default"},
        "involvedObject": {"kind": "AdaptiveJob", "name": "bert", "namespace": "default"},
        "type": "Normal",
        "reason": "Starting",
        "message": "group 1: 2 replicas on 1 nodes",
        "lastTimestamp": now,
    }
    other = {
        **event,
        "metadata": {"name": "x.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
        "reason": "Unrelated",
    }
    for ev in (event, other):
        await asyncio.to_thread(core.create_namespaced_event, "default", ev)

    out = await adl("ls")
    assert out.exit_code == 0 and "bert" in out.output and "Running" in out.output, out.output
    assert "256" in out.output and "41.5" in out.output
    out = await adl("describe", "bert")
    assert out.exit_code == 0, out.output
    text = out.output
    assert "Phase:        Running" in text and "Allocation:   n1, n1 (2 replicas)" in text
    assert "Running    True   Running group 1" in text  # conditions
    assert "Normal Starting: group 1: 2 replicas on 1 nodes" in text  # events of this job only
    assert "Unrelated" not in text
    assert "Progress:     120/1000" in text  # from the hints
    out = await adl("top", "--once")
    assert out.exit_code == 0 and "bert" in out.output, out.output

    out = await adl("delete", "bert")
    assert out.exit_code == 0 and "bert" not in objects(k8s, "adaptivejobs")
    out = await adl("describe", "bert")
    assert out.exit_code == 1 and "not found" in out.output


async def test_submit_into_a_kueue_queue_labels_the_job(k8s: Any) -> None:
    """``adl submit --queue team-a``: the job carries the label Kueue integrations read (the
    operator with --kueue then makes its Workload); without it, no label at all."""
    core = client.CoreV1Api(api_client())
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}
    await asyncio.to_thread(core.create_node, node)
    backend = KubernetesBackend()
    spec = AdaptiveJobSpec.model_validate({"template": TEMPLATE, "maxReplicas": 4})
    await asyncio.to_thread(backend.submit, "queued", "default", spec, queue="team-a")
    await asyncio.to_thread(backend.submit, "plain", "default", spec)
    stored = objects(k8s, "adaptivejobs")
    assert stored["queued"]["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    assert "labels" not in stored["plain"]["metadata"]
    # ls shows the queue (``-`` for none), describe names it, -o json carries the label
    from rich.console import Console

    from adl.cli.render import describe_text, job_object, jobs_table

    views = {v.name: v for v in await asyncio.to_thread(backend.list, "default")}
    console = Console(width=200, record=True)
    console.print(jobs_table(list(views.values())))
    lines = console.export_text().splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.strip()}
    assert lines[0].split()[:3] == ["JOB", "QUEUE", "PHASE"], lines
    assert rows["queued"][1] == "team-a" and rows["plain"][1] == "-", lines
    assert "Queue:        team-a (Kueue)" in describe_text(views["queued"])
    assert "Queue:" not in describe_text(views["plain"])
    assert job_object(views["queued"])["metadata"]["labels"] == {QUEUE_LABEL: "team-a"}
    assert "labels" not in job_object(views["plain"])["metadata"]
