"""The ported tutorial (examples/digits_tutorial.py) under the local daemon, as a user runs it:
``adl submit --min 1 --max 2`` with default settings, on a 2-slot machine where another job
holds one slot. It starts on the free slot, and must be resized at least once (it grows when
the other job is deleted), train to over 90% test accuracy and succeed; the batch the status
shows is the one the workers use."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adl.cli.main import app
from adl.local.client import LocalBackend, kill_workers, start_daemon, stop_daemon
from adl.models import Phase

KIT = Path(__file__).resolve().parents[1] / "unit" / "local"
sys.path.insert(0, str(KIT))
from local_kit import WORKER  # noqa: E402

from tests.waiting import wait_for  # noqa: E402

pytest.importorskip("sklearn")  # the tutorial's data set (the dev extra installs it)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_tutorial.py"


@pytest.fixture
def adl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The CLI's default (local) backend on an empty state directory, cleaned up after."""
    home = tmp_path / "adl-home"
    monkeypatch.setenv("ADL_HOME", str(home))
    monkeypatch.delenv("ADL_BACKEND", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    yield home
    stop_daemon(home, timeout_s=15)
    kill_workers(home)


@pytest.fixture
def daemon(adl_home: Path) -> int:
    return start_daemon(adl_home, slots=2, round_s=0.5)


def adl(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def phase(home: Path, name: str) -> Phase | None:
    backend = LocalBackend(home, autostart=False)
    try:
        return next((v.status.phase for v in backend.list("default") if v.name == name), None)
    finally:
        backend.close()


def text_of(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:  # not yet written
        return ""


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in text_of(log).splitlines() if line.startswith('{"epoch"')]


def test_the_digits_tutorial_is_resized_and_learns(adl_home: Path, daemon: int) -> None:
    # A new job starts on as much of the node as is free (up to bootstrap_replicas): on an idle
    # 2-slot daemon the tutorial would start on both and never be resized. So another job holds
    # a slot until the tutorial runs; the freed slot is then worth a restart to a job that has
    # not reported yet (its prior: linear scaling). Later, once the tutorial's own report shows
    # how little a second process gives a job of seconds, the hysteresis margin (change_margin)
    # may keep it on one. (Its first group may be stopped before it saved anything.)
    code, _, err = adl("submit", "other", "--max", "1", "--", sys.executable, str(WORKER),
                       "--steps", "100000")  # fmt: skip
    assert code == 0, err
    wait_for(lambda: phase(adl_home, "other") == Phase.RUNNING, timeout=60)
    code, _, err = adl(
        "submit", "digits", "--min", "1", "--max", "2", "--", sys.executable, str(EXAMPLE)
    )
    assert code == 0, err
    wait_for(lambda: phase(adl_home, "digits") == Phase.RUNNING, timeout=60, every=0.1)
    assert adl("delete", "other")[0] == 0
    log = adl_home / "jobs/default/digits/logs/r0.log"
    seen: set[int] = set()

    def finished() -> bool:
        out = json.loads(adl("describe", "digits", "-o", "json")[1])
        status = out.get("status") or {}
        done = records(log)
        if status.get("batchSize") and done:
            seen.add(int(status["batchSize"]))
        return phase(adl_home, "digits") in (Phase.SUCCEEDED, Phase.FAILED)

    wait_for(finished, timeout=240, every=0.5)
    assert phase(adl_home, "digits") == Phase.SUCCEEDED, text_of(log)[-2000:]
    done = records(log)
    assert done[-1]["accuracy"] > 0.9, done[-1]
    # every batch the status showed is one the workers trained at
    assert seen and seen <= {r["batch_size"] for r in done}, (seen, done)
    hints = json.loads(adl("describe", "digits", "-o", "json")[1])["status"]["hints"]
    assert hints["perfParams"] is not None  # the early report reached the scheduler
    # the last report went out when the declared epochs were done: the status shows them done
    assert hints["progress"] == pytest.approx(hints["totalProgress"]), hints
    # the job measured what a restart costs it (seconds here, not the 30 s assumed without)
    assert 0 < hints["restartCostS"] < 30, hints
    # resized at least once, with default settings: grown into the freed slot
    assert max(r["world"] for r in done) == 2, done
    # and describe says why, before and after: the first answer, then the growth
    _, text, _ = adl("describe", "digits")
    assert "started with 1 replica" in text and "waiting for its first report" in text, text
    assert "grew 1 -> 2: speedup 1.00 ->" in text, text
