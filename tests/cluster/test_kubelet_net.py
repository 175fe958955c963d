"""The process kubelet's pod network (``kubelet_net``): names never collide across kubelets."""

from __future__ import annotations

import subprocess

from kubelet_net import PodNetwork


def test_a_second_kubelet_in_one_process_starts_pods_while_an_old_pod_lingers() -> None:
    # A pod process of a closed kubelet keeps its namespace, and so its veth, alive; the next
    # kubelet of the same test session must not reuse those names (it did: "File exists", the
    # pod never started and a loop scenario waited out its deadline).
    first = PodNetwork()
    old = first.add(["old.pod"], "old")
    lingering = subprocess.Popen(first.command(old, "old", ["sleep", "60"]))
    try:
        first.close()
        second = PodNetwork()
        try:
            new = second.add(["new.pod"], "new")
            assert new.netns != old.netns
            out = subprocess.run(
                second.command(new, "new", ["cat", "/etc/hosts"]),
                capture_output=True,
                text=True,
                check=True,
            )
            assert f"{new.ip} new.pod" in out.stdout
        finally:
            second.close()
    finally:
        lingering.kill()
        lingering.wait()
