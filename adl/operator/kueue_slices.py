"""Growing a queued job past what Kueue first admitted it: Workload slices.

A Workload's admission never grows. A job admitted for fewer replicas than it could use (partial
admission: ``minCount``) asks again with a *replacement* Workload, in the manner of Kueue's
Workload slices (feature gate ``ElasticJobsViaWorkloadSlices``): a new Workload of the job,
annotated ``kueue.x-k8s.io/workload-slice-replacement-for: NAMESPACE/OLD``, asking for the larger
count. Kueue's scheduler counts the old slice's quota as the new one's when it decides, and
once it admits the new one it finishes the old one (reason ``WorkloadSliceReplaced``). The job
runs on the old admission meanwhile: nothing stops while it asks. A replacement has no
``minCount``: Kueue's slices and partial admission are mutually exclusive, so it asks for the
count that fits the queue's free quota when it is made.

Every Workload of a job carries the label ``adl.dev/job-uid`` (one LIST finds them all) and
its slice number in the annotation ``adl.dev/workload-slice`` (0: the first).

Pure functions over API objects; ``adl.operator.kueue_sync`` reads and writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from adl.contract import API_GROUP
from adl.models import AdaptiveJobSpec
from adl.operator.kueue import (
    Admission,
    QueueUsage,
    admission,
    workload_manifest,
    workload_name,
)
from adl.operator.timestamps import parse_time

#: Kueue's annotation naming the Workload a new slice replaces (``namespace/name``)
REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
#: the reason Kueue finishes a replaced slice with
SLICE_REPLACED = "WorkloadSliceReplaced"
#: every Workload of a job: its uid (a LIST with this selector finds the job's slices)
LABEL_JOB_UID = f"{API_GROUP}/job-uid"
#: the slice number of a job's Workload (absent: 0, the first)
ANNOTATION_SLICE = f"{API_GROUP}/workload-slice"


def slice_number(workload: Mapping[str, Any]) -> int:
    raw = ((workload.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SLICE)
    try:
        return max(int(raw), 0) if raw is not None else 0
    except ValueError:
        return 0


def slice_name(job_name: str, uid: str, number: int) -> str:
    """The first slice keeps the name Workloads always had; later ones add ``-sN``."""
    if number == 0:
        return workload_name(job_name, uid)
    return workload_name(f"{job_name}-s{number}", uid)


def labelled_manifest(
    body: Mapping[str, Any], spec: AdaptiveJobSpec, resource: str
) -> dict[str, Any]:
    """The job's first Workload, with the label that finds every slice of the job."""
    manifest = workload_manifest(body, spec, resource)
    manifest["metadata"]["labels"][LABEL_JOB_UID] = body["metadata"]["uid"]
    return manifest


#: seconds a slice Kueue finished as replaced still counts while its replacement is not
#: admitted yet: Kueue finishes the old slice just before it writes the new one's admission
#: (a failed write leaves the old one finished and the new one pending: not for long)
BRIDGE_S = 30.0


@dataclass(frozen=True)
class Slices:
    """A job's Workloads, sorted: the one whose admission is the job's ceiling, and a newer one
    that asks for more and waits (None: no ask under way)."""

    current: dict[str, Any] | None
    asking: dict[str, Any] | None = None
    #: older slices not finished although a newer one is admitted (a Kueue without the feature
    #: gate does not finish them): the operator finishes them, or they hold quota twice
    superseded: tuple[dict[str, Any], ...] = ()
    #: ``current`` is a slice Kueue finished as replaced a moment ago, whose replacement
    #: (``asking``) is not admitted yet: its admission still holds
    bridging: bool = False

    def admission(self) -> Admission | None:
        """What Kueue decided for the job: the current slice's admission (None: none yet)."""
        if self.current is None:
            return None
        adm = admission(self.current)
        return dataclasses.replace(adm, finished=False) if self.bridging else adm


def _replaced_at(workload: Mapping[str, Any]) -> datetime | None:
    """When Kueue finished this slice as replaced (None: it did not)."""
    for cond in (workload.get("status") or {}).get("conditions") or []:
        finished = cond.get("type") == "Finished" and cond.get("status") == "True"
        if finished and cond.get("reason") == SLICE_REPLACED:
            return parse_time(cond.get("lastTransitionTime"))
    return None


def sort_slices(workloads: Sequence[Mapping[str, Any]], now: datetime | None = None) -> Slices:
    """Which of a job's Workloads counts. The newest admitted one that is not finished is the
    current one (older ones are replaced); before any is admitted, the first unfinished one,
    unless Kueue has just finished one as replaced by it (``BRIDGE_S``)."""
    ordered = sorted((dict(w) for w in workloads), key=slice_number)
    live = [w for w in ordered if not admission(w).finished]
    admitted = [w for w in live if admission(w).count > 0 or admission(w).reserved]
    if admitted:
        current = admitted[-1]
        newer = [w for w in live if slice_number(w) > slice_number(current)]
        older = tuple(w for w in live if slice_number(w) < slice_number(current))
        return Slices(current, newer[-1] if newer else None, older)
    now = now or datetime.now(UTC)
    for old in reversed(ordered):
        at = _replaced_at(old)
        newer = [w for w in live if slice_number(w) > slice_number(old)]
        if at is not None and newer and (now - at).total_seconds() < BRIDGE_S:
            return Slices(old, newer[-1], bridging=True)
    if not live:
        return Slices(None)
    return Slices(live[0], live[-1] if len(live) > 1 else None)


def growth_count(
    adm: Admission, spec: AdaptiveJobSpec, running: int, usage: QueueUsage | str | None
) -> int | None:
    """How many replicas a replacement slice should ask for, or None (no ask): the job is
    admitted for fewer than ``maxReplicas``, adl's rounds give it all it was admitted
    (``running``: replicas of the round's answer; fewer means it would not use more), and its
    queue has free nominal quota for at least one more replica."""
    if adm.ceiling == 0 or adm.count >= spec.max_replicas or running < adm.count:
        return None
    if not isinstance(usage, QueueUsage):
        return None
    per_replica = max(spec.gpus_per_replica, 1)
    more = (usage.nominal - usage.in_use) // per_replica
    if more < 1:
        return None
    return min(spec.max_replicas, adm.count + more)


def replacement_manifest(
    body: Mapping[str, Any],
    spec: AdaptiveJobSpec,
    current: Mapping[str, Any],
    count: int,
    resource: str,
) -> dict[str, Any]:
    """A slice that replaces ``current`` with an admission of exactly ``count`` replicas."""
    meta = body["metadata"]
    number = slice_number(current) + 1
    manifest = labelled_manifest(body, spec, resource)
    manifest["metadata"]["name"] = slice_name(meta["name"], meta["uid"], number)
    manifest["metadata"]["annotations"] = {
        REPLACEMENT_FOR: f"{meta['namespace']}/{current['metadata']['name']}",
        ANNOTATION_SLICE: str(number),
    }
    (pod_set,) = manifest["spec"]["podSets"]
    pod_set["count"] = count
    pod_set.pop("minCount", None)  # slices and partial admission exclude each other in Kueue
    return manifest
