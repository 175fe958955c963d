"""What one reconcile read travels with the job's record (``KubeStepContext``), not in a dict
on the backend (issue 30), and the step's clean-up of old groups' finished pods is an action
the Kubernetes backend carries out (``RemoveExited``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from operator_kit import MemoryCluster

from adl.controller.actions import RemoveExited
from adl.controller.job_record import JobRecord
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus
from adl.operator import handlers
from adl.operator import pods as P
from adl.operator.backend import KubeStepContext, KubeWorkerBackend, OperatorConfig
from tests.event_sink import EventRecorder

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REF = P.JobRef("j", "ns", "u")


def _finished_pod(cluster: MemoryCluster, group: int, *, deleting: bool = False) -> str:
    spec = AdaptiveJobSpec.model_validate(cluster.job["spec"])
    pod = P.build_pod(REF, spec, group=group, index=0, node="n1", replicas=1, env={})
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 143}}}],
    }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cluster.create(pod)
    return str(pod["metadata"]["name"])


async def test_a_reconcile_removes_the_finished_pods_of_old_groups_only() -> None:
    cluster = MemoryCluster(maxReplicas=1)
    cluster.job["status"] = {"phase": "Running", "group": 3, "allocation": ["n1"], "replicas": 1}
    oldest = _finished_pod(cluster, 1)
    previous = _finished_pod(cluster, 2)  # kept for its logs
    rt = handlers.Runtime(cluster, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    names = {p["metadata"]["name"] for p in cluster.pods}
    assert oldest not in names and previous in names
    # the reconcile left nothing of itself on the backend
    assert not hasattr(rt.backend, "steps")


def test_the_backend_removes_only_exited_pods_not_already_going() -> None:
    cluster = MemoryCluster(maxReplicas=1)
    gone = _finished_pod(cluster, 1)
    going = _finished_pod(cluster, 0, deleting=True)
    backend = KubeWorkerBackend(cluster, OperatorConfig(), EventRecorder())  # type: ignore[arg-type]
    spec = AdaptiveJobSpec.model_validate(cluster.job["spec"])
    status = AdaptiveJobStatus(group=3)
    job = JobRecord("ns/j", spec, status, NOW, context=KubeStepContext.read(cluster.job, spec))
    backend.observe(job)  # the pods it lists are the context's, for the actions that follow
    backend.remove_exited(job, RemoveExited("ns/j", (0, 1)))
    assert {p["metadata"]["name"] for p in cluster.pods} == {going}
    assert gone not in {p["metadata"]["name"] for p in cluster.pods}


def test_a_record_without_its_context_is_a_clear_error() -> None:
    cluster = MemoryCluster()
    backend = KubeWorkerBackend(cluster, OperatorConfig(), EventRecorder())  # type: ignore[arg-type]
    spec = AdaptiveJobSpec.model_validate(cluster.job["spec"])
    job = JobRecord("ns/j", spec, AdaptiveJobStatus(), NOW)
    with pytest.raises(TypeError, match="KubeStepContext"):
        backend.observe(job)
