"""Scenarios 4 and 6 on the real control plane with the process kubelet:

- deleting a job: the garbage collector removes its pods, Service, token Secret and claim; the
  same name submitted again waits for them, then starts fresh (a new, empty claim);
- suspend / resume: the workers checkpoint and stop, and the next group resumes where they were;
- a pod whose command cannot start: the kubelet's StartError and message surface on the job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_install import ROOT
from kubelet import ProcessKubelet
from kubelet_nodes import NodeSpec
from kubernetes import client
from loop_support import Jobs, Operators

EXAMPLE = ROOT / "examples" / "synthetic.yaml"
SIZE = 4096
TIMEOUT_S = 240


def one_replica_job(tmp: Path, name: str, command: list[str] | None = None, **spec: Any) -> Path:
    """The example manifest at one replica, long enough to be caught running (200 epochs)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["command"] = command or [
        "python",
        "examples/train_synthetic.py",
        "--epochs",
        "200",
    ]
    doc["spec"].update({"maxReplicas": 1, **spec})
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def epochs_printed(kubelet: ProcessKubelet, namespace: str, pod: str) -> list[dict[str, Any]]:
    text = kubelet.log(namespace, pod)
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"epoch"')]


def owners(obj: Any) -> set[str]:
    return {ref.uid for ref in obj.metadata.owner_references or []}


def children(core: client.CoreV1Api, namespace: str, job: str) -> dict[str, set[str]]:
    """Owner uids of every object the job's name labels: pods, Services, Secrets, claims."""
    selector = f"adl.dev/job={job}"
    out: dict[str, set[str]] = {}
    for kind, call in (
        ("pod", core.list_namespaced_pod),
        ("service", core.list_namespaced_service),
        ("secret", core.list_namespaced_secret),
        ("claim", core.list_namespaced_persistent_volume_claim),
    ):
        for obj in call(namespace, label_selector=selector).items:
            out[f"{kind}/{obj.metadata.name}"] = owners(obj)
    return out


@pytest.fixture
def node_specs() -> list[NodeSpec]:
    """One node is enough: every job here runs one replica."""
    return [NodeSpec("node-l", 1)]


def test_a_deleted_job_is_collected_and_its_name_starts_fresh(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    admin_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    core = client.CoreV1Api(admin_api)
    adl_operator(installed_chart).wait_ready()
    details = adl_operator.tails
    manifest = str(one_replica_job(tmp_path, "gc"))
    adl_cli("submit", "gc", "-f", manifest, "-n", namespace)
    old_uid = jobs.get("gc")["metadata"]["uid"]
    jobs.wait(
        "two epochs of the first job",
        lambda: len(epochs_printed(kubelet, namespace, "gc-g1-0")) >= 2,
        TIMEOUT_S,
        details,
    )
    before = children(core, namespace, "gc")
    assert {k.split("/")[0] for k in before} == {"pod", "service", "secret", "claim"}, before
    assert all(o == {old_uid} for o in before.values()), before

    adl_cli("delete", "gc", "-n", namespace)
    adl_cli("submit", "gc", "-f", manifest, "-n", namespace)
    new_uid = jobs.get("gc")["metadata"]["uid"]
    assert new_uid != old_uid
    overlaps: list[dict[str, set[str]]] = []

    def fresh_pod_running() -> bool:
        now = children(core, namespace, "gc")
        new_pods = [k for k, o in now.items() if k.startswith("pod/") and o == {new_uid}]
        if new_pods and any(old_uid in o for o in now.values()):
            overlaps.append(now)  # a new pod beside an object of the deleted job
        return bool(new_pods) and jobs.status("gc").get("readyReplicas") == 1

    jobs.wait("the new job's pod running", fresh_pod_running, TIMEOUT_S, details)
    assert not overlaps, f"the new job started before the old one's objects were gone: {overlaps}"
    assert all(old_uid not in o for o in children(core, namespace, "gc").values())
    # fresh: a new claim (no checkpoint), so training starts again at epoch 0
    first = jobs.wait(
        "the new job's first epoch",
        lambda: epochs_printed(kubelet, namespace, "gc-g1-0"),
        TIMEOUT_S,
        details,
    )
    assert (first[0]["epoch"], first[0]["samples"]) == (0, SIZE), first


def test_suspend_checkpoints_and_resume_goes_on_from_there(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    adl_operator(installed_chart).wait_ready()
    details = adl_operator.tails
    adl_cli("submit", "sus", "-f", str(one_replica_job(tmp_path, "sus")), "-n", namespace)
    jobs.wait(
        "two epochs before suspending",
        lambda: len(epochs_printed(kubelet, namespace, "sus-g1-0")) >= 2,
        TIMEOUT_S,
        details,
    )
    adl_cli("suspend", "sus", "-n", namespace)
    jobs.wait(
        "Suspended, its pods gone",
        lambda: jobs.status("sus").get("phase") == "Suspended" and not jobs.pods("sus"),
        TIMEOUT_S,
        details,
    )
    done_before = epochs_printed(kubelet, namespace, "sus-g1-0")
    adl_cli("resume", "sus", "-n", namespace)
    group = jobs.wait(
        "running again in a new group",
        lambda: jobs.status("sus").get("readyReplicas") == 1 and jobs.status("sus")["group"] > 1,
        TIMEOUT_S,
        details,
    )
    assert group
    pod = f"sus-g{jobs.status('sus')['group']}-0"
    after = jobs.wait(
        "an epoch of the resumed group",
        lambda: epochs_printed(kubelet, namespace, pod),
        TIMEOUT_S,
        details,
    )
    last = done_before[-1]["epoch"]
    # resumed from the checkpoint the stop wrote: the next epoch, or the one it was inside
    assert after[0]["epoch"] == last + 1, (done_before[-1], after[0])
    assert after[0]["samples"] == SIZE * (last + 2)


def test_a_command_that_cannot_start_surfaces_its_reason_on_the_job(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    adl_operator(installed_chart).wait_ready()
    manifest = one_replica_job(tmp_path, "bad", ["no-such-trainer", "--fast"], maxRestarts=0)
    adl_cli("submit", "bad", "-f", str(manifest), "-n", namespace)
    status = jobs.wait(
        "the job Failed",
        lambda: (s := jobs.status("bad")).get("phase") == "Failed" and s,
        TIMEOUT_S,
        adl_operator.tails,
    )
    assert status["reason"] == "StartError", status
    assert 'exec: "no-such-trainer": executable file not found' in status["message"], status
    shown = adl_cli("describe", "bad", "-n", namespace, check=False).stdout
    assert "StartError" in shown, shown
