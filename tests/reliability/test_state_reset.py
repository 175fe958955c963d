"""A state reset on the local backend (``mv state.db state.db.corrupt; adl local up``) leaves
job directories, and maybe running workers, that no job in the new database owns. The daemon
stops those workers at start and moves their directories aside, and a new job of the same name
starts from nothing: it never adopts a predecessor's groups, checkpoint or token."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1] / "unit" / "local"
sys.path.insert(0, str(KIT))

from local_fixtures import backend, daemon_factory, home  # noqa: E402
from local_kit import FixedPolicy, counter_spec  # noqa: E402

from adl.local.client import DB_NAME, LocalBackend, daemon_pid  # noqa: E402
from adl.local.processes import GroupPaths, group_alive, read_pidfile  # noqa: E402
from adl.models import Phase  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

__all__ = ["backend", "daemon_factory", "home"]

pytestmark = pytest.mark.slow


def _step(ck: Path) -> int:
    try:
        return int(json.loads(ck.read_text())["step"])
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("submitted", ["after up", "before up"])
def test_after_a_state_reset_old_workers_stop_and_a_new_job_starts_fresh(
    daemon_factory, backend: LocalBackend, home: Path, caplog, submitted: str
) -> None:
    policy = FixedPolicy()
    policy.replicas["k"] = 1
    first = daemon_factory(policy)
    backend.submit("k", "default", counter_spec("--steps", "100000", "--step-s", "0.02"))
    paths = GroupPaths.for_job(home, "default", "k")
    wait_for(lambda: _step(paths.checkpoint / "state.json") >= 5)
    (group,) = paths.recorded_groups()
    old = read_pidfile(paths.pidfile(group))
    assert old is not None
    old_token = paths.token.read_text()
    first.stop()
    wait_for(lambda: daemon_pid(home) is None)
    backend.close()
    for suffix in ("", "-wal", "-shm"):  # the reset: the database is moved aside
        db = home / (DB_NAME + suffix)
        if db.exists():
            db.rename(db.with_name(db.name + ".corrupt"))
    assert group_alive(old)  # the old job's workers run on, supervised by nobody

    if submitted == "before up":  # the new job is in the database before any daemon reads it
        backend.submit("k", "default", counter_spec("--steps", "5", "--step-s", "0.02"))
    with caplog.at_level(logging.INFO, logger="adl.local"):
        daemon_factory(policy)
    # by the time the new daemon serves, the old workers are gone and their directory aside
    assert not group_alive(old)
    aside = list((home / "jobs" / ".orphaned" / "default").glob("k*"))
    assert len(aside) == 1 and _step(aside[0] / "checkpoint" / "state.json") >= 5
    assert not (paths.checkpoint / "state.json").exists()
    assert f"moved it to {aside[0]}" in caplog.text
    if submitted == "after up":
        backend.submit("k", "default", counter_spec("--steps", "5", "--step-s", "0.02"))
    wait_for(lambda: backend.get("k", "default").status.phase == Phase.SUCCEEDED)
    log = paths.log(0).read_text()
    # one group, from step 0: nothing of the predecessor was adopted
    assert log.count("=== group") == 1 and "start group=1 rank=0 world=1 step=0" in log
    assert paths.token.read_text() != old_token
    (token,) = [t for _, t in backend.store.tokens()]
    assert paths.token.read_text() == token
