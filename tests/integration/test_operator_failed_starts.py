"""A pod that could not start (ImagePullBackOff) stays bound to its node with its GPUs: the
operator deletes it when it restarts the job or gives up, so two groups never overlap and a
failed job holds nothing."""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import *  # noqa: F403
from operator_harness import Operator, ScriptedPolicy, objects
from test_operator_lifecycle import KEY, image_pull_backoff, job_body, status, submit

from adl.controller.lifecycle import Timing
from tests.waiting import eventually


def pod_requests(k8s: Any) -> list[tuple[int, str, str]]:
    out = []
    for r in list(k8s):
        if r.resource is None or r.resource.plural != "pods":
            continue
        if r.method == "POST" and isinstance(r.data, dict):
            out.append((r.id, "POST", r.data["metadata"]["name"]))
        elif r.method == "DELETE":
            out.append((r.id, "DELETE", r.name))
    return out


@pytest.mark.operator_config(timing=Timing(backoff_base_s=0.5))
async def test_a_pod_stuck_pulling_its_image_is_deleted_before_the_next_group(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, monkeypatch: Any
) -> None:

    policy.answer = {KEY: ["node-a"]}
    await submit(job_body(maxRestarts=1))
    await eventually(lambda: "train-g1-0" in objects(k8s, "pods"), what="g1-0")
    await image_pull_backoff("train-g1-0", "registry timeout")

    # the failure is counted and, after the backoff, group 2 is created ...
    await eventually(lambda: "train-g2-0" in objects(k8s, "pods"), what="group 2 created")
    reqs = pod_requests(k8s)
    # ... and group 1's pod (bound to node-a, holding its GPU, kubelet still pulling) was
    # deleted before it.
    create_g2 = next(i for i, m, n in reqs if m == "POST" and n == "train-g2-0")
    deleted_g1 = [i for i, m, n in reqs if m == "DELETE" and n == "train-g1-0"]
    assert deleted_g1 and deleted_g1[0] < create_g2, (
        "group 2 was created while group 1's pod was never deleted: "
        f"pods={sorted(objects(k8s, 'pods'))}, requests={reqs}"
    )


async def test_a_failed_job_deletes_its_pod_stuck_pulling_its_image(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body(maxRestarts=0))
    await eventually(lambda: "train-g1-0" in objects(k8s, "pods"), what="g1-0")
    await image_pull_backoff("train-g1-0", "registry timeout")
    await eventually(lambda: status(k8s).get("phase") == "Failed", what="Failed")
    await eventually(
        lambda: "train-g1-0" not in objects(k8s, "pods"),
        what="job is Failed, its GPUs were handed back to the scheduler, yet pod train-g1-0 "
        "(bound to node-a, requesting nvidia.com/gpu) was never deleted",
    )
