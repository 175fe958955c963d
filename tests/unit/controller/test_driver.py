"""The shared driver over every backend: one scenario through an in-memory backend, the local
daemon (SQLite) and the Kubernetes backend (its objects in memory), with the same results.

Before the driver, each backend ran its own round: only the daemon accrued attained service (so
least-attained-service was off on Kubernetes), and neither kept speedup tables across rounds.
Here every backend must (1) accrue service for the replicas each job runs, persisted where the
backend keeps its state, and (2) hand the policy the same speedup function round after round
while a job's model is unchanged, and a new one once it changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from three_backends import BACKENDS, DriverOn, driver_on

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


@pytest.fixture(params=BACKENDS)
def setup(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[DriverOn, KeepPolicy, Clock]]:
    policy, clock = KeepPolicy(), Clock()
    jobs = {key: (SPEC, running(replicas)) for key, replicas in RUNNING.items()}
    with driver_on(request.param, jobs, policy, tmp_path, gpus=4, clock=clock) as on:
        yield on, policy, clock


def service(on: DriverOn, key: str) -> float:
    """GPU-seconds of service the job accrued, as the backend persisted them."""
    return on.status(key).attained_service_s


def test_every_backend_accrues_attained_service_through_the_driver(
    setup: tuple[DriverOn, KeepPolicy, Clock],
) -> None:
    s, _, clock = setup
    s.driver.run_round(NOW)  # the first round only starts each job's clock
    assert service(s, "ns/a") == 0.0
    for _ in range(3):
        clock.t += 10.0
        s.driver.run_round(NOW)
    # GPU-seconds: replicas x 30 s, persisted by the backend where it keeps job state
    assert service(s, "ns/a") == pytest.approx(2 * 30.0)
    assert service(s, "ns/b") == pytest.approx(1 * 30.0)


def test_every_backend_keeps_speedup_tables_across_rounds(
    setup: tuple[DriverOn, KeepPolicy, Clock],
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
    setup: tuple[DriverOn, KeepPolicy, Clock],
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
