"""Fixtures of the whole-loop scenarios: the real control plane (``../conftest.py``), the chart
installed, a process kubelet whose nodes run the worker pods, and the operator as the chart's
ServiceAccount telling workers to reach its API on the pod bridge.

- ``node_specs``: the kubelet's nodes (a module overrides it for another shape).
- ``kubelet_adopts``: a selector of Nodes made by others (Karpenter's KWOK provider) whose pods
  the kubelet runs too; None by default (a module overrides it).
- ``kubelet``: a started :class:`ProcessKubelet` on those nodes, stopped after the test.
- ``adl_operator(name=..., extra_args=())``: starts (not waits for) an operator of
  ``installed_chart`` whose ``--api-url`` is the bridge address; ``adl_operator.last`` etc.
- ``adl_cli(*args)``: runs the ``adl`` CLI against the control plane as the admin user.
- ``jobs``: reads AdaptiveJobs and their pods of the test's namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from chart_install import ROOT
from controlplane import ControlPlane
from kubelet import ProcessKubelet
from kubelet_net import available
from kubelet_nodes import NodeSpec
from kubernetes import client
from loop_support import Jobs, Operators


@pytest.fixture
def node_specs() -> list[NodeSpec]:
    """Two nodes of one GPU each: growing a job to two replicas spans both."""
    tag = uuid.uuid4().hex[:4]
    return [NodeSpec(f"node-a-{tag}", 1), NodeSpec(f"node-b-{tag}", 1)]


@pytest.fixture
def kubelet_adopts() -> str | None:
    """No Node made by others is adopted."""
    return None


@pytest.fixture
def kubelet(
    admin_api: client.ApiClient,
    node_specs: list[NodeSpec],
    kubelet_adopts: str | None,
    tmp_path: Path,
) -> Iterator[ProcessKubelet]:
    if not available():
        pytest.fail("the process kubelet needs root and network namespaces (ip netns)")
    with ProcessKubelet(admin_api, node_specs, tmp_path / "kubelet", adopt=kubelet_adopts) as kl:
        yield kl


@pytest.fixture
def adl_operator(
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    kubelet: ProcessKubelet,
    tmp_path: Path,
) -> Iterator[Operators]:
    ops = Operators(control_plane, admin_api, kubelet, tmp_path)
    try:
        yield ops
    finally:
        ops.stop()


@pytest.fixture
def adl_cli(control_plane: ControlPlane) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(control_plane.admin_kubeconfig),
            "PYTHONPATH": str(ROOT),
            "ADL_BACKEND": "k8s",
        }
        env.pop("ADL_KUBE_URL", None)
        cmd = [sys.executable, "-c", "from adl.cli.main import app; app()", *args]
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"adl {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done

    return run


@pytest.fixture
def jobs(admin_api: client.ApiClient, namespace: str, kubelet: ProcessKubelet) -> Jobs:
    return Jobs(admin_api, namespace, kubelet)
