"""Issue 31's scenario 3 with the real Karpenter (KWOK provider, ``karpenter`` fixture): a
2-replica job runs on a static node and on a spot node Karpenter launched; the spot node's
NodeClaim is deleted (what Karpenter's interruption controller does on a spot interruption
notice). Karpenter taints the node ``karpenter.sh/disrupted:NoSchedule``, marks the Node for
deletion and drains it through the Eviction API; adl stops the job's group at once, it
checkpoints within the notice, and the job goes on at one replica on the static node and
finishes with exactly what an undisturbed run prints (``disruption_support``). Prints the time
from the NodeClaim's deletion, and from the taint, to the committed checkpoint (the goal is
under 15 s, GKE's notice)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from disruption_support import (
    NODE_DISRUPTED,
    NOTICE_S,
    QUIET_ROUNDS,
    checkpointed_within,
    events,
    finished_exactly,
    grow_and_hold,
    held_manifest,
    moved_to,
    said_disrupted,
)
from karpenter_install import (
    CAPACITY_TYPE,
    GPU,
    KARPENTER,
    KWOK_NODES,
    NODEPOOL_LABEL,
    Karpenter,
    node_pool,
)
from kubelet import ProcessKubelet
from kubelet_nodes import NodeSpec
from kubernetes import client
from loop_support import TIMEOUT_S, Jobs, Operators

DISRUPTED = "karpenter.sh/disrupted"
#: Karpenter launching a node for a pending pod, and the kubelet adopting it (2 busy cores)
PROVISION_TIMEOUT_S = 180.0


@pytest.fixture
def node_specs() -> list[NodeSpec]:
    """One static 1-GPU node (and the kubelet adopts every node Karpenter creates)."""
    return [NodeSpec(f"static-{uuid.uuid4().hex[:4]}", 1)]


@pytest.fixture
def kubelet_adopts() -> str:
    return KWOK_NODES


def _spot_node(jobs: Jobs, karpenter: Karpenter, pool: str) -> str:
    """A 1-GPU spot node of ``pool``, launched by Karpenter for a pod that asks for it and
    adopted by the kubelet; the pod is gone again, the node stays (no consolidation)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "wants-a-node", "namespace": jobs.namespace},
        "spec": {
            "nodeSelector": {NODEPOOL_LABEL: pool, CAPACITY_TYPE: "spot"},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "adl-process-kubelet",
                    "command": ["python", "-c", "import signal; signal.pause()"],
                    "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                }
            ],
        },
    }
    jobs.core.create_namespaced_pod(jobs.namespace, pod)

    def ready_node() -> str | None:
        nodes = jobs.core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items
        for node in nodes:
            ready = any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )
            taints = {t.key for t in node.spec.taints or []}
            if ready and "karpenter.sh/unregistered" not in taints:
                return str(node.metadata.name)
        return None

    name: str = jobs.wait(
        f"a spot node of NodePool {pool}", ready_node, PROVISION_TIMEOUT_S, karpenter.tail
    )
    jobs.core.delete_namespaced_pod("wants-a-node", jobs.namespace, grace_period_seconds=0)
    jobs.wait(
        "the pod that asked for the node gone",
        lambda: (
            not [
                p
                for p in jobs.core.list_namespaced_pod(jobs.namespace).items
                if p.metadata.name == "wants-a-node"
            ]
        ),
        60,
        karpenter.tail,
    )
    return name


def test_a_spot_node_karpenter_disrupts_moves_the_job_off_it_within_the_notice(
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
    pool = f"spot-{namespace}"[:63]
    # consolidation out of the way: only the deletion below disrupts the node
    custom.create_cluster_custom_object(
        *KARPENTER,
        "nodepools",
        node_pool(pool, capacity_types=("spot",), consolidate_after="Never"),
    )
    try:
        spot = _spot_node(jobs, karpenter, pool)
        (static,) = kubelet.static_names
        adl_operator(installed_chart, extra_args=(QUIET_ROUNDS,)).wait_ready()
        adl_cli("submit", "spot", "-f", str(held_manifest(tmp_path, "spot")), "-n", namespace)

        def details() -> str:
            pods = {
                p.metadata.name: (p.spec.node_name, p.status.phase, p.metadata.deletion_timestamp)
                for p in jobs.pods("spot")
            }
            said = events(jobs, "spot", NODE_DISRUPTED)
            return (
                f"{adl_operator.tails()}\njob: {jobs.status('spot')}\npods: {pods}\n"
                f"said: {said}\n{karpenter.tail(30)}"
            )

        group = grow_and_hold(jobs, "spot", details)
        assert {p.spec.node_name for p in jobs.pods("spot")} == {spot, static}
        (claim,) = custom.list_cluster_custom_object(
            *KARPENTER, "nodeclaims", label_selector=f"{NODEPOOL_LABEL}={pool}"
        )["items"]

        t0 = time.monotonic()
        custom.delete_cluster_custom_object(*KARPENTER, "nodeclaims", claim["metadata"]["name"])

        def tainted() -> bool:
            found = jobs.core.list_node(field_selector=f"metadata.name={spot}").items
            taints = (found[0].spec.taints or []) if found else []
            return any(t.key == DISRUPTED for t in taints)

        jobs.wait(f"{DISRUPTED} on {spot}", tainted, 60, details)
        t_taint = time.monotonic()
        checkpointed_s = checkpointed_within(jobs, "spot", group, t0, details)
        moved_to(jobs, "spot", group, static, details)
        moved_s = time.monotonic() - t0
        print(
            f"NodeClaim of {spot} deleted: tainted after {t_taint - t0:.1f} s, checkpoint "
            f"committed {checkpointed_s:.1f} s after the deletion "
            f"({t0 + checkpointed_s - t_taint:.1f} s after the taint was seen), the job running "
            f"on {static} {moved_s:.1f} s after the deletion"
        )
        assert checkpointed_s < NOTICE_S, checkpointed_s
        # Karpenter's own taint names the disruption (it comes before the Node's deletion)
        said_disrupted(jobs, "spot", spot, DISRUPTED, details)
        finished_exactly(jobs, "spot", group, spot, details)
        # the node and its claim went once drained
        jobs.wait(
            f"node {spot} removed",
            lambda: not jobs.core.list_node(field_selector=f"metadata.name={spot}").items,
            TIMEOUT_S,
            details,
        )
    finally:
        custom.delete_cluster_custom_object(*KARPENTER, "nodepools", pool)
