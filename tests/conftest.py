"""Suite-wide report header: the control plane the ``cluster`` tests run on (tests/cluster)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CLUSTER = Path(__file__).resolve().parent / "cluster"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (CLUSTER / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            pins[key.strip()] = value.strip()
    return pins


def pytest_report_header(config: pytest.Config) -> list[str]:
    pins = _pins()
    cache = Path(os.environ.get("ADL_K8S_CACHE", Path.home() / ".cache" / "adl" / "k8s"))
    assets = Path(
        os.environ.get("ADL_K8S_ASSETS")
        or cache / f"k8s-{pins['K8S_VERSION']}_etcd-{pins['ETCD_VERSION']}"
    )
    found = "not built yet (the cluster tests build them)"
    apiserver = assets / "kube-apiserver"
    if os.access(apiserver, os.X_OK):
        # the binary's own word, not the pin: ADL_K8S_ASSETS may hold another version
        out = subprocess.run([apiserver, "--version"], capture_output=True, text=True, timeout=30)
        found = f"{out.stdout.strip()} in {assets}"
    pinned = ", ".join(f"{k}={v}" for k, v in pins.items())
    return [f"cluster: pinned {pinned}; kube-apiserver: {found}"]
