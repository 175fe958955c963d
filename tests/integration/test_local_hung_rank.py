"""A hung rank on the local backend: one rank of a 2-replica job (real gloo workers, periodic
checkpoints) is stopped with SIGSTOP. Its heartbeat goes silent while its peer's heartbeat says
it makes no progress either; within a minute of the stop the controller names the rank and the
seconds in the job's status and events, kills the group hard (a stopped process does not act on
SIGTERM) and starts it again from the last periodic checkpoint, and training ends with the exact
step count and every sample once per epoch."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adl.local.client import LocalBackend
from adl.local.daemon import Daemon
from adl.models import AdaptiveJobSpec, Phase, RestartCause
from tests.fakes import FixedPolicy
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

WORKER = Path(__file__).resolve().parent / "periodic_ckpt_worker.py"
SIZE, BATCH, EPOCHS = 400, 8, 3
STEPS = EPOCHS * SIZE // BATCH  # 150: no uneven tail
#: the hang bound's floor the job asks for (the default is 45 s): small, so the test is quick
FLOOR_S = 6
DEADLINE_S = 60.0  # detected, stopped and running again from its checkpoint within this


def _spec(record: Path) -> AdaptiveJobSpec:
    env = {
        "ADL_CHECKPOINT_INTERVAL_S": "1",
        "ADL_HANG_TIMEOUT_S": str(FLOOR_S),
        "ADL_HEARTBEAT_INTERVAL_S": "1",
    }
    command = [sys.executable, str(WORKER), "--record", str(record), "--size", str(SIZE),
               "--batch", str(BATCH), "--epochs", str(EPOCHS), "--step-s", "0.05"]  # fmt: skip
    container = {"name": "t", "command": command,
                 "env": [{"name": k, "value": v} for k, v in env.items()]}  # fmt: skip
    return AdaptiveJobSpec.model_validate(
        {
            "template": {"spec": {"containers": [container]}},
            "minReplicas": 2,
            "maxReplicas": 2,
            "maxRestarts": 3,
            "terminationGracePeriodSeconds": 10,
        }
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            out.append(json.loads(line))
    return out


def _starts(record: Path, rank: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """(pid, records) of each process of ``rank``, in the order they started."""
    out = []
    for p in record.glob(f"rank{rank}-pid*.jsonl"):
        rows = _rows(p)
        if rows:
            out.append((int(p.stem.split("pid")[1]), rows))
    return sorted(out, key=lambda item: item[1][0].get("t", 0.0))


def test_sigstopped_rank_is_named_and_its_group_restarted_from_its_checkpoint(
    tmp_path: Path, daemon_factory: Callable[..., Daemon], backend: LocalBackend
) -> None:
    policy = FixedPolicy()
    policy.replicas = {"hang": 2}
    daemon_factory(policy, slots=2, api=True)  # the workers report to the daemon's API
    record = tmp_path / "rec"
    backend.submit("hang", "default", _spec(record))

    def steps_of(rank: int) -> int:
        starts = _starts(record, rank)
        return sum(1 for r in starts[-1][1] if "step" in r) if starts else 0

    def checkpoints() -> list[dict[str, Any]]:
        starts = _starts(record, 0)
        return [r for r in starts[-1][1] if "ckpt" in r] if starts else []

    # well into training, with a periodic checkpoint written
    wait_for(lambda: steps_of(1) >= 30 and bool(checkpoints()), timeout=120)
    ((pid, _),) = _starts(record, 1)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.time()
    try:
        said: list[str] = []

        def named() -> bool:
            view = backend.get("hang", "default")
            said[:] = [view.status.message, *view.events]
            return any("rank 1 made no progress for" in s for s in said)

        wait_for(named, timeout=DEADLINE_S, every=0.1)
        detected_s = time.time() - stopped_at
        view = backend.get("hang", "default")
        # the status keeps it (a Progressing=False condition) until the next group trains
        cond = next(c for c in view.status.conditions if c.type == "Progressing")
        assert (cond.status, cond.reason) == ("False", "NoProgress"), cond
        match = re.search(r"^rank 1 made no progress for (\d+) s \(", cond.message)
        assert match is not None, cond.message
        assert FLOOR_S <= int(match.group(1)) <= FLOOR_S + 10, cond.message
        event = next(e for e in view.events if "NoProgress" in e)
        assert "Warning NoProgress: rank 1 made no progress for" in event, view.events
        print(event)

        # the stopped group is killed and a new one resumes from the last periodic checkpoint
        wait_for(lambda: len(_starts(record, 0)) == 2 and steps_of(0) >= 1, timeout=DEADLINE_S)
        resumed_s = time.time() - stopped_at
        assert resumed_s <= DEADLINE_S, resumed_s
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (_, rows0), (second0, rows1) = _starts(record, 0)
    last_ckpt = [r for r in rows0 if "ckpt" in r][-1]["ckpt"]
    resumed = [r for r in rows1 if "step" in r]
    assert resumed[0]["step"] == last_ckpt + 1, (last_ckpt, resumed[0])

    wait_for(lambda: backend.get("hang", "default").status.phase.finished, timeout=180)
    view = backend.get("hang", "default")
    assert view.status.phase == Phase.SUCCEEDED, view.status
    assert [e for e in view.events if "NoProgress" in e] == [event]  # said once
    cond = next(c for c in view.status.conditions if c.type == "Progressing")
    assert (cond.status, cond.reason) == ("True", "Training"), cond  # the next group trained
    assert view.status.restarts.get(RestartCause.FAILURE) == 1, view.status.restarts
    final = _rows(record / f"rank0-pid{second0}.jsonl")
    (done,) = [r for r in final if "done" in r]
    assert done["done"] == STEPS
    assert done["samples"] == {f"e{e}": SIZE for e in range(EPOCHS)}
    # the steps that count: the first start's up to its checkpoint, then the second start's
    kept = [r for r in rows0 if "step" in r and r["step"] <= last_ckpt]
    kept += [r for r in final if "step" in r]
    assert [r["step"] for r in kept] == list(range(1, STEPS + 1))
    for epoch in range(EPOCHS):
        ids = Counter(i for r in kept if r["epoch"] == epoch for i in r["ids"])
        # rank 0's share of every batch of the epoch, once each (rank 1 holds the rest)
        assert all(n == 1 for n in ids.values()), epoch
    print(f"hung rank detected after {detected_s:.1f} s, running again after {resumed_s:.1f} s")
