"""The local state store when it cannot be written (a full disk, a read-only file): the
failure is visible (``adl local status``, the API's ``/readyz``), a failed commit is rolled
back so that the next write can succeed, and the daemon keeps retrying until it does.

We run as root in CI, where chmod does not stop writes: the faults come from the store's
labelled fault-injection seam (``Store.fail_writes``) or from SQLite's own page limit, which
makes it answer SQLITE_FULL exactly as on a full disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from adl.api.app import create_app
from adl.cli.main import app as cli
from adl.controller.lifecycle import Timing
from adl.local.api_store import LocalApiStore
from adl.local.client import DB_NAME
from adl.local.daemon import Daemon, Settings
from adl.local.store import Store
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from tests.fakes import NoPolicy

FULL = "database or disk is full"


def _spec() -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "command": ["true"]}]}}}
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / DB_NAME)
    yield s  # type: ignore[misc]
    s.close()


def test_a_failed_commit_is_remembered_rolled_back_and_retried(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.add_job("default", "j", _spec())
    assert store.write_error is None
    monkeypatch.setattr(Store, "fail_writes", FULL)
    running = AdaptiveJobStatus(phase=Phase.RUNNING, group=1)
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.set_status(rec.key, running)
    assert store.write_error is not None and FULL in store.write_error
    assert store.job(rec.key).status.phase == Phase.PENDING  # nothing half-written
    monkeypatch.setattr(Store, "fail_writes", None)
    # the failed transaction was rolled back: a new one can begin
    store.set_status(rec.key, running)
    assert store.job(rec.key).status.phase == Phase.RUNNING
    assert store.write_error is None


def test_sqlite_full_is_seen_by_the_write_probe(store: Store) -> None:
    """No seam: SQLite's page limit makes the database full for real."""
    store.add_job("default", "j", _spec())
    (pages,) = store._db.execute("PRAGMA page_count").fetchone()
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    for i in range(2000):  # events until a new page is needed
        try:
            store.add_event("default/j", "Normal", "Fill", "x" * 500 + str(i))
        except sqlite3.OperationalError:
            break
    assert store.write_error is not None and "full" in store.write_error
    # (the probe's one-row update fits in a page the database already has, so under this
    # emulation only growth fails; on a real full disk the write-ahead log cannot grow either)
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.add_event("default/j", "Normal", "Fill", "x" * 4000)
    store._db.execute(f"PRAGMA max_page_count = {pages * 100}")
    assert store.probe_write() is None and store.write_error is None


def test_readyz_is_not_ready_while_the_store_cannot_be_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.set_meta("daemon_pid", "1")
    client = TestClient(create_app(LocalApiStore(store), title="adl local"))
    assert client.get("/readyz").status_code == 200
    monkeypatch.setattr(Store, "fail_writes", FULL)
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["status"] == "unavailable"
    monkeypatch.setattr(Store, "fail_writes", None)
    assert client.get("/readyz").status_code == 200


def test_local_status_says_the_state_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    s = Store(home / DB_NAME)
    s.add_job("default", "j", _spec())
    s.close()
    runner = CliRunner()
    ok = runner.invoke(cli, ["local", "status", "--home", str(home)])
    assert ok.exit_code == 0 and "state:   writable" in ok.stdout
    monkeypatch.setattr(Store, "fail_writes", FULL)
    bad = runner.invoke(cli, ["local", "status", "--home", str(home)])
    assert bad.exit_code == 0, bad.stdout
    assert "NOT WRITABLE" in bad.stdout and FULL in bad.stdout
    assert "may be stale" in bad.stdout


def test_the_daemon_keeps_retrying_until_the_store_can_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=tmp_path / "home", slots=1, api=False, prewarm=False, timing=Timing())
    daemon = Daemon(settings, policy_factory=NoPolicy)  # type: ignore[arg-type]
    try:
        rec = daemon.store.add_job("default", "j", _spec())
        monkeypatch.setattr(Store, "fail_writes", FULL)
        for _ in range(3):
            daemon.safe_tick()  # the daemon loop's tick: what failed is retried
        assert daemon.store.write_error is not None
        assert daemon.store.job(rec.key).status.phase == Phase.PENDING
        assert daemon.store.job(rec.key).status.reason == ""  # the step's write never landed
        monkeypatch.setattr(Store, "fail_writes", None)
        daemon.safe_tick()
        assert daemon.store.write_error is None
        assert daemon.store.job(rec.key).status.reason == "WaitingForAllocation"
    finally:
        daemon.groups.close()
        daemon.store.close()
