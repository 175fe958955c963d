"""Which changes of an AdaptiveJob are causes for a reconcile (pure; ``handlers.on_job_event``).

kopf hands the operator every change of a job, and most of them are not the operator's
business: rank 0 reports hints every few seconds to half a minute (a status patch by the API
service), each round adds the service a running job attained, kopf writes its own bookkeeping
into annotations. A reconcile reads the job and lists its pods, so reacting to all of these
was most of the operator's API load on a busy cluster while it changed nothing.

A change is a cause unless it lies entirely in what this module leaves out of a job's
*essence*: the status fields the API and the round write for others to read (``QUIET_STATUS``),
the object's bookkeeping (resourceVersion, managed fields, generation, finalizers) and kopf's
annotations. Everything else is kept, on purpose more than the reconcile needs to see today:
the spec, the uid (a namesake created again), the deletion timestamp, all labels (the Kueue
queue label), the operator's own annotations (the round's answer) and foreign ones, and the
rest of the status (a phase or conditions written by hand, or by the operator itself: the
reconcile that follows its own write is a no-op, as the lifecycle is a fixed point).

kopf's own change detection (``on.update``) is no fit: its essence drops the whole status and
every annotation under the operator's prefix, the round's answer included.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from adl.contract import ANNOTATION_ALLOCATION, ANNOTATION_TOKEN_HASH, API_GROUP
from adl.controller.status_hints import HINTS_FIELDS
from adl.models import AdaptiveJobStatus


def _wire(field: str) -> str:
    return AdaptiveJobStatus.model_fields[field].alias or field


#: status fields whose change alone causes no reconcile (wire names): the last hints report
#: and what the status shows of it (the API service writes both at once:
#: ``OperatorApiStore.put_hints``), and the service the round accrues for every running job
QUIET_STATUS = frozenset(_wire(f) for f in {"hints", "attained_service_s", *HINTS_FIELDS})

#: the annotations under the operator's prefix that carry state; the rest of the prefix is
#: kopf's (its progress and diff base, kept there by ``handlers.startup``)
OWN_ANNOTATIONS = frozenset({ANNOTATION_ALLOCATION, ANNOTATION_TOKEN_HASH})


def _annotations(meta: Mapping[str, Any]) -> dict[str, Any]:
    own = f"{API_GROUP}/"
    return {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(own) or k in OWN_ANNOTATIONS
    }


def job_essence(body: Mapping[str, Any]) -> dict[str, Any]:
    """What of the job a change must touch to be a cause (see the module's doc)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    return {
        "uid": meta.get("uid"),
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "labels": dict(meta.get("labels") or {}),
        "annotations": _annotations(meta),
        "spec": body.get("spec"),
        "status": {k: v for k, v in status.items() if k not in QUIET_STATUS},
    }


def cause_digest(body: Mapping[str, Any]) -> str:
    """A short fingerprint of ``job_essence``: two bodies with equal digests differ in no
    cause. (kopf's bodies are mappings of plain JSON values: ``default=str`` is a guard.)"""
    text = json.dumps(job_essence(body), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
