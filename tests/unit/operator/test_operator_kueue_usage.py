"""Why a queued job waits names its queue's use of its quota (``adl.operator.kueue``'s
``queue_usage``, read by ``kueue_sync.ensure_workload`` only while the job waits)."""

from __future__ import annotations

from typing import Any

from adl.models import AdaptiveJobSpec
from adl.operator.kueue import POD_SET, Admission, QueueUsage, queue_usage
from adl.operator.kueue_sync import ensure_workload

GPU = "nvidia.com/gpu"


def cluster_queue(nominal: dict[str, str], reserved: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """A ClusterQueue: nominal GPU quota per flavor; reserved (total, borrowed) per flavor."""
    return {
        "metadata": {"name": "cq-a"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", GPU],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": GPU, "nominalQuota": quota},
                            ],
                        }
                        for flavor, quota in nominal.items()
                    ],
                }
            ]
        },
        "status": {
            "flavorsReservation": [
                {
                    "name": flavor,
                    "resources": [
                        {"name": "cpu", "total": "3", "borrowed": "0"},
                        {"name": GPU, "total": total, "borrowed": borrowed},
                    ],
                }
                for flavor, (total, borrowed) in reserved.items()
            ]
        },
    }


def test_the_usage_sums_the_gpu_resource_over_every_flavor() -> None:
    cq = cluster_queue({"a100": "8", "h100": "8"}, {"a100": ("6", "0"), "h100": ("2", "0")})
    assert queue_usage(cq) == QueueUsage(in_use=8, nominal=16)
    adm = Admission(queue="team-a", count=0, usage=queue_usage(cq))
    assert adm.waiting_message() == "waiting for admission in queue team-a: 8 GPUs of 16 in use"


def test_borrowed_quota_is_said_and_another_resource_name_is_read() -> None:
    cq = cluster_queue({"default": "8"}, {"default": ("12", "4")})
    assert str(queue_usage(cq)) == "12 GPUs of 8 in use (4 borrowed from its cohort)"
    assert queue_usage(cq, "amd.com/gpu") == QueueUsage(in_use=0, nominal=0)


def test_a_fresh_queue_uses_nothing_and_usage_stands_in_for_a_missing_reservation() -> None:
    cq = cluster_queue({"default": "4"}, {})
    cq["status"] = {}
    assert queue_usage(cq) == QueueUsage(in_use=0, nominal=4)
    cq["status"] = {
        "flavorsUsage": [{"name": "default", "resources": [{"name": GPU, "total": "3"}]}]
    }
    assert queue_usage(cq) == QueueUsage(in_use=3, nominal=4)


def test_an_evicted_job_says_why_and_not_the_usage() -> None:
    adm = Admission(queue="team-a", count=0, evicted="Preempted", usage=QueueUsage(1, 2))
    assert adm.waiting_message() == "evicted by Kueue from queue team-a: Preempted"


class QueueStore:
    """The KubeStore calls ``ensure_workload`` makes, counted."""

    def __init__(self, workload: dict[str, Any] | None, queues: bool = True) -> None:
        self.workload = workload
        self.local = {"spec": {"clusterQueue": "cq-a"}} if queues else None
        self.cluster = cluster_queue({"default": "16"}, {"default": ("8", "0")})
        self.gets: list[str] = []

    def list_job_workloads(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        return [self.workload] if self.workload is not None else []

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # labelled Workloads only: none made before the label

    def create_workload(self, obj: dict[str, Any]) -> bool:
        self.workload = obj
        return True

    def get_local_queue(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append(f"localqueue {namespace}/{name}")
        return self.local

    def get_cluster_queue(self, name: str) -> dict[str, Any] | None:
        self.gets.append(f"clusterqueue {name}")
        return self.cluster


BODY = {"metadata": {"name": "train", "namespace": "ns", "uid": "u-1", "labels": {}}}
BODY["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"  # type: ignore[index]
SPEC = AdaptiveJobSpec.model_validate(
    {
        "minReplicas": 1,
        "maxReplicas": 4,
        "gpusPerReplica": 1,
        "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
    }
)


def test_a_waiting_job_reads_its_queues_usage_once_and_an_admitted_one_reads_nothing() -> None:
    store = QueueStore(None)
    _, adm = ensure_workload(store, BODY, SPEC, GPU)  # type: ignore[arg-type]
    assert adm is not None
    assert adm.waiting_message() == "waiting for admission in queue team-a: 8 GPUs of 16 in use"
    assert store.gets == ["localqueue ns/team-a", "clusterqueue cq-a"]

    store.gets.clear()
    assert store.workload is not None
    store.workload["status"] = {
        "conditions": [{"type": "Admitted", "status": "True"}],
        "admission": {"podSetAssignments": [{"name": POD_SET, "count": 2}]},
    }
    _, adm = ensure_workload(store, BODY, SPEC, GPU)  # type: ignore[arg-type]
    assert adm is not None and adm.ceiling == 2
    assert store.gets == []  # admitted: nothing to explain, nothing read


def test_a_missing_local_queue_is_why_it_waits() -> None:
    store = QueueStore(None, queues=False)
    _, adm = ensure_workload(store, BODY, SPEC, GPU)  # type: ignore[arg-type]
    assert adm is not None
    assert adm.waiting_message() == (
        "waiting for admission in queue team-a: LocalQueue team-a does not exist in namespace ns"
    )
    assert store.gets == ["localqueue ns/team-a"]
