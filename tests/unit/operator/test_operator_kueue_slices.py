"""Growing a partially admitted job with Kueue Workload slices (``adl.operator.kueue_slices``,
and ``kueue_sync``'s asks and withdrawals)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from adl.operator.kueue import POD_SET, Admission, QueueUsage, admission
from adl.operator.kueue_slices import (
    ANNOTATION_SLICE,
    LABEL_JOB_UID,
    REPLACEMENT_FOR,
    growth_count,
    labelled_manifest,
    replacement_manifest,
    slice_name,
    sort_slices,
)
from adl.operator.kueue_sync import admissions, ensure_workload, settle_workload
from adl.operator.scheduling import ANNOTATION_ALLOCATION

GPU = "nvidia.com/gpu"
SPEC = AdaptiveJobSpec.model_validate(
    {
        "minReplicas": 1,
        "maxReplicas": 4,
        "gpusPerReplica": 2,
        "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
    }
)


def body(running: int | None = None) -> dict[str, Any]:
    """The job in queue team-a; ``running``: replicas of the round's answer."""
    meta: dict[str, Any] = {
        "name": "train",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
    }
    if running is not None:
        meta["annotations"] = {ANNOTATION_ALLOCATION: json.dumps(["n1"] * running)}
    return {"metadata": meta}


def workload(number: int, count: int | None = None, finished: str | None = None) -> dict[str, Any]:
    """Slice ``number`` of the job: admitted for ``count`` (None: pending), maybe finished."""
    wl = labelled_manifest(body(), SPEC, GPU)
    wl["metadata"]["name"] = slice_name("train", "u-1", number)
    if number:
        wl["metadata"]["annotations"] = {ANNOTATION_SLICE: str(number)}
    conditions = []
    if count is not None:
        conditions.append({"type": "Admitted", "status": "True"})
        wl["status"] = {"admission": {"podSetAssignments": [{"name": POD_SET, "count": count}]}}
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": finished})
    wl.setdefault("status", {})["conditions"] = conditions
    return wl


def test_the_newest_admitted_unfinished_slice_counts() -> None:
    first, ask = workload(0, count=1), workload(1)
    got = sort_slices([ask, first])
    assert (got.current, got.asking, got.superseded) == (first, ask, ())
    # Kueue admitted the ask and finished the first: the ask is the job's Workload now
    got = sort_slices([workload(0, 1, finished="WorkloadSliceReplaced"), workload(1, count=4)])
    assert got.current is not None and admission(got.current).count == 4
    assert got.asking is None
    # a Kueue without the feature gate admits the ask and leaves the first: superseded
    got = sort_slices([workload(0, count=1), workload(1, count=4)])
    assert got.current is not None and admission(got.current).count == 4
    assert [w["metadata"]["name"] for w in got.superseded] == [slice_name("train", "u-1", 0)]
    assert sort_slices([workload(0, 1, finished="Succeeded")]).current is None


def test_a_job_asks_for_what_the_queue_has_free_once_it_uses_all_it_was_admitted() -> None:
    adm = Admission(queue="team-a", count=1)
    free = QueueUsage(in_use=2, nominal=8)  # 6 GPUs free: 3 replicas of 2
    assert growth_count(adm, SPEC, running=1, usage=free) == 4
    assert growth_count(adm, SPEC, running=1, usage=QueueUsage(in_use=6, nominal=8)) == 2
    assert growth_count(adm, SPEC, running=1, usage=QueueUsage(in_use=7, nominal=8)) is None
    assert growth_count(adm, SPEC, running=0, usage=free) is None  # adl would not use more
    full = Admission(queue="team-a", count=4)
    assert growth_count(full, SPEC, running=4, usage=free) is None
    assert growth_count(adm, SPEC, running=1, usage="its ClusterQueue x does not exist") is None


def test_a_replacement_names_the_slice_it_replaces_and_asks_for_an_exact_count() -> None:
    ask = replacement_manifest(body(), SPEC, workload(0, count=1), 3, GPU)
    meta = ask["metadata"]
    assert meta["name"] == slice_name("train", "u-1", 1) != slice_name("train", "u-1", 0)
    assert meta["annotations"] == {
        REPLACEMENT_FOR: f"ns/{slice_name('train', 'u-1', 0)}",
        ANNOTATION_SLICE: "1",
    }
    assert meta["labels"][LABEL_JOB_UID] == "u-1"
    (pod_set,) = ask["spec"]["podSets"]
    assert pod_set["count"] == 3 and "minCount" not in pod_set  # Kueue: no partial slices


