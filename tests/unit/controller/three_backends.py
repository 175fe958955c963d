"""One scenario through the shared driver on each of the three backends: the in-memory one,
the local daemon (its SQLite store in a temporary home) and the Kubernetes backend (its
AdaptiveJob objects and one node in memory, ``KubeObjects``). The controller tests that check
that every backend behaves alike start their driver here (``driver_on``), each from a fixture
parametrized over ``BACKENDS``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints
from adl.sched.types import NodeInfo, Policy
from tests.event_sink import EventRecorder

BACKENDS = ("memory", "local", "kubernetes")
#: when every job of a scenario was created (``KubeObjects`` serves the same timestamp)
CREATED = datetime(2026, 1, 1, tzinfo=UTC)
#: ``namespace/name`` -> (spec, status) of each job a scenario starts with
Scenario = Mapping[str, tuple[AdaptiveJobSpec, AdaptiveJobStatus]]


class KubeObjects:
    """The KubeStore calls the round makes, over AdaptiveJob objects kept in memory."""

    def __init__(
        self, jobs: Mapping[str, tuple[dict[str, Any], dict[str, Any]]], gpus: int
    ) -> None:
        """``jobs``: ``ns/name`` -> (spec, status) as the API serves them; one node ``n1``."""
        self.gpus = gpus
        self.jobs: dict[str, dict[str, Any]] = {}
        for key, (spec, status) in jobs.items():
            ns, name = key.split("/")
            self.jobs[key] = {
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": name,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "annotations": {},
                },
                "spec": spec,
                "status": status,
            }

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(b) for b in self.jobs.values()]

    def list_nodes(self) -> list[dict[str, Any]]:
        gpus = {"nvidia.com/gpu": str(self.gpus)}
        return [
            {"metadata": {"name": "n1", "labels": {}}, "spec": {}, "status": {"allocatable": gpus}}
        ]

    def list_all_pods(self) -> list[dict[str, Any]]:
        return []

    def patch_job_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        self.jobs[f"{namespace}/{name}"]["metadata"]["annotations"].update(ann)

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        self.jobs[f"{namespace}/{name}"]["status"].update(copy.deepcopy(status))


@dataclass
class DriverOn:
    """A driver over one backend's stored state, and how to read, change and restart it."""

    driver: Driver
    #: a job's status as the backend persisted it
    status: Callable[[str], AdaptiveJobStatus]
    #: a new hints report of a job, as the worker API would store it
    set_hints: Callable[[str, Hints], None]
    #: a new driver over the same state (a restarted operator or daemon)
    restart: Callable[[], Driver]


@contextmanager
def driver_on(
    backend: str,
    jobs: Scenario,
    policy: Policy,
    home: Path,
    *,
    gpus: int,
    clock: Callable[[], float] | None = None,
) -> Iterator[DriverOn]:
    """``jobs`` on ``backend`` (one of ``BACKENDS``) with one node ``n1`` of ``gpus`` GPUs;
    ``home`` keeps the local daemon's state; ``clock`` (default: the driver's) times the
    rounds of every driver started, restarts included."""
    if backend == "memory":
        yield _on_memory(jobs, policy, gpus, clock)
    elif backend == "local":
        with _on_local(jobs, policy, home, clock) as on:
            yield on
    elif backend == "kubernetes":
        yield _on_kubernetes(jobs, policy, gpus, clock)
    else:
        raise ValueError(f"no backend {backend!r}: one of {BACKENDS}")


def _timed(driver: Driver, clock: Callable[[], float] | None) -> Driver:
    if clock is not None:
        driver.clock = clock
    return driver


def _on_memory(
    jobs: Scenario, policy: Policy, gpus: int, clock: Callable[[], float] | None
) -> DriverOn:
    backend = MemoryWorkerBackend(
        [JobRecord(k, spec, status, CREATED) for k, (spec, status) in jobs.items()],
        [NodeInfo("n1", gpus)],
    )

    def start() -> Driver:
        return _timed(Driver(backend, policy), clock)

    return DriverOn(start(), lambda key: backend.jobs[key].status, backend.set_hints, start)


@contextmanager
def _on_local(
    jobs: Scenario, policy: Policy, home: Path, clock: Callable[[], float] | None
) -> Iterator[DriverOn]:
    from adl.local.daemon import Daemon, Settings

    store = Daemon(Settings(home=home, api=False)).store
    for key, (spec, status) in jobs.items():
        namespace, name = key.split("/")
        store.add_job(namespace, name, spec)
        store.set_status(key, status)  # the daemon's write keeps no hints: the API's is next
        if status.hints is not None:
            store.set_hints(key, status.hints)
    store.close()
    daemons: list[Daemon] = []

    def start() -> Driver:
        if daemons:
            daemons[-1].store.close()
        daemon = Daemon(Settings(home=home, api=False), policy_factory=lambda: policy)
        daemon.reload()
        daemons.append(daemon)
        return _timed(daemon.driver, clock)

    def set_hints(key: str, hints: Hints) -> None:
        daemons[-1].store.set_hints(key, hints)
        daemons[-1].reload()

    try:
        yield DriverOn(start(), lambda key: daemons[-1].store.job(key).status, set_hints, start)
    finally:
        daemons[-1].store.close()


def _on_kubernetes(
    jobs: Scenario, policy: Policy, gpus: int, clock: Callable[[], float] | None
) -> DriverOn:
    from adl.operator.handlers import Runtime

    objects = KubeObjects({k: (s.wire(), st.wire()) for k, (s, st) in jobs.items()}, gpus=gpus)

    def start() -> Driver:
        runtime = Runtime(objects, policy, events=EventRecorder())  # type: ignore[arg-type]
        return _timed(runtime.driver, clock)

    def set_hints(key: str, hints: Hints) -> None:
        objects.jobs[key]["status"]["hints"] = hints.model_dump(mode="json", by_alias=True)

    def status(key: str) -> AdaptiveJobStatus:
        return AdaptiveJobStatus.from_object(objects.jobs[key])

    return DriverOn(start(), status, set_hints, start)
