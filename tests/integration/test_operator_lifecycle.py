"""The real kopf operator against kmock: create, resize, failure, delete, restart mid-resize."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock/operator fixtures)
from operator_harness import Operator, RoundCounter, ScriptedPolicy, objects

from adl.controller.lifecycle import Timing
from adl.operator.store import MERGE, api_client
from tests.waiting import eventually

NS = "default"
KEY = f"{NS}/train"


def job_body(name: str = "train", **spec: Any) -> dict[str, Any]:
    container = {"name": "trainer", "image": "train:1", "command": ["python", "train.py"]}
    return {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {"containers": [container]}}, "maxReplicas": 8, **spec},
    }


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


async def submit(body: dict[str, Any]) -> None:
    await asyncio.to_thread(
        custom().create_namespaced_custom_object, "adl.dev", "v1", NS, "adaptivejobs", body
    )


def status(k8s: Any, name: str = "train") -> dict[str, Any]:
    return objects(k8s, "adaptivejobs")[name].get("status") or {}


def pods_of(k8s: Any, job: str = "train") -> dict[str, dict[str, Any]]:
    return {
        n: p
        for n, p in objects(k8s, "pods").items()
        if p["metadata"]["labels"]["adl.dev/job"] == job
    }


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


async def image_pull_backoff(name: str, message: str) -> None:
    """What the kubelet reports while it retries a failing pull: the pod is bound to its node
    (its GPUs are reserved) and stays Pending; kubelet keeps retrying."""
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": message}}
    body = {
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": waiting,
                    "image": "train:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                }
            ],
        },
    }
    core = client.CoreV1Api(api_client())
    await asyncio.to_thread(core.patch_namespaced_pod_status, name, NS, body, _content_type=MERGE)


async def set_pod_phase(name: str, phase: str, exit_code: int | None = None) -> None:
    state: dict[str, Any] = {"running": {}}
    if exit_code is not None:
        state = {
            "terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}
        }
    body = {
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": state,
                    "image": "train:1",
                    "imageID": "",
                    "ready": phase == "Running",
                    "restartCount": 0,
                }
            ],
        }
    }
    core = client.CoreV1Api(api_client())
    await asyncio.to_thread(core.patch_namespaced_pod_status, name, NS, body, _content_type=MERGE)


async def test_create_makes_pods_and_service(k8s: Any, policy: ScriptedPolicy, operator: Operator):
    policy.answer = {KEY: ["node-a", "node-a", "node-b"]}
    await submit(job_body())

    pods = await eventually(lambda: len(pods_of(k8s)) == 2 and pods_of(k8s), what="2 pods")
    assert set(pods) == {"train-g1-0", "train-g1-1"}
    a, b = pods["train-g1-0"], pods["train-g1-1"]
    assert a["metadata"]["labels"]["adl.dev/group"] == "1"
    owner = a["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "AdaptiveJob" and owner["name"] == "train" and owner["controller"]
    assert env_of(a)["ADL_WORLD_SIZE"] == "3" and env_of(a)["ADL_LOCAL_WORLD_SIZE"] == "2"
    assert env_of(b)["ADL_RANK"] == "2" and env_of(b)["ADL_NUM_NODES"] == "2"
    assert env_of(a)["ADL_JOB"] == KEY and env_of(a)["ADL_GROUP"] == "1"
    assert a["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert a["spec"]["containers"][0]["command"][:3] == ["python", "-m", "adl.client_lib.launch"]
    assert "command" not in b["spec"]["containers"][0] or b["spec"]["containers"][0]["command"] == [
        "python",
        "train.py",
    ]

    volumes = {v["name"]: v for v in a["spec"]["volumes"]}
    assert volumes["adl-token"]["secret"]["secretName"] == "train-adl-token"
    assert volumes["adl-checkpoint"]["persistentVolumeClaim"]["claimName"] == "train-checkpoint"
    mounts = {m["name"]: m["mountPath"] for m in a["spec"]["containers"][0]["volumeMounts"]}
    assert env_of(a)["ADL_TOKEN_FILE"].startswith(mounts["adl-token"] + "/")
    assert env_of(a)["ADL_CHECKPOINT_DIR"].startswith(mounts["adl-checkpoint"] + "/")
    assert a["spec"]["hostname"] == "train-g1-0" and a["spec"]["subdomain"] == "train"
    svc = await eventually(lambda: objects(k8s, "services").get("train"), what="service")
    assert svc["spec"]["clusterIP"] == "None"
    secret = objects(k8s, "secrets")["train-adl-token"]
    token = secret["stringData"]["token"]
    digest = objects(k8s, "adaptivejobs")["train"]["metadata"]["annotations"][
        "adl.dev/token-sha256"
    ]
    assert hashlib.sha256(token.encode()).hexdigest() == digest  # the API checks the hash
    assert "train-checkpoint" in objects(k8s, "persistentvolumeclaims")
    st = await eventually(lambda: status(k8s).get("phase") == "Starting" and status(k8s))
    assert st["group"] == 1 and st["replicas"] == 3

    for name in pods:
        await set_pod_phase(name, "Running")
    await eventually(lambda: status(k8s).get("phase") == "Running", what="Running")
    assert status(k8s)["readyReplicas"] == 3


async def delete_pod(name: str) -> None:
    core = client.CoreV1Api(api_client())
    await asyncio.to_thread(core.delete_namespaced_pod, name, NS)


def alive(k8s: Any) -> set[str]:
    """Pods that have not exited (exited ones stay a while for their logs)."""
    return {
        n
        for n, p in pods_of(k8s).items()
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    }


async def run_group(k8s: Any, names: set[str]) -> None:
    await eventually(lambda: alive(k8s) == names, what=f"pods {names}")
    for name in names:
        await set_pod_phase(name, "Running")
    await eventually(lambda: status(k8s).get("phase") == "Running", what="Running")


async def test_allocation_change_restarts_at_next_group(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    policy.answer = {KEY: ["node-a", "node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})

    policy.answer = {KEY: ["node-a", "node-b", "node-b"]}
    await eventually(lambda: alive(k8s) == {"train-g2-0", "train-g2-1"}, what="group 2")
    pods = pods_of(k8s)
    assert env_of(pods["train-g2-0"])["ADL_GROUP"] == "2"
    assert env_of(pods["train-g2-0"])["ADL_WORLD_SIZE"] == "3"
    assert env_of(pods["train-g2-1"])["ADL_RANK"] == "1"
    assert env_of(pods["train-g2-1"])["ADL_LOCAL_WORLD_SIZE"] == "2"
    assert env_of(pods["train-g2-0"])["ADL_MASTER_ADDR"].startswith("train-g2-0.train.")
    st = status(k8s)
    assert st["group"] == 2 and st["allocation"] == ["node-a", "node-b", "node-b"]
    assert st["restarts"] == {"resize": 1}
    # the old group was deleted, with the spec's grace period, before the new one was created
    deletes = [r for r in list(k8s) if r.method == "DELETE" and r.name == "train-g1-0"]
    creates = [r for r in list(k8s) if r.method == "POST" and "g2-" in str(r.data)]
    assert deletes and creates and deletes[0].id < creates[0].id
    assert deletes[0].params.get("gracePeriodSeconds") == "60"


@pytest.mark.operator_config(timing=Timing(backoff_base_s=1.0))
async def test_failure_backs_off_then_fails_past_max_restarts(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, round_counter: RoundCounter
) -> None:

    policy.answer = {KEY: ["node-a"]}
    await submit(job_body(maxRestarts=1))
    await run_group(k8s, {"train-g1-0"})

    await set_pod_phase("train-g1-0", "Failed", exit_code=3)
    failed_at = asyncio.get_running_loop().time()
    await eventually(lambda: status(k8s).get("restarts") == {"failure": 1}, what="1 failure")
    assert status(k8s)["phase"] == "Restarting"
    await eventually(lambda: alive(k8s) == {"train-g2-0"}, what="group 2 after backoff")
    assert asyncio.get_running_loop().time() - failed_at >= 0.9  # waited for the backoff

    await set_pod_phase("train-g2-0", "Running")
    await set_pod_phase("train-g2-0", "Failed", exit_code=3)
    st = await eventually(lambda: status(k8s).get("phase") == "Failed" and status(k8s))
    assert st["restarts"] == {"failure": 2}
    assert st["reason"] == "Error" and "maxRestarts=1" in st["message"]
    assert "exited with code 3" in st["message"]
    failed = [c for c in st["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["status"] == "True"
    # no third group, even after another backoff period: each tick (1 s apart) runs a round
    # and then looks at the job, so three more rounds span two ticks past the backoff
    await round_counter.more(3)
    assert "train-g3-0" not in alive(k8s) and status(k8s)["group"] == 2


async def test_image_pull_error_surfaces_as_reason(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body(maxRestarts=0))
    await eventually(lambda: alive(k8s) == {"train-g1-0"})
    await image_pull_backoff("train-g1-0", "no such image train:1")
    st = await eventually(lambda: status(k8s).get("phase") == "Failed" and status(k8s))
    assert st["reason"] == "ImagePullError" and "no such image" in st["message"]


async def test_delete_cleans_up(k8s: Any, policy: ScriptedPolicy, operator: Operator) -> None:
    policy.answer = {KEY: ["node-a", "node-b"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0", "train-g1-1"})
    uid = objects(k8s, "adaptivejobs")["train"]["metadata"]["uid"]

    await asyncio.to_thread(
        custom().delete_namespaced_custom_object, "adl.dev", "v1", NS, "adaptivejobs", "train"
    )
    await eventually(lambda: not alive(k8s), what="pods deleted")
    await eventually(lambda: "train" not in objects(k8s, "adaptivejobs"), what="job gone")
    # the rest is garbage-collected by the API server through owner references
    for plural, name in [
        ("services", "train"),
        ("secrets", "train-adl-token"),
        ("persistentvolumeclaims", "train-checkpoint"),
    ]:
        owners = objects(k8s, plural)[name]["metadata"]["ownerReferences"]
        assert [o["uid"] for o in owners] == [uid]


async def test_operator_restarted_mid_resize_converges(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, round_counter: RoundCounter
) -> None:
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})
    await operator.stop()

    # The round had asked for a new size and the operator died right after recording the
    # resize in the status, before stopping group 1.
    policy.answer = {KEY: ["node-b", "node-b"]}
    desired = {"metadata": {"annotations": {"adl.dev/allocation": '["node-b", "node-b"]'}}}
    status_patch = {"status": {"phase": "Restarting", "restarts": {"resize": 1}}}
    for fn, body in [
        (custom().patch_namespaced_custom_object, desired),
        (custom().patch_namespaced_custom_object_status, status_patch),
    ]:
        await asyncio.to_thread(
            fn, "adl.dev", "v1", NS, "adaptivejobs", "train", body, _content_type=MERGE
        )
    first_new = len(list(k8s))
    await operator.start()

    await eventually(lambda: alive(k8s) == {"train-g2-0"}, what="exactly group 2")
    st = status(k8s)
    assert st["group"] == 2 and st["restarts"] == {"resize": 1}
    assert st["allocation"] == ["node-b", "node-b"]
    later = list(k8s)[first_new:]
    creates = [r.id for r in later if r.method == "POST" and r.resource.plural == "pods"]
    delete_g1 = [r.id for r in later if r.method == "DELETE" and r.name == "train-g1-0"]
    assert delete_g1 and creates and delete_g1[0] < min(creates)  # never two groups at once
    names = [r.data["metadata"]["name"] for r in later if r.id in creates]
    assert set(names) == {"train-g2-0"}
    await round_counter.more(2)  # rounds and ticks go on: nothing else is started or stopped
    assert alive(k8s) == {"train-g2-0"} and status(k8s)["group"] == 2


def posted_events(k8s: Any, name: str = "train") -> list[dict[str, Any]]:
    """Kubernetes Events the operator posted about the job, in order."""
    return [
        r.data
        for r in list(k8s)
        if r.method == "POST"
        and r.resource is not None
        and r.resource.plural == "events"
        and isinstance(r.data, dict)
        and r.data.get("involvedObject", {}).get("name") == name
    ]


def conditions(k8s: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status(k8s).get("conditions") or []}


async def test_transitions_post_events_and_set_conditions(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})
    cond = conditions(k8s)
    assert cond["Scheduled"]["status"] == "True" and cond["Running"]["status"] == "True"
    assert cond["Failed"]["status"] == "False" and cond["Complete"]["status"] == "False"
    reasons = lambda: [e["reason"] for e in posted_events(k8s)]  # noqa: E731
    await eventually(lambda: {"Starting", "Running"} <= set(reasons()), what="events")
    started = next(e for e in posted_events(k8s) if e["reason"] == "Starting")
    assert started["type"] == "Normal" and "group 1" in started["message"]
    assert started["involvedObject"]["kind"] == "AdaptiveJob"

    policy.answer = {KEY: ["node-b", "node-b"]}  # resize: an event and a condition change
    await eventually(lambda: "Resizing" in reasons(), what="Resizing event")
    await run_group(k8s, {"train-g2-0"})
    assert [r for r in reasons() if r == "Starting"] == ["Starting", "Starting"]

    await set_pod_phase("train-g2-0", "Succeeded", exit_code=0)
    st = await eventually(lambda: status(k8s).get("phase") == "Succeeded" and status(k8s))
    assert conditions(k8s)["Complete"]["status"] == "True" and st["completionTime"]
    assert conditions(k8s)["Running"]["status"] == "False"
    await eventually(lambda: "Succeeded" in reasons(), what="Succeeded event")


@pytest.mark.operator_config(timing=Timing(pending_timeout_s=1.5), starting_recheck_s=0.2)
async def test_unschedulable_pod_is_a_reason_then_a_failure(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, monkeypatch: Any
) -> None:
    """A pod stuck Pending sends no more events; the job must still fail with the reason."""

    policy.answer = {KEY: ["node-a"]}
    await submit(job_body(maxRestarts=0))
    await eventually(lambda: alive(k8s) == {"train-g1-0"})
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    core = client.CoreV1Api(api_client())
    body = {"status": {"phase": "Pending", "conditions": [scheduled]}}
    await asyncio.to_thread(
        core.patch_namespaced_pod_status, "train-g1-0", NS, body, _content_type=MERGE
    )
    st = await eventually(lambda: status(k8s).get("reason") == "Unschedulable" and status(k8s))
    assert st["phase"] == "Starting" and message in st["message"]
    # no further pod events: the timer re-reads the Starting job and the timeout fails it
    st = await eventually(
        lambda: status(k8s).get("phase") == "Failed" and status(k8s), timeout=10, what="Failed"
    )
    assert st["reason"] == "Unschedulable" and message in st["message"]
    assert "not running after" in st["message"]
    await eventually(lambda: not alive(k8s) or None, what="the pending pod deleted")


async def test_invalid_spec_fails_with_the_reason_and_is_never_scheduled(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, round_counter: RoundCounter
) -> None:
    """A spec the API server's schema would reject (kmock enforces none) is Failed with the
    validation message; the round leaves it out and no pod is made."""
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body(minReplicas=5, maxReplicas=2))
    st = await eventually(lambda: status(k8s).get("phase") == "Failed" and status(k8s))
    assert st["reason"] == "InvalidSpec" and "minReplicas" in st["message"]
    assert conditions(k8s)["Failed"]["status"] == "True"
    await eventually(lambda: "InvalidSpec" in [e["reason"] for e in posted_events(k8s)])
    await round_counter.more(2)  # rounds keep running without touching it
    assert pods_of(k8s) == {} and "adl.dev/allocation" not in (
        objects(k8s, "adaptivejobs")["train"]["metadata"].get("annotations") or {}
    )


async def test_suspend_stops_workers_and_resume_starts_the_next_group(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    """spec.suspend (what a queue manager flips): workers stop, GPUs go back, no restart is
    counted; clearing it starts the next group."""
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})

    await set_suspend("train", True)
    await eventually(lambda: status(k8s).get("phase") == "Suspended", what="Suspended")
    await eventually(lambda: not alive(k8s), what="workers stopped")
    st = status(k8s)
    assert st["allocation"] == [] and not st.get("restarts")
    assert conditions(k8s)["Suspended"]["status"] == "True"

    await set_suspend("train", False)
    await run_group(k8s, {"train-g2-0"})
    st = status(k8s)
    assert st["group"] == 2 and not (st.get("restarts") or {}).get("failure")
    assert conditions(k8s)["Suspended"]["status"] == "False"


async def test_a_suspension_forgets_the_answer_the_job_ran_on(
    k8s: Any, policy: ScriptedPolicy, operator: Operator
) -> None:
    """A round that read the job while it was suspended may still be running when the job is
    resumed; the resume must not start a group on the answer from before the suspension (that
    round would take it back: a needless restart, seen once in CI). So the suspension itself
    clears the answer, not only the round after it."""
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})
    await submit(job_body("other"))  # so that the rounds call the (held) policy
    await eventually(lambda: allocation_annotation(k8s, "other") == "[]", 30, "other waits")
    # Rounds from here on block in the policy until the gate opens: the slow round lasts exactly
    # as long as the test needs, however loaded the machine (a fixed delay raced the test).
    gate = policy.gate = threading.Event()
    try:
        await set_suspend("train", True)
        await eventually(lambda: status(k8s).get("phase") == "Suspended", 30, "Suspended")
        await eventually(policy.busy.is_set, 30, "the suspension's round running")
        # the held round can write nothing, so this clearing is the suspension's own doing
        await eventually(lambda: allocation_annotation(k8s, "train") == "[]", 30, "answer cleared")
        assert policy.busy.is_set()
        # resumed while that round still runs (kopf handles the resume once it is over)
        await set_suspend("train", False)
    finally:
        gate.set()
    await run_group(k8s, {"train-g2-0"})
    # A round that starts after group 2 runs, and then the next one, have both finished: every
    # round that read the job before its resume is over, and none took the GPU back.
    seen = policy.calls
    await eventually(lambda: policy.calls >= seen + 2, 30, "two later rounds")
    st = status(k8s)
    assert st["phase"] == "Running" and st["group"] == 2, st
    assert alive(k8s) == {"train-g2-0"}


def allocation_annotation(k8s: Any, name: str) -> str | None:
    annotations = objects(k8s, "adaptivejobs")[name]["metadata"].get("annotations") or {}
    return annotations.get("adl.dev/allocation")


async def patch_spec(name: str, **spec: Any) -> None:
    await asyncio.to_thread(
        custom().patch_namespaced_custom_object,
        "adl.dev",
        "v1",
        NS,
        "adaptivejobs",
        name,
        {"spec": spec},
        _content_type=MERGE,
    )


async def set_suspend(name: str, value: bool) -> None:
    await patch_spec(name, suspend=value)


async def looked_at_again(k8s: Any, name: str, times: int = 2, since: int | None = None) -> None:
    """Until the operator has read the job's pods ``times`` more times (since request number
    ``since``, else from now): each reconcile reads them, after the round its event may force,
    so a round the job's state would ask for has run by then (a check that nothing happened
    needs no guessed wait)."""
    since = len(list(k8s)) if since is None else since

    def reads() -> int:
        return sum(
            1
            for r in list(k8s)[since:]
            if r.method == "GET"
            and r.resource is not None
            and r.resource.plural == "pods"
            and f"adl.dev/job={name}" in str(r.params.get("labelSelector", ""))
        )

    await eventually(lambda: reads() >= times, 15, what=f"the operator looked at {name} again")


async def queue_behind_a_running_job(k8s: Any, policy: ScriptedPolicy) -> None:
    """'train' runs on the only GPU; 'queued' waits, with its empty answer recorded."""
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})
    await submit(job_body("queued"))
    await eventually(lambda: allocation_annotation(k8s, "queued") == "[]", what="queued waits")
    await eventually(
        lambda: status(k8s, "queued").get("reason") == "WaitingForAllocation", what="its status"
    )
    await looked_at_again(k8s, "queued")  # its events and any rounds they asked for are over
    assert not pods_of(k8s, "queued")


@pytest.mark.parametrize("how", ["finishes", "is suspended", "is deleted"])
@pytest.mark.operator_config(round_interval_s=3600.0)
async def test_a_job_that_gives_its_gpus_back_hands_them_out_at_once(
    k8s: Any,
    policy: ScriptedPolicy,
    operator: Operator,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    """A job's finish, suspension or deletion runs a round: a queued job gets the GPUs without
    waiting for the round interval (an hour here, so only that round can start it)."""
    await queue_behind_a_running_job(k8s, policy)
    policy.answer = {f"{NS}/queued": ["node-a"]}
    calls = policy.calls
    if how == "finishes":
        await set_pod_phase("train-g1-0", "Succeeded", exit_code=0)
        await eventually(lambda: status(k8s).get("phase") == "Succeeded", what="Succeeded")
    elif how == "is suspended":
        await set_suspend("train", True)
        await eventually(lambda: status(k8s).get("phase") == "Suspended", what="Suspended")
    else:
        await asyncio.to_thread(
            custom().delete_namespaced_custom_object, "adl.dev", "v1", NS, "adaptivejobs", "train"
        )
    pods = await eventually(lambda: pods_of(k8s, "queued"), what="the queued job's pods")
    assert set(pods) == {"queued-g1-0"} and policy.calls > calls
    if how == "is deleted":  # the round ran while it was still there, finalizer and all
        assert KEY not in policy.rounds[-1]


@pytest.mark.operator_config(round_interval_s=3600.0)
async def test_a_resumed_job_is_answered_at_once(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resuming runs a round before the job's next group: it need not wait for the round
    interval (an hour here), and it starts on that round's answer."""
    policy.answer = {KEY: ["node-a"]}
    await submit(job_body())
    await run_group(k8s, {"train-g1-0"})
    policy.answer = {}
    await set_suspend("train", True)
    await eventually(lambda: status(k8s).get("phase") == "Suspended", what="Suspended")
    await eventually(lambda: allocation_annotation(k8s, "train") == "[]", what="GPUs given back")
    await eventually(lambda: not alive(k8s), what="workers stopped")
    policy.answer = {KEY: ["node-b"]}
    await set_suspend("train", False)
    await run_group(k8s, {"train-g2-0"})  # with [] recorded, only a round can start it
    assert allocation_annotation(k8s, "train") == '["node-b"]'


@pytest.mark.operator_config(round_interval_s=3600.0)
async def test_a_spec_change_runs_a_round_at_once(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiting job's new bounds may let it in: the round need not wait for the interval
    (an hour here)."""
    await queue_behind_a_running_job(k8s, policy)
    policy.answer = {KEY: ["node-a"], f"{NS}/queued": ["node-b"]}
    await patch_spec("queued", maxReplicas=2)
    pods = await eventually(lambda: pods_of(k8s, "queued"), what="the queued job's pods")
    assert set(pods) == {"queued-g1-0"}


@pytest.mark.operator_config(round_interval_s=3600.0)
async def test_a_job_submitted_suspended_forces_no_round(
    k8s: Any, policy: ScriptedPolicy, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    await queue_behind_a_running_job(k8s, policy)  # a round ran: the interval starts now
    calls = policy.calls
    before = len(list(k8s))
    await submit(job_body("held", suspend=True))
    await eventually(lambda: status(k8s, "held").get("phase") == "Suspended", what="Suspended")
    # the reconcile of its creation (which wrote Suspended) and the one of that status change:
    # only causes wake the operator, so no third look comes unless something changes
    await looked_at_again(k8s, "held", since=before)
    assert policy.calls == calls and "default/held" not in policy.seen
