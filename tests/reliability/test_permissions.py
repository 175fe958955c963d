"""Secrets stay secret on the local backend: with a real daemon process and the CLI's code
path, nothing under $ADL_HOME is readable by another user (the database and its WAL hold every
job's token, a group's plan holds the job's environment), and no token is written where a plan
or a log would show it."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1] / "unit" / "local"
sys.path.insert(0, str(KIT))

from local_kit import counter_spec  # noqa: E402

from adl.local.client import LocalBackend, start_daemon, stop_daemon  # noqa: E402
from adl.local.processes import group_alive, read_pidfile  # noqa: E402
from adl.models import AdaptiveJobSpec, Phase  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.slow

SECRET = "sk-test-0123456789abcdef"  # a job's --env value, e.g. an API key


@pytest.fixture
def lax_umask() -> Iterator[None]:
    """The caller's umask is the usual 022: whatever is private is private because adl made it
    so, not because the test runner happened to have a strict umask."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _with_env(spec: AdaptiveJobSpec, **env: str) -> AdaptiveJobSpec:
    data = spec.model_dump(by_alias=True)
    data["template"]["spec"]["containers"][0]["env"] = [
        {"name": k, "value": v} for k, v in env.items()
    ]
    return AdaptiveJobSpec.model_validate(data)


def _exposed(home: Path) -> list[str]:
    """Every file or directory under ``home`` (itself included) with a group or other bit."""
    out = []
    for path in [home, *home.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            out.append(f"{oct(stat.S_IMODE(mode))} {path.relative_to(home.parent)}")
    return out


def _kill_leftovers(home: Path) -> None:
    for p in home.glob("jobs/*/*/groups/*.pid"):
        proc = read_pidfile(p)
        if proc is not None and group_alive(proc):
            os.killpg(proc.pid, signal.SIGKILL)


def test_nothing_under_the_home_is_readable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lax_umask: None
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(KIT), os.environ.get("PYTHONPATH", "")]))
    # a secret in the daemon's own environment reaches the workers (they inherit it) but must
    # not become readable by others on the way
    monkeypatch.setenv("DAEMON_SIDE_SECRET", "inherited-" + SECRET)
    # a home left by an older version: world-readable, with its files
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    (home / "daemon.json").write_text(json.dumps({"args": []}))
    os.chmod(home / "daemon.json", 0o644)
    (home / "jobs").mkdir(mode=0o755)
    os.chmod(home / "jobs", 0o755)
    policy = home / "policy.json"  # the test's own file: it makes it private itself
    os.close(os.open(policy, os.O_WRONLY | os.O_CREAT, 0o600))
    policy.write_text(json.dumps({"p": 1}))
    start_daemon(
        home,
        slots=2,
        round_s=0.3,
        extra_args=["--tick-s", "0.05", "--backoff-s", "0.2", "--policy", "local_kit:FilePolicy"],
    )
    backend = LocalBackend(home, autostart=False)
    try:
        spec = _with_env(counter_spec("--steps", "40", "--step-s", "0.05", hi=2), API_KEY=SECRET)
        backend.submit("p", "default", spec)
        ck = home / "jobs/default/p/checkpoint/state.json"
        wait_for(lambda: ck.exists())
        # a resize: a second group, and the warm shim that prepares it
        (home / "policy.json").write_text(json.dumps({"p": 2}))
        wait_for(lambda: backend.get("p", "default").status.phase == Phase.SUCCEEDED, timeout=60)
        (token,) = [t for _, t in backend.store.tokens()]
        assert (home / "jobs/default/p/token").read_text() == token  # the worker's token file
        log = (home / "jobs/default/p/logs/r0.log").read_text()
        assert "start group=2 rank=0 world=2" in log  # the resize happened
        assert (home / "state.db-wal").exists()  # while the daemon runs: the WAL too
        assert _exposed(home) == []
    finally:
        backend.close()
        stop_daemon(home)
        _kill_leftovers(home)
    assert _exposed(home) == []
    plans = list(home.glob("jobs/default/p/groups/g*.plan.json"))
    assert len(plans) >= 2 and SECRET in plans[0].read_text()  # the plan does carry the env...
    texts = [p.read_text(errors="replace") for p in home.rglob("*.log")]
    texts += [p.read_text() for p in plans]
    assert texts and all(token not in t for t in texts)  # ...but never the token itself


def test_an_open_home_is_closed_but_only_adls_files_in_it_change(
    tmp_path: Path, lax_umask: None
) -> None:
    from adl.local.private import make_private_home

    home = tmp_path / "shared"  # $ADL_HOME pointed at a directory that holds other things
    (home / "jobs" / "default" / "a").mkdir(parents=True)
    (home / "daemon.log").write_text("old log\n")
    (home / "notes.txt").write_text("not adl's\n")
    make_private_home(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "daemon.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "jobs" / "default" / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "notes.txt").stat().st_mode) == 0o644
