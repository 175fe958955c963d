"""Helpers for the local backend's tests: the torch-free counter worker's spec, a fixed policy
tests steer by hand (tests wait with ``tests/waiting.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from adl.models import AdaptiveJobSpec
from tests.fakes import FixedPolicy

__all__ = ["FixedPolicy", "counter_spec"]

WORKER = Path(__file__).with_name("counter_worker.py")


def counter_spec(*args: str, lo: int = 1, hi: int = 2, max_restarts: int = 3) -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate(
        {
            "template": {"spec": {"containers": [
                {"name": "t", "command": [sys.executable, str(WORKER), *args]}
            ]}},
            "minReplicas": lo,
            "maxReplicas": hi,
            "maxRestarts": max_restarts,
            "terminationGracePeriodSeconds": 5,
        }
    )  # fmt: skip


class FilePolicy(FixedPolicy):
    """A FixedPolicy for a daemon in another process (``--policy local_kit:FilePolicy``):
    replica counts come from ``$ADL_HOME/policy.json`` (``{"job-name": n}``; the daemon sets
    ``ADL_HOME`` to its state directory), re-read every round."""

    def __init__(self) -> None:
        super().__init__()
        self.file = Path(os.environ["ADL_HOME"]) / "policy.json"

    def optimize(self, jobs, nodes, previous):  # type: ignore[no-untyped-def]
        import json

        try:
            self.replicas = {k: int(v) for k, v in json.loads(self.file.read_text()).items()}
        except (OSError, ValueError):
            self.replicas = {}
        return super().optimize(jobs, nodes, previous)
