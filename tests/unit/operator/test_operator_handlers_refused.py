"""A pod create the cluster refuses (a ResourceQuota or webhook: 403; an invalid pod: 400/422)
is a failed start: counted, backed off, and the job Failed past maxRestarts with the reason.
Before, the reconcile raised on every pass and the job sat in Starting for ever, its other
pods holding their GPUs while they waited for the refused peer."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from operator_kit import MemoryCluster

from adl.operator import handlers
from tests.event_sink import EventRecorder


class QuotaStore(MemoryCluster):
    """A cluster whose quota admits ``quota`` pods at a time (or that answers ``status``)."""

    def __init__(self, quota: int, status: int = 403) -> None:
        super().__init__('["n1", "n2"]', maxReplicas=2, maxRestarts=1)
        self.quota = quota
        self.answer = status
        self.refusals = 0

    def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod" and len(self.pods) >= self.quota:
            self.refusals += 1
            exc = ApiException(status=self.answer, reason="Forbidden")
            exc.body = json.dumps({"message": "exceeded quota: gpu-quota"})
            raise exc
        return super().create(obj)


async def test_a_refused_pod_is_a_failed_start_and_the_job_fails_past_its_budget(
    monkeypatch: Any,
) -> None:
    store = QuotaStore(quota=1)
    rt = handlers.Runtime(store, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    t0 = datetime.now(UTC)
    monkeypatch.setattr(handlers, "_now", lambda: t0)
    await handlers._reconcile_job(rt, "ns", "j")
    st = store.job["status"]
    assert st["phase"] == "Restarting" and st["reason"] == "PodRejected"
    assert st["restarts"] == {"failure": 1}
    assert "refused pod 1: exceeded quota: gpu-quota" in st["message"]
    assert store.pods == []  # its peer, which would wait for it at rendezvous, was stopped
    # past the backoff: group 2 is refused the same way, and the budget (1) is spent
    monkeypatch.setattr(handlers, "_now", lambda: t0 + timedelta(hours=1))
    await handlers._reconcile_job(rt, "ns", "j")
    st = store.job["status"]
    assert (st["phase"], st["group"], st["restarts"]) == ("Failed", 2, {"failure": 2})
    assert store.pods == [] and store.refusals == 2
    await handlers._reconcile_job(rt, "ns", "j")  # a fixed point: nothing is tried again
    assert store.refusals == 2


async def test_a_server_error_is_retried_not_counted() -> None:
    store = QuotaStore(quota=1, status=503)
    rt = handlers.Runtime(store, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    try:
        await handlers._reconcile_job(rt, "ns", "j")
    except ApiException as exc:
        assert exc.status == 503  # kopf retries the handler
    else:
        raise AssertionError("a 503 must reach kopf, which retries")
    assert store.job["status"]["phase"] == "Starting"
    assert "restarts" not in store.job["status"] or not store.job["status"]["restarts"]


async def test_a_pod_that_cannot_be_built_is_a_failed_start() -> None:
    """An image without a command is a valid spec (one replica per pod runs the entrypoint),
    but a pod holding two replicas needs the command for the launcher."""
    store = QuotaStore(quota=10)
    store.job["spec"]["template"] = {"spec": {"containers": [{"name": "t", "image": "i"}]}}
    store.job["metadata"]["annotations"]["adl.dev/allocation"] = '["n1", "n1"]'
    rt = handlers.Runtime(store, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    st = store.job["status"]
    assert (st["phase"], st["reason"], st["restarts"]) == (
        "Restarting",
        "InvalidPod",
        {"failure": 1},
    )
    assert "command is required when a pod runs several replicas" in st["message"]
