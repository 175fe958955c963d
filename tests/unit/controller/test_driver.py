"""The shared driver over every backend: one scenario through an in-memory backend, the local
daemon (SQLite) and the Kubernetes backend (its objects in memory), with the same results.

Before the driver, each backend ran its own round: only the daemon accrued attained service (so
least-attained-service was off on Kubernetes), and neither kept speedup tables across rounds.
Here every backend must (1) accrue service for the replicas each job runs, persisted where the
backend keeps its state, and (2) hand the policy the same speedup function round after round
while a job's model is unchanged, and a new one once it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kube_objects import KubeObjects

from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryBackend
from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    PerfParamsModel,
    Phase,
)
from adl.sched.types import Allocation, JobInfo, NodeInfo

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["python"]}]}}
SPEC = AdaptiveJobSpec(template=TEMPLATE, min_replicas=1, max_replicas=4)
#: job -> replicas it runs on node n1 throughout the scenario
RUNNING = {"ns/a": 2, "ns/b": 1}


def hints(alpha_c: float = 0.1) -> Hints:
    return Hints(
        init_batch_size=32,
        max_batch_size=512,
        local_bsz_bounds=(16, 128),
        gradient_accumulation=True,
        perf_params=PerfParamsModel(
            alpha_c=alpha_c,
            beta_c=0.01,
            alpha_n=0.5,
            beta_n=0.1,
            alpha_r=0.1,
            beta_r=0.01,
            gamma=1.5,
        ),
        grad_params=GradParamsModel(sqr=1.0, var=10.0),
        max_profiled_replicas=2,
    )


def running(replicas: int) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(
        phase=Phase.RUNNING,
        group=1,
        replicas=replicas,
        allocation=["n1"] * replicas,
        hints=hints(),
    )


class KeepPolicy:
    """Keeps every job where it is; records the speedup function object it got per job."""

    def __init__(self) -> None:
        # the functions themselves, not their ids: kept alive, no id can be reused
        self.speedups: list[dict[str, Any]] = []

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        self.speedups.append({j.name: j.speedup for j in jobs})
        return {j.name: list(previous.get(j.name, [])) for j in jobs}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Setup:
    """A driver over one backend, and how to read and change that backend's stored state."""

    driver: Driver
    service: Callable[[str], float]
    set_hints: Callable[[str, Hints], None]
    status: Callable[[str], AdaptiveJobStatus]  # as the backend persisted it


def memory_setup(policy: KeepPolicy, clock: Clock, tmp_path: Path) -> Iterator[Setup]:
    jobs = [JobRecord(k, SPEC, running(n), NOW) for k, n in RUNNING.items()]
    backend = MemoryBackend(jobs, [NodeInfo("n1", 4)])
    set_hints = backend.set_hints

    yield Setup(
        Driver(backend, policy, clock=clock),
        lambda key: backend.jobs[key].status.attained_service_s,
        set_hints,
        lambda key: backend.jobs[key].status,
    )


def local_setup(policy: KeepPolicy, clock: Clock, tmp_path: Path) -> Iterator[Setup]:
    from adl.local.daemon import Daemon, Settings

    daemon = Daemon(Settings(home=tmp_path, api=False), policy_factory=lambda: policy)
    for key, replicas in RUNNING.items():
        ns, name = key.split("/")
        daemon.store.add_job(ns, name, SPEC)
        daemon.store.set_status(key, running(replicas))
        daemon.store.set_hints(key, hints())
    daemon.reload()
    daemon.driver.clock = clock

    def set_hints(key: str, h: Hints) -> None:
        daemon.store.set_hints(key, h)
        daemon.reload()

    try:
        yield Setup(
            daemon.driver,
            lambda key: daemon.store.job(key).status.attained_service_s,  # as persisted
            set_hints,
            lambda key: daemon.store.job(key).status,
        )
    finally:
        daemon.store.close()


