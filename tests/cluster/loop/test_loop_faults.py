"""Hard faults of the cluster around a training job (issue 36), on the real control plane with
the process kubelet:

- scenario 3: kube-apiserver stopped for minutes mid-training. The operator process keeps
  running through it (kopf's API retries have no budget that ends the process) and converges
  when the server is back (the worker API writes hints again; a suspend and a resume are
  acted on), never runs two groups of the job at once, and the job's epochs are exact;
- scenario 4: a node dies (no heartbeat, its pods' processes killed and nothing reported about
  them, so its pods stay Running or Terminating on the API server forever) under a 2-replica
  job. The survivor fails on its lost peer and the group is stopped, but the dead node's pod
  never confirms its stop; adl treats the group as gone once the node is NotReady past
  ``--node-lost-after``, force-deletes that pod and runs the job again on the other node from
  its last periodic checkpoint, with nobody deleting anything by hand; every epoch it prints is
  accounted for. (With the node's network unplugged first, a power loss, the
  survivor hangs instead, and hung-rank detection stops the group, pods and all, before the
  node counts as lost.)
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from controlplane import ControlPlane
from kubelet import ProcessKubelet
from loop_support import (
    SIZE,
    TIMEOUT_S,
    Jobs,
    Operators,
    assert_resumed_after,
    epoch_records,
    live_groups,
    variant,
    with_env,
)

from adl.operator.crd import GROUP, PLURAL, VERSION

#: how long kube-apiserver is down in scenario 3. The operator of before issue 36 exited after
#: about a minute (kopf's default API retries, 1+1+2+...+21 = 54 s, then the error escalated);
#: three minutes is what the issue asks. ADL_TEST_OUTAGE_S shortens it for a quick look.
OUTAGE_S = float(os.environ.get("ADL_TEST_OUTAGE_S", "180"))
#: scenario 4: NotReady for this long and the node's pods are force-deleted
NODE_LOST_S = 15
#: scenario 4's bound: the job runs again on the other node this soon after its node died
#: (the node lifecycle controller's grace period of 50 s, NODE_LOST_S, a worker's start)
RECOVERY_S = 120


def test_the_operator_rides_out_a_control_plane_outage(
    control_plane: ControlPlane,
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    # never reached: the job trains through the outage and on after it, whatever the
    # machine's speed; once the operator has shown it acts again, the test suspends and
    # resumes the job through it and checks every epoch so far
    epochs = 100_000
    op = adl_operator(installed_chart).wait_ready()
    details = adl_operator.tails
    manifest = variant(tmp_path, "steady", epochs=epochs)
    adl_cli("submit", "steady", "-f", str(manifest), "-n", namespace)
    seen: list[set[str]] = []

    def watched(check: Any) -> Any:
        def run() -> Any:
            assert op.alive(), f"the operator exited\n{op.tail(80)}"
            seen.append(live_groups(jobs, "steady"))
            return check()

        return run

    def grown() -> bool:
        st = jobs.status("steady")
        return len(st.get("allocation") or []) == 2 and st.get("readyReplicas") == 2

    jobs.wait("the job running on both nodes", watched(grown), TIMEOUT_S, details)
    before = len(epoch_records(kubelet, namespace, "steady"))
    reported = (jobs.status("steady").get("hints") or {}).get("progress")

    control_plane.stop_apiserver()
    down = time.monotonic()
    try:
        while time.monotonic() - down < OUTAGE_S:  # the outage itself: its length is the test
            assert op.alive(), f"the operator exited during the outage\n{op.tail(80)}"
            time.sleep(1)  # allowed: the outage lasts this long: its length is the test
    finally:
        control_plane.start_apiserver()
    during = len(epoch_records(kubelet, namespace, "steady"))
    print(f"outage: {OUTAGE_S:.0f} s; epochs {before} before it, {during} at its end")
    assert during > before, "training went on while the API server was down"
    # still operating, not only a process: kopf's liveness endpoint goes with its machinery
    op.wait_ready(timeout=60)
    # the worker API writes the job's hints again
    jobs.wait(
        "a hints report written after the outage",
        watched(lambda: (jobs.status("steady").get("hints") or {}).get("progress") != reported),
        TIMEOUT_S,
        details,
    )
    # kopf's watches and the handlers act again: a suspend stops the group (it checkpoints),
    # a resume starts the next one where it stopped
    adl_cli("suspend", "steady", "-n", namespace)
    jobs.wait(
        "Suspended, its pods gone",
        watched(
            lambda: jobs.status("steady").get("phase") == "Suspended" and not jobs.pods("steady")
        ),
        TIMEOUT_S,
        details,
    )
    suspended = epoch_records(kubelet, namespace, "steady")
    group = jobs.status("steady")["group"]
    adl_cli("resume", "steady", "-n", namespace)
    jobs.wait(
        "an epoch of the group after the resume",
        watched(lambda: any(g > group for g, _ in epoch_records(kubelet, namespace, "steady"))),
        TIMEOUT_S,
        details,
    )
    op.wait_ready(timeout=10)
    assert op.starts == 1, "the same operator process throughout"
    assert all(len(g) <= 1 for g in seen), [g for g in seen if len(g) > 1]
    records = epoch_records(kubelet, namespace, "steady")
    # exact: each epoch printed once, in order, every sample of each seen once (the resumed
    # group went on from the checkpoint the suspend wrote)
    assert [r["epoch"] for _, r in records] == list(range(len(records))), records
    assert [r["samples"] for _, r in records] == [SIZE * (e + 1) for e in range(len(records))]
    assert len(records) > len(suspended) > during


def test_a_lost_node_is_handled_without_anyone(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    # never reached, whatever the machine's speed (CI once finished 20 epochs in 7 s, before
    # the first round could grow the job): the test checks the epochs printed once the job has
    # run a few on the surviving node
    epochs = 100_000
    op = adl_operator(installed_chart, extra_args=(f"--node-lost-after={NODE_LOST_S}",))
    op.wait_ready()
    # at two replicas from the start, and kept there until the node dies: on a loaded 2-core
    # machine the job may measure two replicas slower than one, and a round that shrank it
    # (CI did: "shrank 2 -> 1: speedup 0.51 -> 1.00") replaced the group whose pod the test
    # was about to look up
    manifest = variant(
        tmp_path, "lost", epochs=epochs, terminationGracePeriodSeconds=10, minReplicas=2
    )
    # a periodic checkpoint every 3 s, so the node dies with a recent one on the claim
    with_env(manifest, ADL_CHECKPOINT_INTERVAL_S="3")
    adl_cli("submit", "lost", "-f", str(manifest), "-n", namespace)

    def details() -> str:
        pods = {
            p.metadata.name: (p.spec.node_name, p.status.phase, p.metadata.deletion_timestamp)
            for p in jobs.pods("lost")
        }
        return f"{adl_operator.tails()}\njob: {jobs.status('lost')}\npods: {pods}"

    def grown() -> bool:
        st = jobs.status("lost")
        return len(st.get("allocation") or []) == 2 and st.get("readyReplicas") == 2

    jobs.wait("the job running on both nodes", grown, TIMEOUT_S, details)
    group = jobs.status("lost")["group"]
    # a few epochs at two replicas: a periodic checkpoint of this group is on the claim
    start = len(epoch_records(kubelet, namespace, "lost"))
    jobs.wait(
        "epochs of the grown group",
        lambda: len(epoch_records(kubelet, namespace, "lost")) >= start + 3,
        TIMEOUT_S,
        details,
    )
    doomed = next(p for p in jobs.pods("lost") if p.metadata.name.endswith(f"g{group}-0"))
    node = doomed.spec.node_name
    survivor = next(n for n in kubelet.node_names if n != node)
    lost_pods = kubelet.fail_node(node)
    died = time.monotonic()
    # one node left: the job may run on one replica again. The node is dead already, so the
    # group it ran is lost whatever round comes next; this only lets the job fit on the survivor
    jobs.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "lost", {"spec": {"minReplicas": 1}}
    )
    assert lost_pods == [f"{namespace}/{doomed.metadata.name}"], lost_pods

    def running_elsewhere() -> bool:
        st = jobs.status("lost")
        return (
            st.get("group", 0) > group
            and st.get("allocation") == [survivor]
            and st.get("readyReplicas") == 1
        )

    jobs.wait("the job running again on the other node", running_elsewhere, RECOVERY_S, details)
    recovered_s = time.monotonic() - died
    print(f"lost node: running again on {survivor} {recovered_s:.0f} s after {node} died")
    # nothing of the old group is left: the dead node's pod was force-deleted by adl
    left = [p.metadata.name for p in jobs.pods("lost") if p.spec.node_name == node]
    assert not left, left
    forced = f"force-deleting pod {doomed.metadata.name} on lost node {node}"
    assert forced in op.log_text(), op.tail(80)

    def node_lost_said() -> list[str]:  # events are posted asynchronously: wait for it
        events = jobs.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=lost"
        ).items
        return [e.message for e in events if e.reason == "NodeLost"]

    def said_details() -> str:
        events = jobs.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=lost"
        ).items
        return f"{details()}\nevents: {[(e.reason, e.message) for e in events]}"

    said = jobs.wait("the NodeLost event", node_lost_said, 30, said_details)
    assert f"node {node} NotReady for" in said[0], said
    assert "force-deleted" in said[0], said

    # epochs of the group on the surviving node, exact, resumed from the lost group's checkpoint
    assert_resumed_after(jobs, namespace, "lost", group, details)
