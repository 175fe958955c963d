"""Submission checks of the Kubernetes CLI backend: refuse jobs that could never run."""

from __future__ import annotations

from adl.models import AdaptiveJobSpec
from adl.operator.client import preflight


def spec(image: str | None = "reg.io/team/train:1.0", command: bool = True, **kw: object):
    trainer: dict[str, object] = {"name": "t"}
    if image is not None:
        trainer["image"] = image
    if command:
        trainer["command"] = ["python", "train.py"]
    return AdaptiveJobSpec.model_validate({"template": {"spec": {"containers": [trainer]}}, **kw})


def test_a_good_job_passes() -> None:
    assert (
        preflight(
            "bert-1",
            spec(checkpoint={"storageClass": "fast"}),
            storage_classes=["fast", "slow"],
            node_gpus=[8, 8],
        )
        == []
    )


def test_unknown_storage_class_is_named_with_the_alternatives() -> None:
    (err,) = preflight(
        "j", spec(checkpoint={"storageClass": "fsat"}), storage_classes=["fast"], node_gpus=None
    )
    assert "'fsat' does not exist" in err and "fast" in err


def test_image_and_command() -> None:
    assert any(
        "image is required" in e
        for e in preflight("j", spec(image=None), storage_classes=None, node_gpus=None)
    )
    assert any(
        "not a valid image" in e
        for e in preflight("j", spec(image="Bad Image!"), storage_classes=None, node_gpus=None)
    )
    assert any(
        "command is required" in e
        for e in preflight(
            "j", spec(command=False, maxReplicas=4), storage_classes=None, node_gpus=None
        )
    )
    assert (
        preflight("j", spec(command=False, maxReplicas=1), storage_classes=None, node_gpus=None)
        == []
    )


def test_gpu_sizes_against_the_cluster() -> None:
    assert any(
        "largest node has 4" in e
        for e in preflight("j", spec(gpusPerReplica=8), storage_classes=None, node_gpus=[4, 4])
    )
    assert any(
        "exceeds the cluster's 8 GPUs" in e
        for e in preflight(
            "j", spec(minReplicas=5, gpusPerReplica=2), storage_classes=None, node_gpus=[4, 4]
        )
    )
    assert (
        preflight(
            "j",
            spec(gpusPerReplica=0, minReplicas=50, maxReplicas=50),
            storage_classes=None,
            node_gpus=[],
        )
        == []
    )


def test_names() -> None:
    assert preflight("Bad_Name", spec(), storage_classes=None, node_gpus=None)
    assert preflight("a" * 46, spec(), storage_classes=None, node_gpus=None)


def test_unreachable_cluster_is_one_clear_error() -> None:
    """No API server behind the kube context: a BackendError naming it, not a traceback."""
    import socket

    import pytest
    from kubernetes import client

    from adl.jobs_api import BackendError
    from adl.operator.client import KubernetesBackend

    with socket.socket() as s:  # a port nobody listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{port}"
        cfg.retries = 0
        backend = KubernetesBackend(api=client.ApiClient(cfg))
        with pytest.raises(BackendError, match=f"cannot reach the Kubernetes API at {cfg.host}"):
            backend.submit("j", "default", spec())
        with pytest.raises(BackendError, match="cannot reach"):
            backend.list()


def test_existing_checkpoint_claim_must_exist() -> None:
    job = spec(checkpoint={"claimName": "ckpt"})
    (err,) = preflight("j", job, storage_classes=None, node_gpus=None, claims=["other"])
    assert "checkpoint claim 'ckpt' does not exist" in err
    assert preflight("j", job, storage_classes=None, node_gpus=None, claims=["ckpt"]) == []
    assert preflight("j", job, storage_classes=None, node_gpus=None, claims=None) == []