class SliceStore:
    """The KubeStore calls of the Kueue sync, on a namespace's Workloads."""

    def __init__(self, *workloads: dict[str, Any]) -> None:
        self.workloads = list(workloads)
        self.cluster = {
            "spec": {
                "resourceGroups": [
                    {"flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": "8"}]}]}
                ]
            },
            "status": {
                "flavorsReservation": [{"name": "f", "resources": [{"name": GPU, "total": "2"}]}]
            },
        }
        self.patched: dict[str, list[dict[str, Any]]] = {}

    def list_job_workloads(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        return [w for w in self.workloads if w["metadata"]["labels"].get(LABEL_JOB_UID) == uid]

    def list_workloads(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.workloads)

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((w for w in self.workloads if w["metadata"]["name"] == name), None)

    def create_workload(self, obj: dict[str, Any]) -> bool:
        self.workloads.append(obj)
        return True

    def patch_workload_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patched.setdefault(name, []).append(patch)

    def get_local_queue(self, namespace: str, name: str) -> dict[str, Any]:
        return {"spec": {"clusterQueue": "cq"}}

    def get_cluster_queue(self, name: str) -> dict[str, Any]:
        return self.cluster


def test_a_job_that_uses_its_whole_admission_asks_once_and_the_round_counts_the_newest() -> None:
    store = SliceStore(workload(0, count=1))
    current, adm = ensure_workload(store, body(running=1), SPEC, GPU)  # type: ignore[arg-type]
    assert adm is not None and adm.ceiling == 1  # the ask changes nothing until admitted
    assert current is not None and current["metadata"]["name"] == slice_name("train", "u-1", 0)
    asks = store.workloads[1:]
    assert [w["spec"]["podSets"][0]["count"] for w in asks] == [4]  # 6 GPUs free: 3 more
    ensure_workload(store, body(running=1), SPEC, GPU)  # type: ignore[arg-type]
    assert len(store.workloads) == 2  # one ask at a time
    # not using all it was admitted: no ask
    lone = SliceStore(workload(0, count=2))
    ensure_workload(lone, body(running=1), SPEC, GPU)  # type: ignore[arg-type]
    assert len(lone.workloads) == 1

    # Kueue admits the ask: the round's ceiling is its count
    store.workloads[1]["status"] = workload(1, count=4)["status"]
    store.workloads[0]["status"]["conditions"].append(
        {"type": "Finished", "status": "True", "reason": "WorkloadSliceReplaced"}
    )
    assert admissions(store, [body()])["u-1"].ceiling == 4  # type: ignore[arg-type]


def test_finishing_or_evicting_the_job_withdraws_its_ask() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    store = SliceStore(workload(0, count=1), workload(1))
    done = AdaptiveJobStatus(phase=Phase.SUCCEEDED)
    settle_workload(store, store.workloads[0], done, False, now)  # type: ignore[arg-type]
    ask = slice_name("train", "u-1", 1)
    (withdrawn,) = store.patched[ask]
    assert withdrawn["status"]["conditions"][-1]["reason"] == "Withdrawn"

    evicted = workload(0, count=1)
    evicted["status"]["conditions"] += [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted"},
        {"type": "QuotaReserved", "status": "True"},
    ]
    store = SliceStore(evicted, workload(1))
    running = AdaptiveJobStatus(phase=Phase.PENDING)
    settle_workload(store, evicted, running, False, now)  # type: ignore[arg-type]
    assert set(store.patched) == {ask, slice_name("train", "u-1", 0)}


def test_a_first_workload_made_before_the_label_still_counts_beside_an_ask() -> None:
    first = workload(0, count=1)
    del first["metadata"]["labels"][LABEL_JOB_UID]  # made by an operator before this one
    store = SliceStore(first, workload(1))
    current, adm = ensure_workload(store, body(running=1), SPEC, GPU)  # type: ignore[arg-type]
    assert current == first and adm is not None and adm.ceiling == 1
    assert len(store.workloads) == 2  # an ask is under way: no second one


def test_a_slice_kueue_just_replaced_counts_until_its_replacement_is_admitted() -> None:
    """Kueue finishes the old slice, then writes the new one's admission: in between the job
    keeps its admission (not a moment at 0, which would stop it), for ``BRIDGE_S`` at most."""
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    old = workload(0, count=1, finished="WorkloadSliceReplaced")
    old["status"]["conditions"][-1]["lastTransitionTime"] = "2026-01-01T11:59:55Z"
    got = sort_slices([old, workload(1)], now=now)
    adm = got.admission()
    assert got.bridging and adm is not None and adm.ceiling == 1
    later = datetime(2026, 1, 1, 12, 1, tzinfo=UTC)  # the replacement's admission never came
    adm = sort_slices([old, workload(1)], now=later).admission()
    assert adm is not None and adm.ceiling == 0
