"""Hung-rank detection, the pure decision (``adl.controller.liveness.judge``), the book that
keeps the heartbeats, and what the lifecycle does with a hang: the bound (floor, multiple of
the rank's own step time), a stale heartbeat against slow steps, no verdict before the first
step or during a checkpoint save, and a hung running group killed at once and restarted as a
failure, its rank and the seconds named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from adl.controller.actions import DeleteGroup, EmitEvent, SetStatus
from adl.controller.lifecycle import ObservedWorkers, ReplicaPhase, ReplicaState, step
from adl.controller.liveness import (
    DEFAULT_HANG_TIMEOUT_S,
    MAX_BOUND_S,
    SAVING_BOUND_S,
    ProgressBook,
    RankProgress,
    judge,
)
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Heartbeat, Phase, RestartCause

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rank(
    r: int,
    steps: int = 100,
    *,
    heard: float = 0.0,
    moved: float = 0.0,
    group: int = 1,
    step_s: float | None = 0.5,
    **kw: Any,
) -> RankProgress:
    """Rank ``r``: last heard at ``heard`` s, its step count last moved at ``moved`` s."""
    return RankProgress(group, r, steps, at(heard), at(moved), step_time_s=step_s, **kw)


# ----------------------------------------------------------------------------- the bound


def test_the_bound_is_the_floor_or_a_multiple_of_the_ranks_own_step_time() -> None:
    assert rank(0, step_s=0.5).bound_s() == DEFAULT_HANG_TIMEOUT_S  # 10 x 0.5 s < 45 s
    assert rank(0, step_s=12.0).bound_s() == 120.0  # 10 x 12 s
    assert rank(0, step_s=2.0, hang_step_multiple=50).bound_s() == 100.0
    assert rank(0, step_s=None).bound_s() == DEFAULT_HANG_TIMEOUT_S
    assert rank(0, step_s=None).bound_s(step_time_s=6.0) == 60.0  # a peer's, when unknown
    assert rank(0, hang_timeout_s=5).bound_s() == 5.0
    assert rank(0, hang_timeout_s=0).bound_s() == 0.0  # off
    assert rank(0, step_s=3600.0, hang_step_multiple=1000).bound_s() == MAX_BOUND_S


def test_a_group_of_fresh_ranks_hangs_only_past_the_floor() -> None:
    group = [rank(0, heard=44), rank(1, heard=44)]  # alive, no step since 0 s
    assert judge(group, 1, 2, at(44)) is None
    assert judge(group, 1, 2, at(45)) is None  # the bound itself is not past it
    hang = judge([rank(0, heard=46), rank(1, heard=46)], 1, 2, at(46))
    assert hang is not None
    assert hang.ranks == (0, 1) and hang.why == "all"
    assert hang.message.startswith("ranks 0, 1 made no progress for 46 s (")


def test_slow_steps_are_judged_by_their_own_time_not_the_floor() -> None:
    slow = [rank(0, heard=100, step_s=15.0), rank(1, heard=100, step_s=15.0)]
    assert judge(slow, 1, 2, at(100)) is None  # 100 s quiet, but a step takes 15 s: 150 s
    assert judge([rank(0, heard=149, step_s=15.0), rank(1, heard=149, step_s=15.0)], 1, 2,
                 at(149)) is None  # fmt: skip
    fresh_late = [rank(0, heard=151, step_s=15.0), rank(1, heard=151, step_s=15.0)]
    hang = judge(fresh_late, 1, 2, at(151))
    assert hang is not None and hang.bound_s == 150.0
    assert "the limit is 150 s: the larger of 45 s and 10 steps of 15 s" in hang.message


def test_one_rank_that_moves_means_the_group_moves() -> None:
    # rank 1 is silent, but rank 0 stepped 10 s ago: whatever rank 1's heartbeat says, the
    # group progresses (it cannot without rank 1), e.g. rank 1 is cut off from the API
    group = [rank(0, heard=100, moved=90), rank(1, heard=0, moved=0)]
    assert judge(group, 1, 2, at(100)) is None


# ----------------------------------------------------------------------------- whom to name


def test_the_rank_whose_heartbeat_stopped_is_named() -> None:
    # rank 1 stopped (SIGSTOP) at 10 s; rank 0 still sends, blocked in a collective
    group = [rank(0, heard=60, moved=10), rank(1, heard=10, moved=10)]
    hang = judge(group, 1, 2, at(60))
    assert hang is not None
    assert hang.ranks == (1,) and hang.why == "silent"
    assert hang.message.startswith("rank 1 made no progress for 50 s (its heartbeat stopped 50 s")
    assert "group 1 killed, restarting it" in hang.message


def test_a_stale_heartbeat_with_slow_steps_is_not_a_hang_yet() -> None:
    # rank 1's heartbeat is stale (a GIL-bound stretch, a network blip) but the steps are
    # slow: only the bound decides, staleness only picks whom to name
    group = [rank(0, heard=60, step_s=20.0), rank(1, heard=5, step_s=20.0)]
    assert judge(group, 1, 2, at(60)) is None
    hang = judge([rank(0, heard=201, step_s=20.0), rank(1, heard=5, step_s=20.0)], 1, 2, at(201))
    assert hang is not None and hang.ranks == (1,)


def test_the_rank_behind_is_named_when_every_heartbeat_is_fresh() -> None:
    group = [rank(0, 101, heard=60), rank(1, 100, heard=60), rank(2, 101, heard=60)]
    hang = judge(group, 1, 3, at(60))
    assert hang is not None and hang.ranks == (1,) and hang.why == "behind"


def test_a_rank_never_heard_of_is_named() -> None:
    # e.g. the controller restarted after rank 1 stopped: its first heartbeats came from rank 0
    hang = judge([rank(0, heard=60, moved=0)], 1, 2, at(60))
    assert hang is not None and hang.ranks == (1,) and hang.why == "unheard"
    assert "no heartbeat from it in this group" in hang.message


def test_only_the_current_group_and_its_ranks_count() -> None:
    old = [rank(0, group=1, heard=60), rank(1, group=1, heard=60)]
    assert judge(old, 2, 2, at(60)) is None  # the new group has not sent anything yet
    extra = [rank(0, heard=60, moved=55), rank(1, heard=60, moved=55), rank(7, heard=0)]
    assert judge(extra, 1, 2, at(60)) is None  # rank 7 is not in a group of 2


# ----------------------------------------------------------------------------- no false positives


def test_nothing_is_judged_before_the_first_step() -> None:
    # rendezvous, imports, a checkpoint being restored: alive, no step yet, for a long time
    starting = [rank(0, 0, heard=600), rank(1, 0, heard=600)]
    assert judge(starting, 1, 2, at(600)) is None
    # one rank stuck in startup with a stale heartbeat is not judged either
    assert judge([rank(0, 0, heard=600), rank(1, 0, heard=0)], 1, 2, at(600)) is None


def test_a_rank_saving_a_checkpoint_is_given_an_hour() -> None:
    saving = [rank(0, heard=600, saving=True), rank(1, heard=600, saving=True)]
    assert judge(saving, 1, 2, at(600)) is None
    later = SAVING_BOUND_S + 1
    saving = [rank(0, heard=later, saving=True), rank(1, heard=later, saving=True)]
    assert judge(saving, 1, 2, at(later)) is not None


def test_a_rank_stopped_while_saving_is_judged_like_any_other() -> None:
    group = [rank(0, heard=60, saving=True), rank(1, heard=5, saving=True)]
    hang = judge(group, 1, 2, at(60))
    assert hang is not None and hang.ranks == (1,)


def test_nothing_is_judged_when_no_rank_is_heard() -> None:
    # every heartbeat stale: the controller may be cut off from the job (an API outage)
    assert judge([rank(0, heard=0), rank(1, heard=0)], 1, 2, at(600)) is None


def test_a_job_that_turned_detection_off_is_never_judged() -> None:
    off = [rank(0, heard=9000, hang_timeout_s=0), rank(1, heard=9000, hang_timeout_s=0)]
    assert judge(off, 1, 2, at(9000)) is None
    assert judge([], 1, 2, at(9000)) is None  # a loop without adl's library sends nothing


# ----------------------------------------------------------------------------- the book


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_the_book_stamps_heartbeats_with_its_own_clock_and_tracks_progress() -> None:
    clock = Clock()
    book = ProgressBook(clock)
    book.record("ns/a", Heartbeat(group=1, rank=0, steps=5, step_time_s=0.1))
    clock.now = at(10)
    book.record("ns/a", Heartbeat(group=1, rank=0, steps=5, step_time_s=0.1))
    (p,) = book.snapshot("ns/a")
    assert (p.heard_at, p.progress_at, p.steps) == (at(10), T0, 5)  # heard, but no progress
    clock.now = at(20)
    book.record("ns/a", Heartbeat(group=1, rank=0, steps=6))
    (p,) = book.snapshot("ns/a")
    assert p.progress_at == at(20)
    assert book.snapshot("ns/b") == ()
    book.forget("ns/a")
    assert book.snapshot("ns/a") == ()


def test_the_book_keeps_only_the_newest_groups() -> None:
    book = ProgressBook(Clock())
    for g in (1, 2, 3):
        book.record("ns/a", Heartbeat(group=g, rank=0, steps=1))
    assert sorted(p.group for p in book.snapshot("ns/a")) == [2, 3]
    book.record("ns/a", Heartbeat(group=1, rank=0, steps=1))  # a late one of an old group
    assert sorted(p.group for p in book.snapshot("ns/a")) == [2, 3]


@pytest.mark.parametrize(
    "bad",
    [
        {"rank": -1},
        {"rank": 4096},
        {"steps": -1},
        {"steps": 2**60},
        {"stepTimeS": -1.0},
        {"stepTimeS": 1e9},
        {"intervalS": 0.1},
        {"intervalS": 3600},
        {"hangTimeoutS": 1},  # below the 5 s floor's floor (0 is "off")
        {"hangTimeoutS": 1e9},
        {"hangStepMultiple": 1},
        {"hangStepMultiple": 1e6},
        {"unknown": 1},
    ],
)
def test_every_number_a_worker_sends_is_bounded(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Heartbeat.model_validate({"group": 1, "rank": 0, "steps": 1} | bad)
    assert Heartbeat.model_validate({"group": 1, "rank": 0, "steps": 1, "hangTimeoutS": 0})


# ----------------------------------------------------------------------------- the lifecycle


def _spec() -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate(
        {
            "template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}},
            "maxRestarts": 2,
            "terminationGracePeriodSeconds": 30,
        }
    )


def _running(progress: tuple[RankProgress, ...]) -> ObservedWorkers:
    replicas = tuple(ReplicaState(1, r, ReplicaPhase.RUNNING) for r in range(2))
    return ObservedWorkers(replicas, progress=progress)


def test_a_hung_running_group_is_killed_at_once_and_restarted_as_a_failure() -> None:
    st = AdaptiveJobStatus(phase=Phase.RUNNING, group=1, allocation=["n0", "n0"], replicas=2)
    observed = _running((rank(0, heard=60, moved=10), rank(1, heard=10, moved=10)))
    actions = step("ns/a", _spec(), st, observed, ["n0", "n0"], at(60))
    (set_status,) = [a for a in actions if isinstance(a, SetStatus)]
    new = set_status.status
    assert new.phase == Phase.RESTARTING and new.reason == "NoProgress"
    assert new.message.startswith("rank 1 made no progress for 50 s")
    assert new.restarts == {RestartCause.FAILURE: 1}
    assert new.restart_after is not None  # the failure backoff applies
    cond = next(c for c in new.conditions if c.type == "Progressing")
    assert (cond.status, cond.reason, cond.message) == ("False", "NoProgress", new.message)
    assert [a for a in actions if isinstance(a, DeleteGroup)] == [DeleteGroup("ns/a", 1, 0)]
    (event,) = [a for a in actions if isinstance(a, EmitEvent)]
    assert (event.type, event.reason, event.message) == ("Warning", "NoProgress", new.message)


def test_a_healthy_running_group_is_left_alone_and_a_hang_clears_once_the_next_trains() -> None:
    st = AdaptiveJobStatus(phase=Phase.RUNNING, group=1, allocation=["n0", "n0"], replicas=2)
    healthy = _running((rank(0, heard=60, moved=59), rank(1, heard=60, moved=59)))
    quiet = step("ns/a", _spec(), st, healthy, ["n0", "n0"], at(60))
    assert not [a for a in quiet if isinstance(a, (DeleteGroup, EmitEvent))], quiet
    hung = _running((rank(0, heard=60, moved=10), rank(1, heard=10, moved=10)))
    (after,) = [
        a.status
        for a in step("ns/a", _spec(), st, hung, ["n0", "n0"], at(60))
        if isinstance(a, SetStatus)
    ]
    # the next group runs: the condition stays False until it reports a step
    nxt = after.model_copy(update={"phase": Phase.RUNNING, "group": 2, "restart_after": None})
    replicas = tuple(ReplicaState(2, r, ReplicaPhase.RUNNING) for r in range(2))
    starting = ObservedWorkers(replicas, progress=(rank(0, 0, group=2, heard=90),))
    out = step("ns/a", _spec(), nxt, starting, ["n0", "n0"], at(90))
    kept = [a.status for a in out if isinstance(a, SetStatus)] or [nxt]
    assert next(c for c in kept[0].conditions if c.type == "Progressing").status == "False"
    training = ObservedWorkers(replicas, progress=(rank(0, 3, group=2, heard=95, moved=95),))
    out = step("ns/a", _spec(), nxt, training, ["n0", "n0"], at(95))
    (cleared,) = [a.status for a in out if isinstance(a, SetStatus)]
    cond = next(c for c in cleared.conditions if c.type == "Progressing")
    assert (cond.status, cond.reason) == ("True", "Training")
    assert not [a for a in out if isinstance(a, DeleteGroup)]
