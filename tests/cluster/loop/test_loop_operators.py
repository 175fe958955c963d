"""Scenarios 3 and 5: the operator dies at a bad moment.

- kill -9 mid-resize: a new operator converges, with no two groups of the job alive at once and
  no checkpoint lost (the epochs printed over the job's life are each epoch once, in order);
- two replicas with peering: the older acts, the other stands by and takes over when it dies.
"""

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


def live_groups(jobs: Jobs, job: str) -> set[str]:
    """Groups with a pod that is not finished (being deleted still counts: it may be saving)."""
    return {
        p.metadata.labels["adl.dev/group"]
        for p in jobs.pods(job)
        if p.status.phase in ("Pending", "Running")
    }


def test_kill_9_mid_resize_converges_without_a_duplicate_group_or_lost_checkpoint(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    first = adl_operator(installed_chart, name="first").wait_ready()
    details = adl_operator.tails
    # held_synthetic.py: grown whatever the machine's speed (its first group waits for it)
    grow = held_variant(tmp_path, "grow", epochs=EPOCHS, hold_grown="never")
    adl_cli("submit", "grow", "-f", str(grow), "-n", namespace)
    seen: list[set[str]] = []

    def resizing() -> bool:
        seen.append(live_groups(jobs, "grow"))
        return jobs.status("grow").get("reason") == "Resizing"

    jobs.wait("the operator resizing the job", resizing, TIMEOUT_S, details)
    first.kill()  # the old group is stopping, the new one not made yet
    adl_operator(installed_chart, name="second").wait_ready()

    def converged() -> bool:
        seen.append(live_groups(jobs, "grow"))
        st = jobs.status("grow")
        return st.get("readyReplicas") == 2 or st.get("phase") == "Succeeded"

    jobs.wait("the new operator finishing the resize", converged, TIMEOUT_S, details)
    jobs.wait(
        "the job Succeeded",
        lambda: (
            (seen.append(live_groups(jobs, "grow")), jobs.status("grow")["phase"])[1] == "Succeeded"
        ),
        TIMEOUT_S,
        details,
    )
    assert all(len(groups) <= 1 for groups in seen), [g for g in seen if len(g) > 1]
    records = epoch_records(kubelet, namespace, "grow")
    assert [r["epoch"] for _, r in records] == list(range(EPOCHS)), records
    assert [r["samples"] for _, r in records] == [SIZE * (e + 1) for e in range(EPOCHS)]


def test_a_standby_operator_takes_over_when_the_active_one_dies(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    assert any(a.startswith("--peering=") for a in installed_chart.operator_args)
    active = adl_operator(installed_chart, name="active").wait_ready()
    standby = adl_operator(installed_chart, name="standby").wait_ready()
    details = adl_operator.tails
    one = variant(tmp_path, "one", epochs=3, maxReplicas=1)
    adl_cli("submit", "one", "-f", str(one), "-n", namespace)
    jobs.wait(
        "the first job Succeeded",
        lambda: jobs.status("one").get("phase") == "Succeeded",
        TIMEOUT_S,
        details,
    )
    key = f"{namespace}/one:"
    assert key in active.log_text() and key not in standby.log_text()

    active.kill()
    two = variant(tmp_path, "two", epochs=3, maxReplicas=1)
    adl_cli("submit", "two", "-f", str(two), "-n", namespace)
    jobs.wait(
        "the second job Succeeded under the standby",
        lambda: jobs.status("two").get("phase") == "Succeeded",
        TIMEOUT_S,
        details,
    )
    assert f"{namespace}/two:" in standby.log_text()
