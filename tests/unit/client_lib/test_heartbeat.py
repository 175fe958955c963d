"""Every rank's heartbeat: the step clock the loop ticks, the settings read from the
environment (bounded, a typo refused), and what the sender puts on the wire."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from adl.client_lib.context import WorkerEnv
from adl.client_lib.heartbeat import (
    HeartbeatSender,
    HeartbeatSettings,
    StepClock,
    heartbeat_url,
)
from adl.models import MAX_STEP_TIME_S, Heartbeat


class Ticks:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_step_clock_counts_boundaries_and_leaves_saves_out_of_the_step_time() -> None:
    t = Ticks()
    clock = StepClock(t)
    clock.step()
    assert (clock.steps, clock.step_time_s) == (1, None)  # the first step has not ended yet
    t.t = 1.0
    clock.step()
    assert (clock.steps, clock.step_time_s) == (2, 1.0)
    with clock.save():
        assert clock.saving
        t.t = 100.0  # a long save
    assert not clock.saving
    t.t = 101.0
    clock.step()
    assert clock.step_time_s == pytest.approx(1.0)  # the save's 99 s are no step's


def test_settings_come_from_the_environment_within_bounds() -> None:
    assert HeartbeatSettings.from_env({}) == HeartbeatSettings(5.0, None, None)
    got = HeartbeatSettings.from_env(
        {"ADL_HEARTBEAT_INTERVAL_S": "1", "ADL_HANG_TIMEOUT_S": "0", "ADL_HANG_STEP_MULTIPLE": "4"}
    )
    assert got == HeartbeatSettings(1.0, 0.0, 4.0)
    for name, value in [
        ("ADL_HEARTBEAT_INTERVAL_S", "0.01"),
        ("ADL_HEARTBEAT_INTERVAL_S", "nan"),
        ("ADL_HANG_TIMEOUT_S", "2"),
        ("ADL_HANG_TIMEOUT_S", "1e9"),
        ("ADL_HANG_TIMEOUT_S", "soon"),
        ("ADL_HANG_STEP_MULTIPLE", "1"),
    ]:
        with pytest.raises(ValueError, match=name):
            HeartbeatSettings.from_env({name: value})


def test_no_sender_without_a_job_or_an_api() -> None:
    assert HeartbeatSender.from_env(WorkerEnv(), StepClock(), {}) is None
    env = WorkerEnv(job="ns/a", api_url="http://127.0.0.1:1", group=3, rank=1, world_size=2)
    sender = HeartbeatSender.from_env(env, StepClock(), {})
    assert sender is not None and sender.url == "http://127.0.0.1:1/v1/jobs/ns/a/heartbeat"
    assert heartbeat_url("http://h/", "ns/a") == "http://h/v1/jobs/ns/a/heartbeat"


def test_a_heartbeat_carries_the_rank_its_progress_and_the_jobs_settings(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n")
    clock = StepClock(Ticks())
    clock.steps, clock.step_time_s = 42, 1e12  # an absurd step time is sent as the bound
    settings = HeartbeatSettings(2.0, 30.0, None)
    sender = HeartbeatSender(clock, "http://api/v1/jobs/ns/a/heartbeat", 3, 1, settings, token)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204 if len(seen) == 1 else 503)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        assert sender.send_once(client)
        assert not sender.send_once(client)  # refused: counted, never raised
    assert (sender.sent, sender.failed) == (1, 1)
    assert seen[0].headers["Authorization"] == "Bearer secret"
    beat = Heartbeat.model_validate(json.loads(seen[0].content))
    assert beat == Heartbeat(
        group=3, rank=1, steps=42, step_time_s=MAX_STEP_TIME_S, interval_s=2.0,
        hang_timeout_s=30.0,
    )  # fmt: skip
