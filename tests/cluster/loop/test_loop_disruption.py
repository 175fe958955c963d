"""A node that is about to go away (issue 31, "Disruption handling", scenario 4 and the taints
of an autoscaler or a termination handler), on the real control plane with the process
kubelet, under a 2-replica job (``disruption_support``: it grows to both nodes and holds there
until the disruption).

The operator's rounds are far apart here (``QUIET_ROUNDS``): what moves the job is the node's
mark, seen by the operator's node watch, not a round that happens to come.

- a taint alone (``karpenter.sh/disrupted:NoSchedule``, as Karpenter sets it before it drains;
  GKE's and cluster-autoscaler's handlers do the same with theirs), with nobody evicting
  anything: adl stops the group gracefully at once, it checkpoints, and the job goes on at one
  replica on the other node;
- a drain (``kubectl drain``'s two steps: a cordon, then each pod on the node evicted through
  the Eviction API): the same.

In each the job finishes with exactly what an undisturbed run prints, resumed from the
checkpoint of the stop, and its ``NodeDisrupted`` event says why it moved. Each prints the time
from the mark to the committed checkpoint (the goal is under ``NOTICE_S``).
"""

from __future__ import annotations

import time
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
from kubelet import ProcessKubelet
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from loop_support import Jobs, Operators

