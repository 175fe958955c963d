"""Issue 31's scenarios 1 and 2 with the real Karpenter (KWOK provider): a cluster with no GPU
node at all. Two jobs are submitted to an operator that asks for capacity
(``--ask-capacity``): it makes one placeholder pod per replica the jobs would put to good use
(``adl.operator.capacity_pods``), Karpenter launches nodes for them, the operator deletes the
placeholders once bound and the jobs start there. The preemptible job lands on spot capacity,
the ``preemptible: false`` job on on-demand. Both finish with what an undisturbed run prints,
nothing is asked any more, and Karpenter's consolidation removes the emptied nodes."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from disruption_support import events
from karpenter_install import (
    CAPACITY_TYPE,
    KARPENTER,
    KWOK_NODES,
    NODEPOOL_LABEL,
    Karpenter,
    node_pool,
)
from kubelet import ProcessKubelet
from kubelet_nodes import NodeSpec
from kubernetes import client
from loop_support import TIMEOUT_S, Jobs, Operators, assert_exact, variant

from adl.contract import LABEL_CAPACITY_FOR
from adl.operator.capacity_sync import REQUESTED

#: Karpenter launching two nodes for the placeholders and the kubelet adopting them (2 busy cores)
PROVISION_TIMEOUT_S = 240.0
EPOCHS = 4


@pytest.fixture
def node_specs() -> list[NodeSpec]:
    """No node of the kubelet's own: it runs the pods of the nodes Karpenter creates."""
    return []


@pytest.fixture
def kubelet_adopts() -> str:
    return KWOK_NODES


def _manifest(tmp: Path, name: str, pool: str, **spec: Any) -> Path:
    path = variant(tmp, name, epochs=EPOCHS, maxReplicas=1, **spec)
    doc = yaml.safe_load(path.read_text())
    # the job's own node requirement: the placeholders carry it, so Karpenter uses this pool
    doc["spec"]["template"]["spec"]["nodeSelector"] = {NODEPOOL_LABEL: pool}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_jobs_on_a_cluster_without_gpus_get_nodes_from_karpenter_spot_first_and_give_them_back(
    karpenter: Karpenter,
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
    admin_api: client.ApiClient,
) -> None:
    custom = client.CustomObjectsApi(admin_api)
    pool = f"cap-{uuid.uuid4().hex[:6]}"
    custom.create_cluster_custom_object(
        *KARPENTER,
        "nodepools",
        node_pool(pool, instance_types=("gpu-1x",), consolidate_after="20s"),
    )
    try:
        assert not jobs.core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items
        adl_operator(installed_chart, extra_args=("--ask-capacity",)).wait_ready()
        t0 = time.monotonic()
        adl_cli("submit", "spot", "-f", str(_manifest(tmp_path, "spot", pool)), "-n", namespace)
        adl_cli(
            "submit",
            "steady",
            "-f",
            str(_manifest(tmp_path, "steady", pool, preemptible=False)),
            "-n",
            namespace,
        )

        def details() -> str:
            nodes = {
                n.metadata.name: (n.metadata.labels or {}).get(CAPACITY_TYPE)
                for n in jobs.core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items
            }
            placeholders = [
                (p.metadata.name, p.spec.node_name, p.status.phase)
                for p in jobs.core.list_namespaced_pod(
                    namespace, label_selector=LABEL_CAPACITY_FOR
                ).items
            ]
            return (
                f"{adl_operator.tails()}\nspot: {jobs.status('spot')}\n"
                f"steady: {jobs.status('steady')}\n"
                f"nodes: {nodes}\nplaceholders: {placeholders}\n{karpenter.tail(30)}"
            )

        def capacity_type_of(job: str) -> str | None:
            """The capacity type of the node the job's first group runs on, once it runs."""
            for pod in jobs.pods(job):
                if pod.spec.node_name and pod.status.phase in ("Running", "Succeeded"):
                    node = jobs.core.read_node(pod.spec.node_name)
                    return str((node.metadata.labels or {}).get(CAPACITY_TYPE))
            return None

        spot_type = jobs.wait(
            "the spot job running", lambda: capacity_type_of("spot"), PROVISION_TIMEOUT_S, details
        )
        steady_type = jobs.wait(
            "the steady job running",
            lambda: capacity_type_of("steady"),
            PROVISION_TIMEOUT_S,
            details,
        )
        print(
            f"both jobs running on Karpenter's nodes {time.monotonic() - t0:.1f} s after "
            "the submits"
        )
        assert (spot_type, steady_type) == ("spot", "on-demand")
        # each job was told what was asked for it, and why
        for job in ("spot", "steady"):
            said = events(jobs, job, REQUESTED)
            assert said and "asked the autoscaler for 1 GPUs" in said[0], said
        for job in ("spot", "steady"):
            jobs.wait(
                f"{job} Succeeded",
                lambda j=job: jobs.status(j).get("phase") == "Succeeded",
                TIMEOUT_S,
                details,
            )
            records = assert_exact(kubelet, namespace, job)
            assert sorted({r["epoch"] for _, r in records}) == list(range(EPOCHS))
        # nothing asked any more, and the emptied nodes consolidated away
        jobs.wait(
            "no placeholder left",
            lambda: (
                not jobs.core.list_namespaced_pod(
                    namespace, label_selector=LABEL_CAPACITY_FOR
                ).items
            ),
            60,
            details,
        )
        jobs.wait(
            f"the nodes of {pool} consolidated away",
            lambda: not jobs.core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items,
            TIMEOUT_S,
            details,
        )
        print(f"the nodes consolidated away {time.monotonic() - t0:.1f} s after the submits")
    finally:
        custom.delete_cluster_custom_object(*KARPENTER, "nodepools", pool)
