"""A suspended job's allocation is forgotten at once, on every backend (issue 30: the operator
did it in its handler after the step, the local daemon only one round later, so a resume that
came first started on the GPUs the job had given up)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.local.daemon import NODE, Daemon, Settings
from adl.local.worker_backend import round_job
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": [sys.executable, "t.py"]}]}}
SPEC = AdaptiveJobSpec.model_validate({"template": TEMPLATE, "maxReplicas": 2})
SUSPENDED = SPEC.model_copy(update={"suspend": True})


def _running(node: str) -> AdaptiveJobStatus:
    # its group has just stopped (no worker present): the step can say Suspended at once
    return AdaptiveJobStatus(phase=Phase.RUNNING, group=1, replicas=2, allocation=[node, node])


def test_the_memory_backend_forgets_a_suspended_jobs_allocation_at_once() -> None:
    job = JobRecord("ns/a", SUSPENDED, _running("n1"), NOW, desired=["n1", "n1"])
    backend = MemoryWorkerBackend([job], [NodeInfo("n1", 2)])
    Driver(backend, AdlPolicy()).step_job(job, NOW)
    assert backend.jobs["ns/a"].status.phase == Phase.SUSPENDED
    assert backend.jobs["ns/a"].desired == []


def test_the_local_daemon_forgets_a_suspended_jobs_allocation_at_once(tmp_path: Path) -> None:
    daemon = Daemon(Settings(home=tmp_path, api=False), policy_factory=AdlPolicy)
    try:
        daemon.store.add_job("ns", "a", SPEC)
        daemon.store.set_status("ns/a", _running(NODE))
        daemon.store.set_desired({"ns/a": [NODE, NODE]})
        daemon.store.set_suspend("ns/a", True)
        daemon.reload()
        daemon.driver.step_job(round_job(daemon.jobs["ns/a"]), NOW)  # no round in between
        stored = daemon.store.job("ns/a")
        assert stored.status.phase == Phase.SUSPENDED
        assert stored.desired == []  # persisted, so a restarted daemon forgets it too
    finally:
        daemon.store.close()
