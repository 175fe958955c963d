"""The job commands ask a backend for what only some backends can tell (stale state, a stopped
controller, settings it ignores) through the capability protocols of adl.jobs_api, never by
its class: a backend without a capability is not asked, one with it is, whatever its class."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from adl.cli import cmd_jobs, submit
from adl.cli.main import app
from adl.jobs_api import (
    BackendError,
    IgnoresSettings,
    JobView,
    ReportsStaleness,
    RunsOwnController,
)
from adl.local.client import LocalBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase, parse_spec

SPEC = parse_spec(
    {"template": {"spec": {"containers": [{"name": "t", "command": ["true"]}]}}, "maxReplicas": 2}
)


class PlainBackend:
    """The generic Backend protocol only; records every call it gets."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.queues: list[str | None] = []
        self.jobs = {
            "a": JobView(
                "a",
                "default",
                SPEC,
                AdaptiveJobStatus(phase=Phase.RUNNING),
                created=datetime.now(UTC),
            )
        }

    def submit(
        self, name: str, namespace: str, spec: AdaptiveJobSpec, *, queue: str | None = None
    ) -> JobView:
        self.calls.append("submit")
        self.queues.append(queue)
        return JobView(name, namespace, spec, AdaptiveJobStatus())

    def list(self, namespace: str | None = None) -> list[JobView]:
        self.calls.append("list")
        return list(self.jobs.values())

    def get(self, name: str, namespace: str) -> JobView:
        self.calls.append("get")
        if name not in self.jobs:
            raise BackendError(f"job {namespace}/{name} not found")
        return self.jobs[name]

    def logs(
        self, name: str, namespace: str, *, follow: bool = False, replica: int | None = None
    ) -> Iterator[str]:
        self.calls.append("logs")
        return iter(["step 1"])

    def delete(self, name: str, namespace: str) -> None:
        self.calls.append("delete")

    def set_suspend(self, name: str, namespace: str, suspend: bool) -> bool:
        self.calls.append("set_suspend")
        return True


class CapableBackend(PlainBackend):
    """Every capability, and not a LocalBackend: the CLI must still use them."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    def stale_note(self, views: Iterable[JobView]) -> str | None:
        self.asked.append([v.name for v in views])
        return "phases may be stale"

    def daemon_running(self) -> bool:
        self.calls.append("daemon_running")
        return False

    def ignored_settings(self) -> frozenset[str]:
        return frozenset({"image", "queue"})


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch):
    """Make every job command talk to the given backend object."""

    def install(backend: PlainBackend) -> PlainBackend:
        monkeypatch.setattr(cmd_jobs, "open_backend", lambda name: backend)
        monkeypatch.setattr(submit, "open_backend", lambda name: backend)
        monkeypatch.setenv("ADL_BACKEND", "local")  # names the backend in the submit note
        return backend

    return install


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_the_capabilities_are_told_apart_by_methods_not_class() -> None:
    plain, capable = PlainBackend(), CapableBackend()
    for capability in (ReportsStaleness, RunsOwnController, IgnoresSettings):
        assert not isinstance(plain, capability)
        assert isinstance(capable, capability)
        assert issubclass(LocalBackend, capability)  # the local backend has them all


def test_kubernetes_backend_claims_no_local_capability() -> None:
    client = pytest.importorskip("adl.operator.client")
    for capability in (ReportsStaleness, RunsOwnController, IgnoresSettings):
        assert not issubclass(client.KubernetesBackend, capability)


@pytest.mark.parametrize(
    "args", [("ls",), ("describe", "a"), ("top", "--once")], ids=["ls", "describe", "top"]
)
def test_only_a_backend_that_reports_staleness_gets_a_stale_note(use, args: tuple[str]) -> None:
    use(PlainBackend())
    code, _, err = run(*args)
    assert code == 0 and "note:" not in err  # nothing to ask, nothing said

    capable = use(CapableBackend())
    code, _, err = run(*args)
    assert code == 0
    assert capable.asked == [["a"]]  # asked once, about the jobs shown
    assert "note: phases may be stale" in err


def test_logs_follow_checks_the_controller_only_where_the_backend_has_one(use) -> None:
    plain = use(PlainBackend())
    code, out, err = run("logs", "a", "-f")
    assert code == 0 and out == "step 1\n" and "note:" not in err
    assert plain.calls == ["logs"]  # not even a get to see whether the job is unfinished

    capable = use(CapableBackend())
    code, out, err = run("logs", "a", "-f")
    assert code == 0 and out == "step 1\n"
    assert capable.calls.count("daemon_running") == 2  # before and after following
    assert "not running: following until the job's workers exit" in " ".join(err.split())


def test_submit_names_the_flags_only_a_backend_that_ignores_them(use) -> None:
    argv = ("submit", "j", "--image", "reg.example/x:1", "--claim", "c", "--", "true")
    use(PlainBackend())
    code, _, err = run(*argv)
    assert code == 0 and "note:" not in err

    use(CapableBackend())  # ignores the image but not the checkpoint volume
    code, out, err = run(*argv)
    assert code == 0 and "job default/j submitted" in out
    assert "note: the local backend does not use --image\n" in err


def test_a_queue_goes_to_the_backend_and_a_backend_without_kueue_says_so(use) -> None:
    backend = CapableBackend()
    use(backend)
    code, _, err = run("submit", "j", "--queue", "team-a", "--", "true")
    assert code == 0 and backend.queues == ["team-a"]
    assert "note: the local backend does not use --queue\n" in err
    code, _, err = run("submit", "j", "--queue", "Team_A", "--", "true")
    assert code == 2 and "invalid queue 'Team_A'" in err