def kube_setup(
    policy: KeepPolicy, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Setup]:
    from adl.operator import backend as kube_backend
    from adl.operator.handlers import Runtime

    monkeypatch.setattr(kube_backend, "_event", lambda *a, **k: None)  # no kopf context here
    dump = {"mode": "json", "by_alias": True, "exclude_none": True}
    objects = KubeObjects(
        {k: (SPEC.model_dump(**dump), running(r).model_dump(**dump)) for k, r in RUNNING.items()},
        gpus=4,
    )
    rt = Runtime(objects, policy)  # type: ignore[arg-type]
    rt.driver.clock = clock

    def set_hints(key: str, h: Hints) -> None:
        objects.jobs[key]["status"]["hints"] = h.model_dump(mode="json", by_alias=True)

    yield Setup(
        rt.driver,
        lambda key: float(objects.jobs[key]["status"].get("attainedServiceS", 0.0)),
        set_hints,
        lambda key: AdaptiveJobStatus.from_object(objects.jobs[key]),
    )


@pytest.fixture(params=["memory", "local", "kubernetes"])
def setup(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Setup, KeepPolicy, Clock]]:
    policy, clock = KeepPolicy(), Clock()
    if request.param == "memory":
        gen = memory_setup(policy, clock, tmp_path)
    elif request.param == "local":
        gen = local_setup(policy, clock, tmp_path)
    else:
        gen = kube_setup(policy, clock, tmp_path, monkeypatch)
    yield next(gen), policy, clock
    next(gen, None)


def test_every_backend_accrues_attained_service_through_the_driver(
    setup: tuple[Setup, KeepPolicy, Clock],
) -> None:
    s, _, clock = setup
    s.driver.run_round(NOW)  # the first round only starts each job's clock
    assert s.service("ns/a") == 0.0
    for _ in range(3):
        clock.t += 10.0
        s.driver.run_round(NOW)
    # GPU-seconds: replicas x 30 s, persisted by the backend where it keeps job state
    assert s.service("ns/a") == pytest.approx(2 * 30.0)
    assert s.service("ns/b") == pytest.approx(1 * 30.0)


def test_every_backend_keeps_speedup_tables_across_rounds(
    setup: tuple[Setup, KeepPolicy, Clock],
) -> None:
    s, policy, clock = setup
    for _ in range(3):
        clock.t += 5.0
        s.driver.run_round(NOW)
    first, *later = policy.speedups
    assert set(first) == {"ns/a", "ns/b"}
    # the same function objects: warm tables
    assert all(r[k] is first[k] for r in later for k in first)
    assert len(s.driver.speedups) == 2
    s.set_hints("ns/b", hints(alpha_c=0.3))  # b refitted its throughput model
    s.driver.run_round(NOW)
    last = policy.speedups[-1]
    assert last["ns/a"] is first["ns/a"] and last["ns/b"] is not first["ns/b"]


def test_every_backend_persists_the_mark_of_a_job_left_out_of_the_round(
    setup: tuple[Setup, KeepPolicy, Clock],
) -> None:
    """A job whose speedup function raises is left out; the Schedulable=False condition the
    driver gives it is persisted where the backend keeps status, and cleared afterwards."""
    from adl.controller.rounds import SpeedupCache

    s, policy, _ = setup

    class Rigged(SpeedupCache):
        broken = True

        def get(self, job: str, h: Hints | None) -> Any:
            fn = super().get(job, h)
            if job == "ns/a" and self.broken:
                return lambda n, k: (_ for _ in ()).throw(ZeroDivisionError("in a's model"))
            return fn

    rigged = Rigged()
    s.driver.speedups = rigged
    s.driver.run_round(NOW)
    assert set(policy.speedups[-1]) == {"ns/b"}  # the policy saw only the healthy job
    cond = next(c for c in s.status("ns/a").conditions if c.type == "Schedulable")
    assert (cond.status, cond.reason) == ("False", "UnusableHints")
    assert "ZeroDivisionError: in a's model" in cond.message
    assert not any(c.type == "Schedulable" for c in s.status("ns/b").conditions)
    rigged.broken = False
    s.driver.run_round(NOW)
    cond = next(c for c in s.status("ns/a").conditions if c.type == "Schedulable")
    assert cond.status == "True"
