"""Scenario 2: ``adl submit --backend k8s -f`` of ``examples/synthetic.yaml`` (a longer and a
higher-priority variant) on the real control plane. kube-scheduler binds the worker pods to the
process kubelet's nodes; the workers train (CPU, gloo across pod network namespaces) and report
hints to the operator's API; the adl scheduler grows the job across both nodes, shrinks it when
a second job arrives, and both Succeed. Every resize resumes exactly: the epochs printed by the
job's successive groups are each epoch once, in order, with every sample of every epoch seen
once (what an uninterrupted run prints). The first job runs under ``held_synthetic.py``, which
declares a long run and holds it at one replica until grown and at two until shrunk (the
first time), so the scenario does not depend on how fast the machine trains it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet import ProcessKubelet
from loop_support import (
    EPOCHS,
    SIZE,
    TIMEOUT_S,
    Jobs,
    Operators,
    epoch_records,
    held_variant,
    variant,
)


def test_a_job_grows_across_nodes_shrinks_for_another_and_both_succeed(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    nodes = sorted(kubelet.node_names)
    adl_operator(installed_chart).wait_ready()

    def details() -> str:
        pods = {p.metadata.name: (p.spec.node_name, p.status.phase) for p in jobs.pods("grow")}
        return f"{adl_operator.tails()}\njob: {jobs.status('grow')}\npods: {pods}"

    # held_synthetic.py: grown whatever the machine's speed, and held at two replicas until
    # the second job's arrival shrinks it (so it cannot end before that job comes); grown
    # again once that job is done, it trains on
    grow = held_variant(tmp_path, "grow", epochs=EPOCHS, hold_grown="first")
    adl_cli("submit", "grow", "-f", str(grow), "-n", namespace)
    # grown: two replicas, one on each node, both pods running there. Checked in one poll,
    # status and pods together: on a loaded machine the job may measure two CPU replicas
    # slower than one and shrink by itself, so a later read could see a smaller group
    grown: dict[str, Any] = {}

    def grown_across_nodes() -> bool:
        status = jobs.status("grow")
        placed = {p.spec.node_name for p in jobs.pods("grow") if p.status.phase == "Running"}
        if (
            sorted(status.get("allocation") or []) == nodes
            and status.get("readyReplicas") == 2
            and placed == set(nodes)
        ):
            grown.update(status)
            return True
        return False

    jobs.wait("the job grown across both nodes", grown_across_nodes, TIMEOUT_S, details)
    assert grown["hints"]["perfParams"], "grown on hints the workers reported"

    # a higher tier, one replica: the scheduler must take a GPU from the first job
    late = variant(tmp_path, "late", epochs=5, priority=10, maxReplicas=1)
    adl_cli("submit", "late", "-f", str(late), "-n", namespace)
    jobs.wait(
        "the first job shrunk to make room for the second",
        lambda: (
            len(jobs.status("grow").get("allocation") or []) == 1
            and jobs.status("late").get("readyReplicas") == 1
        ),
        TIMEOUT_S,
        details,
    )
    for job in ("grow", "late"):
        jobs.wait(
            f"{job} Succeeded",
            lambda job=job: jobs.status(job).get("phase") == "Succeeded",
            TIMEOUT_S,
            details,
        )
    final = jobs.status("grow")
    # grown (a group with a pod on each node), then shrunk: three groups
    assert final["restarts"].get("resize", 0) >= 2, final
    second = list(kubelet.logs_dir.glob(f"{namespace}_grow-g*-1.log"))
    assert second, "a group ran a second pod (on the other node)"
    records = epoch_records(kubelet, namespace, "grow")
    # exact resumption: each epoch printed once, in order, every sample seen once per epoch
    assert [r["epoch"] for _, r in records] == list(range(EPOCHS)), records
    assert [r["samples"] for _, r in records] == [SIZE * (e + 1) for e in range(EPOCHS)]