from adl.operator.pods import disruption_budget_name
from tests.waiting import wait_for

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _evict(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    """What ``kubectl drain`` does to each pod: an Eviction (policy/v1). A pod already gone is
    fine; a refusal (429: a PodDisruptionBudget) raises, for the caller to retry or fail on."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    try:
        core.create_namespaced_pod_eviction(pod, namespace, body)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _start(
    installed_chart: Any,
    adl_operator: Operators,
    adl_cli: Any,
    namespace: str,
    tmp: Path,
    name: str,
    *extra: str,
) -> None:
    adl_operator(installed_chart, extra_args=(QUIET_ROUNDS, *extra)).wait_ready()
    adl_cli("submit", name, "-f", str(held_manifest(tmp, name)), "-n", namespace)


def _details(adl_operator: Operators, jobs: Jobs, name: str) -> Any:
    def details() -> str:
        pods = {
            p.metadata.name: (p.spec.node_name, p.status.phase, p.metadata.deletion_timestamp)
            for p in jobs.pods(name)
        }
        said = events(jobs, name, NODE_DISRUPTED)
        return f"{adl_operator.tails()}\njob: {jobs.status(name)}\npods: {pods}\nsaid: {said}"

    return details


def test_a_disruption_taint_moves_the_job_off_its_node_at_once_with_a_checkpoint(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    _start(installed_chart, adl_operator, adl_cli, namespace, tmp_path, "tainted")
    details = _details(adl_operator, jobs, "tainted")
    group = grow_and_hold(jobs, "tainted", details)
    doomed = next(p for p in jobs.pods("tainted") if p.metadata.name.endswith(f"g{group}-1"))
    node = doomed.spec.node_name
    survivor = next(n for n in kubelet.node_names if n != node)
    try:
        t0 = time.monotonic()
        jobs.core.patch_node(node, {"spec": {"taints": [DISRUPTED]}})
        checkpointed_s = checkpointed_within(jobs, "tainted", group, t0, details)
        moved_to(jobs, "tainted", group, survivor, details)
        moved_s = time.monotonic() - t0
        print(
            f"taint karpenter.sh/disrupted on {node}: checkpoint committed {checkpointed_s:.1f} s "
            f"after it, the job running on {survivor} {moved_s:.1f} s after it"
        )
        assert checkpointed_s < NOTICE_S, checkpointed_s
        said_disrupted(jobs, "tainted", node, "karpenter.sh/disrupted", details)
        # and `adl describe` shows it among the job's events
        described = adl_cli("describe", "tainted", "-n", namespace).stdout
        assert NODE_DISRUPTED in described and node in described, described
        finished_exactly(jobs, "tainted", group, node, details)
    finally:
        jobs.core.patch_node(node, {"spec": {"taints": None}})


def test_a_drained_node_moves_the_job_off_it_with_a_checkpoint_and_the_run_is_exact(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    _start(installed_chart, adl_operator, adl_cli, namespace, tmp_path, "drain")
    details = _details(adl_operator, jobs, "drain")
    group = grow_and_hold(jobs, "drain", details)
    # the node of rank 1's pod is drained: rank 0, on the other node, writes the checkpoint
    doomed = next(p for p in jobs.pods("drain") if p.metadata.name.endswith(f"g{group}-1"))
    node = doomed.spec.node_name
    survivor = next(n for n in kubelet.node_names if n != node)
    try:
        t0 = time.monotonic()
        jobs.core.patch_node(node, {"spec": {"unschedulable": True}})
        for pod in jobs.pods("drain"):
            if pod.spec.node_name == node:
                _evict(jobs.core, namespace, pod.metadata.name)
        checkpointed_s = checkpointed_within(jobs, "drain", group, t0, details)
        moved_to(jobs, "drain", group, survivor, details)
        moved_s = time.monotonic() - t0
        print(
            f"drain of {node}: checkpoint committed {checkpointed_s:.1f} s after the cordon, "
            f"the job running on {survivor} {moved_s:.1f} s after it"
        )
        assert checkpointed_s < NOTICE_S, checkpointed_s
        said_disrupted(jobs, "drain", node, "cordoned", details)
        finished_exactly(jobs, "drain", group, node, details)
    finally:
        jobs.core.patch_node(node, {"spec": {"unschedulable": False}})


@pytest.mark.parametrize(
    "installed_chart", [{"scheduler": {"disruptionBudgets": True}}], indirect=True
)
def test_a_drain_the_jobs_budget_refuses_waits_for_adls_checkpointed_move(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    """With ``--disruption-budgets`` (the chart's ``scheduler.disruptionBudgets``) the job has a
    PodDisruptionBudget that refuses every eviction of its workers: ``kubectl drain`` retries
    (429) while adl, which saw the cordon, stops the whole group with a checkpoint and moves it;
    the drain's next eviction then finds no pod of the job on the node. The budget's semantics
    are the API server's and the disruption controller's own."""
    name = "budget"
    _start(
        installed_chart,
        adl_operator,
        adl_cli,
        namespace,
        tmp_path,
        name,
        "--disruption-budgets",
    )
    details = _details(adl_operator, jobs, name)
    policy = client.PolicyV1Api(jobs.core.api_client)
    group = grow_and_hold(jobs, name, details)
    budget = policy.read_namespaced_pod_disruption_budget(disruption_budget_name(name), namespace)
    assert budget.spec.max_unavailable == 0, budget.spec
    assert budget.metadata.owner_references[0].name == name  # deleted with the job
    doomed = next(p for p in jobs.pods(name) if p.metadata.name.endswith(f"g{group}-1"))
    node = doomed.spec.node_name
    survivor = next(n for n in kubelet.node_names if n != node)
    refusals = []

    def drained() -> bool:
        """One pass of ``kubectl drain`` over the node's pods of the job: evict each, a
        refusal (429) noted and retried on the next pass; done when none is left there."""
        left = [
            p
            for p in jobs.pods(name)
            if p.spec.node_name == node and p.metadata.deletion_timestamp is None
        ]
        for pod in left:
            try:
                _evict(jobs.core, namespace, pod.metadata.name)
            except ApiException as exc:
                if exc.status != 429:
                    raise
                refusals.append(exc.reason)
        return not left

    try:
        # before the cordon: the budget refuses an eviction outright
        with pytest.raises(ApiException) as refused:
            _evict(jobs.core, namespace, doomed.metadata.name)
        assert refused.value.status == 429, refused.value
        t0 = time.monotonic()
        jobs.core.patch_node(node, {"spec": {"unschedulable": True}})
        wait_for(drained, timeout=120, what=f"{node} drained of the job's pods", details=details)
        drained_s = time.monotonic() - t0
        checkpointed_s = checkpointed_within(jobs, name, group, t0, details)
        moved_to(jobs, name, group, survivor, details)
        print(
            f"drain of {node} under the job's budget: {len(refusals)} evictions refused, the "
            f"node free of the job {drained_s:.1f} s after the cordon, checkpoint committed "
            f"{checkpointed_s:.1f} s after it"
        )
        assert checkpointed_s < NOTICE_S, checkpointed_s
        said_disrupted(jobs, name, node, "cordoned", details)
        finished_exactly(jobs, name, group, node, details)
    finally:
        jobs.core.patch_node(node, {"spec": {"unschedulable": False}})
