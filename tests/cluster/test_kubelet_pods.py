"""The process kubelet's pure rules (no control plane): env resolution, mount rewriting, argv,
start errors and the statuses it reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubelet_pods as S
import pytest
from kubelet_claims import volume_for
from kubelet_nodes import NodeSpec, node_status

PROJECT = Path(__file__).resolve().parents[2]


def _pod(**container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-g1-0", "namespace": "team", "uid": "u-1", "labels": {"a": "b"}},
        "spec": {
            "nodeName": "n1",
            "hostname": "job-g1-0",
            "containers": [{"name": "trainer", **container}],
        },
    }


def _lookup(store: dict[str, dict[str, str]]) -> S.DataLookup:
    def read(namespace: str, name: str) -> dict[str, str]:
        if f"{namespace}/{name}" not in store:
            raise S.ConfigError(f'secret "{name}" not found')
        return store[f"{namespace}/{name}"]

    return read


SOURCES = S.EnvSources(
    pod_ip="10.200.0.7",
    host_ip="10.200.0.1",
    secret=_lookup({"team/s": {"token": "t0k"}}),
    config_map=_lookup({"team/cm": {"LEVEL": "debug", "MODE": "fast"}}),
)


def test_env_resolves_every_source_kind_in_order() -> None:
    pod = _pod(
        envFrom=[{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        env=[
            {"name": "A", "value": "plain"},
            {"name": "B", "value": "$(A)-x-$$(A)"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
            {"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            {"name": "LVL", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "LEVEL"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": True}},
            },
        ],
    )
    env = S.resolve_env(pod, SOURCES)
    assert env == {
        "CM_LEVEL": "debug",
        "CM_MODE": "fast",
        "A": "plain",
        "B": "plain-x-$(A)",
        "POD": "job-g1-0",
        "NS": "team",
        "UID": "u-1",
        "NODE": "n1",
        "IP": "10.200.0.7",
        "HOST": "10.200.0.1",
        "LBL": "b",
        "TOK": "t0k",
        "LVL": "debug",
    }


@pytest.mark.parametrize(
    "ref, message",
    [
        ({"secretKeyRef": {"name": "gone", "key": "k"}}, 'secret "gone" not found'),
        ({"secretKeyRef": {"name": "s", "key": "nope"}}, "couldn't find key nope"),
        ({"fieldRef": {"fieldPath": "spec.containers"}}, "unsupported fieldRef"),
    ],
)
def test_a_missing_source_is_a_config_error(ref: dict[str, Any], message: str) -> None:
    with pytest.raises(S.ConfigError, match=message):
        S.resolve_env(_pod(env=[{"name": "X", "valueFrom": ref}]), SOURCES)


def test_resource_field_ref_rounds_cpu_up_and_bounds_the_divisor() -> None:
    pod = _pod(
        resources={"limits": {"cpu": "1500m", "nvidia.com/gpu": "2"}},
        env=[
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {
                "name": "MILLI",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}},
            },
            {
                "name": "GPU",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}},
            },
        ],
    )
    assert S.resolve_env(pod, SOURCES) == {"CPU": "2", "MILLI": "1500", "GPU": "2"}


def test_mount_paths_are_rewritten_in_env_and_args_but_not_inside_other_words(
    tmp_path: Path,
) -> None:
    pod = _pod(
        command=["python", "train.py", "--ckpt=/adl/checkpoint/team/job"],
        args=["/var/run/adl/token", "/adl/checkpointing", "x/adl/checkpoint"],
        volumeMounts=[
            {"name": "ck", "mountPath": "/adl/checkpoint"},
            {"name": "tok", "mountPath": "/var/run/adl/"},
            {"name": "sub", "mountPath": "/adl/checkpoint/team", "subPath": "deep"},
        ],
    )
    dirs = {"ck": tmp_path / "claim", "tok": tmp_path / "secret", "sub": tmp_path / "other"}
    mounts = S.mounts_of(pod, dirs)
    env = {"ADL_CHECKPOINT_DIR": "/adl/checkpoint/x", "ADL_TOKEN_FILE": "/var/run/adl/token"}
    launch = S.container_launch(pod, env, mounts, python="/venv/bin/python", project=PROJECT)
    assert launch.argv == [
        "/venv/bin/python",
        "train.py",
        f"--ckpt={tmp_path}/other/deep/job",  # the nested mount wins
        f"{tmp_path}/secret/token",
        "/adl/checkpointing",
        "x/adl/checkpoint",
    ]
    assert launch.env["ADL_CHECKPOINT_DIR"] == f"{tmp_path}/claim/x"
    assert launch.env["ADL_TOKEN_FILE"] == f"{tmp_path}/secret/token"
    assert launch.env["PATH"].startswith("/venv/bin:")
    assert launch.env["PYTHONPATH"] == str(PROJECT)
    assert launch.cwd == PROJECT


def test_a_subpath_must_stay_in_its_volume(tmp_path: Path) -> None:
    pod = _pod(volumeMounts=[{"name": "v", "mountPath": "/m", "subPath": "../etc"}])
    with pytest.raises(S.ConfigError, match="inside the volume"):
        S.mounts_of(pod, {"v": tmp_path})


def test_an_unknown_program_cannot_start_and_a_known_one_can() -> None:
    missing = S.container_launch(
        _pod(command=["no-such-program-adl"]), {}, [], python=sys.executable, project=PROJECT
    )
    assert S.executable(missing) is None
    found = S.container_launch(
        _pod(command=["python", "-c", "pass"]), {}, [], python=sys.executable, project=PROJECT
    )
    assert S.executable(found) == sys.executable
    status = S.start_error_status(_pod(), "exec: not found")
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert (status["phase"], term["exitCode"], term["reason"]) == ("Failed", 128, "StartError")


@pytest.mark.parametrize(
    "returncode, code, phase, reason",
    [(0, 0, "Succeeded", "Completed"), (143, 143, "Failed", "Error"), (-9, 137, "Failed", "Error")],
)
def test_terminated_status_carries_the_exit_code(
    returncode: int, code: int, phase: str, reason: str
) -> None:
    status = S.terminated_status(_pod(), code=S.exit_code(returncode), started=S.now(), pid=5)
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert (status["phase"], term["exitCode"], term["reason"]) == (phase, code, reason)


def test_running_status_is_ready_with_the_pod_address() -> None:
    status = S.running_status(_pod(), pod_ip="10.200.0.9", host_ip="10.200.0.1", pid=3, started="t")
    assert status["podIP"] == "10.200.0.9" and status["phase"] == "Running"
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "True"
    assert status["containerStatuses"][0]["state"] == {"running": {"startedAt": "t"}}


def test_a_claim_gets_a_volume_bound_to_it_alone(tmp_path: Path) -> None:
    claim = {
        "metadata": {"name": "job-checkpoint", "namespace": "team", "uid": "c-1"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}},
    }
    pv = volume_for(claim, tmp_path)
    assert pv["spec"]["claimRef"]["uid"] == "c-1"
    assert pv["spec"]["capacity"] == {"storage": "2Gi"}
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["storageClassName"] == ""
    assert pv["spec"]["hostPath"]["path"] == str(tmp_path)


def test_a_node_offers_its_slots_and_is_ready() -> None:
    from datetime import UTC, datetime

    status = node_status(NodeSpec("n1", 4), "10.200.0.1", datetime.now(UTC))
    assert status["allocatable"]["nvidia.com/gpu"] == "4"
    cpu = node_status(NodeSpec("n2", 3, slot_resource="cpu"), "10.200.0.1", datetime.now(UTC))
    assert cpu["allocatable"]["cpu"] == "3"
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
