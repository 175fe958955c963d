"""What wakes the operator's job reconcile, counted in the API requests it makes (kmock): a
worker's hints report is no cause, a spec change is."""

from __future__ import annotations

import json
from typing import Any

import kmock
import pytest
from operator_harness import *  # noqa: F403  (the kmock/operator fixtures)
from operator_harness import Operator, ScriptedPolicy, objects
from test_operator_lifecycle import KEY, NS, job_body, patch_spec, run_group, status, submit

from adl.models import Hints
from adl.operator.api_store import OperatorApiStore
from adl.operator.crd import GROUP
from adl.operator.store import KubeStore
from tests.waiting import eventually

#: hints reports sent in a row
REPORTS = 5
#: the user agent of the API service's requests in this test (the operator's own are
#: ``adl-operator/...``): the count below is of the operator's alone
API_AGENT = "adl-api-under-test/1"


def operator_requests(k8s: Any, since: int, action: Any, plural: str) -> list[Any]:
    """The operator's ``action`` requests on ``plural`` in ``NS`` from request ``since`` on."""
    return [
        r
        for r in list(k8s)[since:]
        if r.action == action
        and r.resource is not None
        and r.resource.plural == plural
        and r.namespace == NS  # the round lists the pods of all namespaces; a reconcile, NS's
        and r.headers.get("User-Agent", "").startswith("adl-operator/")
    ]


def reconcile_traces(k8s: Any, since: int) -> tuple[int, int]:
    """(job GETs, pod LISTs) of the operator since request ``since``: each reconcile reads
    its job and lists the job's pods."""
    gets = operator_requests(k8s, since, kmock.action.FETCH, "adaptivejobs")
    lists = operator_requests(k8s, since, kmock.action.LIST, "pods")
    return len(gets), len(lists)


async def report(api: OperatorApiStore, batch_size: int) -> None:
    """One hints report, written as the API service writes it."""
    hints = Hints.model_validate({"initBatchSize": 32, "batchSize": batch_size})
    await api.put_hints(KEY, hints)


def handled_spec(k8s: Any) -> dict[str, Any]:
    """The spec kopf last finished handling the job's changes for: kopf writes it into its
    diff base (an annotation under the operator's prefix) once every handler of a change has
    run, the event handler (``on_job_event``) first."""
    meta = objects(k8s, "adaptivejobs")["train"]["metadata"]
    raw = (meta.get("annotations") or {}).get(f"{GROUP}/last-handled-configuration")
    return dict(json.loads(raw).get("spec") or {}) if raw else {}


async def change_spec_and_wait(k8s: Any, priority: int) -> None:
    """Change the job's spec and wait until kopf handled that change. kopf hands one object's
    events to the operator one at a time, in order: every earlier change of the job has then
    been looked at too, and this one reconciled."""
    await patch_spec("train", priority=priority)
    await eventually(
        lambda: handled_spec(k8s).get("priority") == priority, what=f"priority {priority} handled"
    )


@pytest.mark.operator_config(round_interval_s=3600.0)  # rounds only when something forces one
async def test_hints_reports_cause_no_reconcile_and_a_spec_change_does(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})
    store = KubeStore()
    store.api.user_agent = API_AGENT
    api = OperatorApiStore(store, [NS])
    await change_spec_and_wait(k8s, 1)  # the start's own changes are all looked at
    start = len(list(k8s))

    for i in range(1, REPORTS + 1):
        await report(api, 32 * i)
    # what the status shows of the report came with it, without a reconcile
    assert status(k8s)["batchSize"] == 32 * REPORTS
    await change_spec_and_wait(k8s, 2)

    # one reconcile, the spec change's: none for the reports before it
    assert reconcile_traces(k8s, start) == (1, 1)
    assert status(k8s)["phase"] == "Running"
