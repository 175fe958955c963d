"""A job deleted and created again under the same name before the garbage collector removed
the old one's children: the new job must not adopt them (the collector would delete them from
under it, and the old token is not its to inherit), nor take the old pods for its own."""

from __future__ import annotations

from typing import Any

from operator_kit import MemoryCluster

from adl.operator import handlers
from adl.operator import pods as P
from tests.event_sink import EventRecorder

OLD = P.JobRef("j", "ns", "old-uid")
NEW = P.JobRef("j", "ns", "new-uid")


class Cluster(MemoryCluster):
    """The new job, and what the deleted one of the same name left behind."""

    def __init__(self) -> None:
        super().__init__(uid=NEW.uid, maxReplicas=1)
        #: the operator's Events (every Runtime of the test posts here)
        self.recorder = EventRecorder()

    @property
    def events(self) -> list[str]:
        """The PreviousJobResources events' messages."""
        return [e.message for e in self.recorder.said if e.reason == "PreviousJobResources"]

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


def owner(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["ownerReferences"][0]["uid"])


async def test_a_recreated_job_waits_for_the_old_jobs_children_to_go() -> None:
    cluster = Cluster()
    cluster.leftovers_of_the_old_job()
    rt = handlers.Runtime(cluster, policy=None, events=cluster.recorder)  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    # the old pod (same labels, another owner) is not taken for the new job's group 1 ...
    assert cluster.job["status"]["phase"] == "Starting"
    assert cluster.job["status"]["group"] == 1
    # ... and nothing of the old job is adopted, nor does a pod start beside the old one
    assert owner(cluster.get_secret("ns", "j-adl-token")) == OLD.uid
    assert "adl.dev/token-sha256" not in cluster.job["metadata"]["annotations"]
    assert cluster.get("Pod", P.pod_name("j", 1, 0)) is not None  # the old job's, still
    assert owner(cluster.get("Pod", P.pod_name("j", 1, 0))) == OLD.uid
    await handlers._reconcile_job(rt, "ns", "j")
    assert len(cluster.events) == 1 and "still stopping" in cluster.events[0]  # said once
    # ... and in the status, where `adl describe` and `kubectl get aj` look
    assert cluster.job["status"]["reason"] == "WaitingForPreviousJob"
    assert "still stopping" in cluster.job["status"]["message"]
    # the collector takes Service and Secret at once; the old pod saves its checkpoint first
    cluster.collect_garbage(("Service", "Secret"))
    await handlers._reconcile_job(rt, "ns", "j")
    assert owner(cluster.get("Pod", P.pod_name("j", 1, 0))) == OLD.uid
    assert cluster.get_secret("ns", "j-adl-token") is None
    cluster.collect_garbage(("Pod",))
    rt = handlers.Runtime(cluster, policy=None, events=cluster.recorder)  # type: ignore[arg-type]  # operator restarted
    await handlers._reconcile_job(rt, "ns", "j")
    assert owner(cluster.get_service("ns", "j")) == NEW.uid
    secret = cluster.get_secret("ns", "j-adl-token")
    assert owner(secret) == NEW.uid
    assert secret is not None and P.token_from_secret(secret) not in (None, "old-token")
    assert owner(cluster.get("Pod", P.pod_name("j", 1, 0))) == NEW.uid
    assert len(cluster.events) == 1
    # the wait is over: the status says the group is starting again
    assert cluster.job["status"]["reason"] == "Starting"
    assert cluster.job["status"]["message"].startswith("group 1: ")


async def test_the_old_jobs_children_are_waited_for_even_when_the_pod_is_gone() -> None:
    cluster = Cluster()
    cluster.leftovers_of_the_old_job()
    cluster.collect_garbage(("Pod",))
    rt = handlers.Runtime(cluster, policy=None, events=cluster.recorder)  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    assert cluster.get("Pod", P.pod_name("j", 1, 0)) is None
    assert cluster.events and "Service j still belongs to a deleted job" in cluster.events[0]
    cluster.collect_garbage(("Service", "Secret"))
    await handlers._reconcile_job(rt, "ns", "j")
    assert owner(cluster.get("Pod", P.pod_name("j", 1, 0))) == NEW.uid
