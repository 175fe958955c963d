"""A job deleted and created again under the same name before the garbage collector removed
the old one's children: the new job must not adopt them (the collector would delete them from
under it, and the old token is not its to inherit), nor take the old pods for its own."""

from __future__ import annotations

import copy
from typing import Any

from adl.operator import handlers
from adl.operator import pods as P

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}
OLD = P.JobRef("j", "ns", "old-uid")
NEW = P.JobRef("j", "ns", "new-uid")


class Cluster:
    """Children by (kind, name), each with its owner reference, like the API server keeps."""

    def __init__(self) -> None:
        self.job: dict[str, Any] = {
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "uid": NEW.uid,
                "resourceVersion": "1",
                "annotations": {"adl.dev/allocation": '["n1"]'},
            },
            "spec": {"template": TEMPLATE, "maxReplicas": 1},
            "status": {},
        }
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[str] = []  # the PreviousJobResources events' messages

    def said(self, reason: str, message: str) -> None:
        if reason == "PreviousJobResources":
            self.events.append(message)

    def leftovers_of_the_old_job(self) -> None:
        for obj in (P.build_service(OLD), P.build_token_secret(OLD, "old-token")):
            self.create(obj)
        spec = handlers.AdaptiveJobSpec.model_validate(self.job["spec"])
        pod = P.build_pod(OLD, spec, group=1, index=0, node="n1", replicas=1, env={})
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # terminating
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        self.create(pod)

    def collect_garbage(self, kinds: tuple[str, ...]) -> None:
        self.objects = {
            k: o
            for k, o in self.objects.items()
            if k[0] not in kinds or o["metadata"]["ownerReferences"][0]["uid"] != OLD.uid
        }

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.job)

    def patch_job_status(self, ns: str, name: str, status: dict[str, Any], rv: Any) -> None:
        self.job["status"].update(copy.deepcopy(status))

    def patch_job_annotations(self, ns: str, name: str, ann: dict[str, Any]) -> None:
        self.job["metadata"]["annotations"].update(ann)

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (kind, _), o in self.objects.items() if kind == "Pod"]

    def create(self, obj: dict[str, Any]) -> bool:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.objects:
            return False
        self.objects[key] = copy.deepcopy(obj)
        return True

    def _get(self, kind: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((kind, name))
        return copy.deepcopy(obj) if obj is not None else None

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get("Service", name)

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get("Secret", name)

    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get("PersistentVolumeClaim", name)

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        self.objects.pop(("Pod", name), None)


def owner(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["ownerReferences"][0]["uid"])


async def test_a_recreated_job_waits_for_the_old_jobs_children_to_go(monkeypatch: Any) -> None:
    cluster = Cluster()
    monkeypatch.setattr(handlers, "_event", lambda body, t, reason, m: cluster.said(reason, m))
    cluster.leftovers_of_the_old_job()
    rt = handlers.Runtime(cluster, policy=None)  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    # the old pod (same labels, another owner) is not taken for the new job's group 1 ...
    assert cluster.job["status"]["phase"] == "Starting"
    assert cluster.job["status"]["group"] == 1
    # ... and nothing of the old job is adopted, nor does a pod start beside the old one
    assert owner(cluster.get_secret("ns", "j-adl-token")) == OLD.uid
    assert "adl.dev/token-sha256" not in cluster.job["metadata"]["annotations"]
    assert cluster._get("Pod", P.pod_name("j", 1, 0)) is not None  # the old job's, still
    assert owner(cluster._get("Pod", P.pod_name("j", 1, 0))) == OLD.uid
    await handlers._reconcile_job(rt, "ns", "j")
    assert len(cluster.events) == 1 and "still stopping" in cluster.events[0]  # said once
    # the collector takes Service and Secret at once; the old pod saves its checkpoint first
    cluster.collect_garbage(("Service", "Secret"))
    await handlers._reconcile_job(rt, "ns", "j")
    assert owner(cluster._get("Pod", P.pod_name("j", 1, 0))) == OLD.uid
    assert cluster.get_secret("ns", "j-adl-token") is None
    cluster.collect_garbage(("Pod",))
    await handlers._reconcile_job(rt, "ns", "j")
    assert owner(cluster.get_service("ns", "j")) == NEW.uid
    secret = cluster.get_secret("ns", "j-adl-token")
    assert owner(secret) == NEW.uid
    assert secret is not None and P.token_from_secret(secret) not in (None, "old-token")
    assert owner(cluster._get("Pod", P.pod_name("j", 1, 0))) == NEW.uid
    assert len(cluster.events) == 1


async def test_the_old_jobs_children_are_waited_for_even_when_the_pod_is_gone(
    monkeypatch: Any,
) -> None:
    cluster = Cluster()
    monkeypatch.setattr(handlers, "_event", lambda body, t, reason, m: cluster.said(reason, m))
    cluster.leftovers_of_the_old_job()
    cluster.collect_garbage(("Pod",))
    rt = handlers.Runtime(cluster, policy=None)  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    assert cluster._get("Pod", P.pod_name("j", 1, 0)) is None
    assert cluster.events and "Service j still belongs to a deleted job" in cluster.events[0]
    cluster.collect_garbage(("Service", "Secret"))
    await handlers._reconcile_job(rt, "ns", "j")
    assert owner(cluster._get("Pod", P.pod_name("j", 1, 0))) == NEW.uid
