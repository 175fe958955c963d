"""Opt-in end-to-end suite on a real cluster: install the chart, run an AdaptiveJob, uninstall.

Skipped unless ``ADL_E2E_KUBECONFIG`` names a kubeconfig (see the README's "End-to-end tests on
a real cluster"). Images come from ``ADL_E2E_OPERATOR_IMAGE`` (built from ``Dockerfile``) and
``ADL_E2E_JOB_IMAGE`` (built from ``Dockerfile.job``); the example job needs no GPU.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import WaitTimeout, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.environ.get("ADL_E2E_KUBECONFIG"),
        reason="needs a real cluster: set ADL_E2E_KUBECONFIG (opt-in e2e suite)",
    ),
]

CHART = Path(__file__).resolve().parents[2] / "charts" / "adl"
TIMEOUT_S = float(os.environ.get("ADL_E2E_TIMEOUT", "600"))

# A worker that checks the environment adl stamped and trains a toy model for a few steps.
JOB_SCRIPT = """
import os, sys
need = ["ADL_JOB", "ADL_GROUP", "ADL_RANK", "ADL_WORLD_SIZE", "ADL_MASTER_ADDR",
        "ADL_CHECKPOINT_DIR", "ADL_API_URL", "ADL_TOKEN_FILE"]
missing = [k for k in need if not os.environ.get(k)]
assert not missing, missing
assert open(os.environ["ADL_TOKEN_FILE"]).read().strip()
import torch
w = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
target = torch.arange(4.0)
for step in range(50):
    loss = ((w - target) ** 2).sum()
    opt.zero_grad(); loss.backward(); opt.step()
print("final loss", float(loss), flush=True)
sys.exit(0 if float(loss) < 1e-3 else 1)
"""


def _images() -> tuple[str, str]:
    op = os.environ.get("ADL_E2E_OPERATOR_IMAGE", "")
    job = os.environ.get("ADL_E2E_JOB_IMAGE", "")
    if not op or not job:
        pytest.fail("set ADL_E2E_OPERATOR_IMAGE and ADL_E2E_JOB_IMAGE (see README)")
    return op, job


@pytest.fixture(scope="module")
def release() -> Iterator[str]:
    import helm_python as helm

    kubeconfig = os.environ["ADL_E2E_KUBECONFIG"]
    os.environ["KUBECONFIG"] = kubeconfig
    op_image, _ = _images()
    repo, _, tag = op_image.rpartition(":")
    namespace = os.environ.get("ADL_E2E_NAMESPACE", "adl-e2e")
    # On a cluster without GPUs, CPU cores are the scheduler's slots.
    slot = os.environ.get("ADL_E2E_SLOT_RESOURCE", "cpu")
    values = {
        "image": {"repository": repo, "tag": tag},
        "scheduler": {"interval": 5, "gpuResource": slot},
    }
    name = f"adl-e2e-{uuid.uuid4().hex[:6]}"
    with helm.Config(kubeconfig_path=kubeconfig, namespace=namespace) as cfg:
        cfg.install(
            CHART,
            name,
            values,
            namespace=namespace,
            create_namespace=True,
            wait="watcher",
            timeout=300,
        )
        try:
            yield namespace
        finally:
            cfg.uninstall(name, wait="watcher", timeout=300, ignore_not_found=True)


def test_example_job_runs_to_completion(release: str) -> None:
    from adl.jobs_api import BackendError
    from adl.models import AdaptiveJobSpec
    from adl.operator.client import KubernetesBackend

    _, job_image = _images()
    backend = KubernetesBackend(gpu_resource=os.environ.get("ADL_E2E_SLOT_RESOURCE", "cpu"))
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    # An existing claim (ReadWriteOnce, the default class): the claim adl would make is
    # ReadWriteMany for multi-node groups, which single-node clusters (kind) cannot provision.
    claim = f"{name}-ckpt"
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    backend.core.create_namespaced_persistent_volume_claim(release, pvc)
    spec = AdaptiveJobSpec.model_validate(
        {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": job_image,
                            "command": ["python", "-c", JOB_SCRIPT],
                        }
                    ]
                }
            },
            "minReplicas": 1,
            "maxReplicas": 1,
            "gpusPerReplica": 1,
            "maxRestarts": 1,
            "checkpoint": {"claimName": claim},
        }
    )
    try:
        backend.submit(name, release, spec)
        with contextlib.suppress(WaitTimeout):  # the assertion below says what it was
            wait_for(lambda: backend.get(name, release).status.phase.finished, TIMEOUT_S, every=3)
        view = backend.get(name, release)
        assert view.status.phase == "Succeeded", (view.status, view.events)
        assert view.status.group >= 1 and view.events
        logs = "\n".join(backend.logs(name, release))
        assert "final loss" in logs
    finally:
        with contextlib.suppress(BackendError):
            backend.delete(name, release)
        backend.core.delete_namespaced_persistent_volume_claim(claim, release)
