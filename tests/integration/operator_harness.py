"""kmock + KopfRunner harness for the adl operator (kmock's recipe for testing kopf operators).

kmock serves a Kubernetes-like API on 127.0.0.1 in the test's loop; the real operator runs in
KopfRunner's own thread and loop. A scripted policy stands in for the scheduler so tests decide
the allocation; everything else (handlers, reconcile, pod building) is the production code.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kmock
import pytest
from kopf.testing import KopfRunner

from adl.operator import handlers
from adl.operator.store import KUBE_URL_ENV
from adl.sched.types import Allocation, JobInfo, NodeInfo
from tests.waiting import eventually

JOBS = "adl.dev/v1/adaptivejobs"


class Emulator(kmock.KubernetesEmulator):
    """Stamps what a real API server adds on create."""

    async def _handle(self, request: Any) -> Any:
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            if request.namespace:
                meta.setdefault("namespace", request.namespace)
            if "name" not in meta and meta.get("generateName"):
                # as a real API server does (kopf names its Events this way); without it a
                # second Event of the process is refused as already existing
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("resourceVersion", "1")
            meta.setdefault("generation", 1)
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        return await super()._handle(request)


#: the longest a gated round waits for its test to open the gate
GATE_LIMIT_S = 120.0


class ScriptedPolicy:
    """Answers what the test says; records what it was asked and whether it is optimizing
    right now."""

    def __init__(self) -> None:
        self.answer: dict[str, list[str]] = {}
        self.calls = 0
        self.seen: set[str] = set()
        self.rounds: list[set[str]] = []  # the jobs of each call
        self.busy = threading.Event()
        # When a test sets this to an unset Event, rounds block in the policy until the test sets
        # it: a slow round the test ends when it chooses, instead of a delay it races against.
        self.gate: threading.Event | None = None

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        self.calls += 1
        self.seen |= {j.name for j in jobs}
        self.rounds.append({j.name for j in jobs})
        if self.gate is not None:
            self.busy.set()
            try:
                self.gate.wait(GATE_LIMIT_S)  # bounded: a test that fails still tears down
            finally:
                self.busy.clear()
        return {j.name: list(self.answer.get(j.name, [])) for j in jobs}


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    kmock_options["cls"] = Emulator
    return kmock_options


@pytest.fixture
async def k8s(kmock: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    kmock.resources.load_bundled()
    kmock.resources[JOBS] = kmock.ResourceInfo(
        kind="AdaptiveJob",
        singular="adaptivejob",
        namespaced=True,
        verbs={"get", "list", "watch", "create", "patch", "delete"},
        subresources={"status"},
    )
    kmock[kmock.action.CREATE] << 201 << (lambda req: req.data)
    monkeypatch.setenv(KUBE_URL_ENV, str(kmock.url))
    return kmock


class RoundCounter:
    """Stands in for the operator's metrics (``OperatorConfig.metrics``, told of every round it
    ends): a test that checks that nothing happens waits for rounds to pass, not for a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # rounds end in the operator's worker threads
        self.ended = 0

    def observe_round(self, seconds: float) -> None:
        with self._lock:
            self.ended += 1

    async def more(self, n: int, timeout: float = 15.0) -> None:
        """Until ``n`` more rounds have ended (each tick starts one once the interval passed)."""
        target = self.ended + n
        await eventually(lambda: self.ended >= target, timeout, what=f"{n} more rounds")


@pytest.fixture
def round_counter() -> RoundCounter:
    return RoundCounter()


@pytest.fixture
def policy(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, round_counter: RoundCounter
) -> ScriptedPolicy:
    """The scripted policy, in the config the operator starts with (a test sets other fields
    with ``@pytest.mark.operator_config(name=value, ...)``: the config is fixed at start-up)."""
    scripted = ScriptedPolicy()
    marker = request.node.get_closest_marker("operator_config")
    fields: dict[str, Any] = {
        "policy_factory": lambda: scripted,
        "round_interval_s": 0.3,
        "api_url": "http://adl-api.test:8080",
        "namespaces": (),
        "metrics": round_counter,
    }
    fields.update(marker.kwargs if marker is not None else {})
    config = replace(handlers.DEFAULT_CONFIG, **fields)
    monkeypatch.setattr(handlers, "DEFAULT_CONFIG", config)
    return scripted


class Operator:
    """Start/stop the real operator (KopfRunner thread) against kmock."""

    def __init__(self, *flags: str, namespaces: Sequence[str] = ()) -> None:
        self.runner: KopfRunner | None = None
        self.flags = list(flags) or ["--standalone"]
        self.scope = [f"--namespace={ns}" for ns in namespaces] or ["-A"]

    async def start(self) -> None:
        # the operator's own login handler reads ADL_KUBE_URL (set by the k8s fixture)
        args = ["run", *self.flags, *self.scope, "--verbose", "-m", "adl.operator.handlers"]
        self.runner = KopfRunner(args, timeout=30)
        await asyncio.to_thread(self.runner.__enter__)

    async def stop(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await asyncio.to_thread(runner.__exit__, None, None, None)
            if runner.exception is not None:
                raise runner.exception


@pytest.fixture
async def operator(k8s: Any, policy: ScriptedPolicy) -> AsyncIterator[Operator]:
    op = Operator()
    await op.start()
    try:
        yield op
    finally:
        await op.stop()


# ------------------------------------------------------------------ helpers for assertions


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def objects(k8s: Any, plural: str, namespace: str | None = "default") -> dict[str, dict[str, Any]]:
    """Live (not deleted) objects of a resource, name -> body, as kmock stores them now."""
    out = {}
    for (res, ns, name), obj in list(k8s.objects.items()):
        if res.plural == plural and ns == namespace and not obj.deleted:
            out[name] = _plain(obj)
    return out
