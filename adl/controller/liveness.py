"""Hung-rank detection: which rank of a running group makes no step progress, from the
heartbeats every rank sends.

Each rank sends a heartbeat (``adl.models.Heartbeat``) every few seconds from a background
thread: its step count, its own recent step time, whether it is saving a checkpoint. The API
service hands each one to the backend's ``ProgressBook``, which stamps it with the
controller's clock (no worker clock is trusted) and remembers when the rank's step count last
moved. The backend puts the book's snapshot of a job into what it observes
(``ObservedWorkers.progress``), and the lifecycle asks :func:`judge` whether the group hangs.

The rule (pure; ``now`` is an argument):

- a rank's bound is ``max(floor, multiple x its step time)``, the floor 45 s and the multiple 10
  unless the job asks otherwise (``ADL_HANG_TIMEOUT_S``, ``ADL_HANG_STEP_MULTIPLE``, within
  ``adl.models``' bounds; a floor of 0 turns detection off), at most a day;
- the group hangs when every rank has made no progress for longer than its own bound: in a
  synchronous job one stuck rank stops every other at its next collective, and one rank that
  still moves means the group moves;
- nothing is judged before the first step (startup, rendezvous and restoring a checkpoint
  take their time) nor while no rank's heartbeat is fresh (the controller may be cut off from
  the job, as in an outage of the API); a rank saving a checkpoint, and saying so in a fresh
  heartbeat, is given an hour while every rank of the group is heard (beside a silent rank,
  the others are waiting for it in the save's collective);
- the rank named is the one whose heartbeat stopped (a process stopped with SIGSTOP, or stuck
  in the kernel, sends nothing; its peers, blocked in a collective, still send theirs), or one
  that never sent any; else the ranks behind the others; else all of them.

A hang is a failure: the lifecycle kills the group at once (a stopped process does not act on
SIGTERM, and its peers are blocked where they cannot checkpoint) and starts the next one from
the last checkpoint, after the failure backoff, within ``spec.maxRestarts``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from adl.models import Heartbeat

#: the bound's floor and multiple when the job sets neither
DEFAULT_HANG_TIMEOUT_S = 45.0
DEFAULT_STEP_MULTIPLE = 10.0
#: the longest bound, whatever the step time (a day)
MAX_BOUND_S = 86400.0
#: a rank that says it is saving a checkpoint may make no progress for this long
SAVING_BOUND_S = 3600.0
#: a heartbeat is stale once this many of its intervals, plus the slack, passed without another
STALE_INTERVALS = 3.0
STALE_SLACK_S = 2.0
#: the groups of a job the book keeps (the current one, and the one it replaced)
KEPT_GROUPS = 2


@dataclass(frozen=True)
class RankProgress:
    """What the controller knows of one rank's progress, by its own clock."""

    group: int
    rank: int
    steps: int
    heard_at: datetime  # when its last heartbeat arrived
    progress_at: datetime  # when its step count last changed (else its first heartbeat)
    interval_s: float = 5.0
    step_time_s: float | None = None
    saving: bool = False
    hang_timeout_s: float | None = None
    hang_step_multiple: float | None = None

    def stale(self, now: datetime) -> bool:
        """Whether its heartbeat stopped: no heartbeat for several of its intervals."""
        silent = (now - self.heard_at).total_seconds()
        return silent > STALE_INTERVALS * self.interval_s + STALE_SLACK_S

    @property
    def floor_s(self) -> float:
        return DEFAULT_HANG_TIMEOUT_S if self.hang_timeout_s is None else self.hang_timeout_s

    @property
    def multiple(self) -> float:
        return DEFAULT_STEP_MULTIPLE if self.hang_step_multiple is None else self.hang_step_multiple

    def bound_s(self, step_time_s: float | None = None) -> float:
        """How long it may make no progress (0: detection off): the floor, or the multiple of
        its step time (``step_time_s`` where its own is unknown) when that is longer."""
        if self.floor_s <= 0:
            return 0.0
        step = self.step_time_s if self.step_time_s is not None else step_time_s
        return min(max(self.floor_s, self.multiple * (step or 0.0)), MAX_BOUND_S)


@dataclass(frozen=True)
class Hang:
    """A group that makes no progress, and the ranks to name."""

    group: int
    ranks: tuple[int, ...]
    quiet_s: float  # how long the named ranks made no progress (the least of them)
    bound_s: float
    floor_s: float
    multiple: float
    step_time_s: float | None
    silent_s: float | None  # how long their heartbeat has been silent (None: never heard)
    why: str  # "silent" | "unheard" | "behind" | "all"

    @property
    def message(self) -> str:
        """``rank 1 made no progress for 47 s (its heartbeat stopped 46 s ago; ...)``."""
        many = len(self.ranks) > 1
        who = f"rank{'s' if many else ''} {', '.join(str(r) for r in self.ranks)}"
        head = f"{who} made no progress for {self.quiet_s:.0f} s"
        its = "their" if many else "its"
        detail = {
            "silent": f"{its} heartbeat stopped {self.silent_s or 0:.0f} s ago: stopped or "
            "stuck outside Python; the others wait for it",
            "unheard": f"no heartbeat from {'them' if many else 'it'} in this group",
            "behind": "behind the other ranks, which wait for it",
            "all": "every rank alive but stuck (a deadlock?)",
        }[self.why]
        step = f"{self.step_time_s:.2g} s" if self.step_time_s is not None else "unknown"
        limit = (
            f"the limit is {self.bound_s:.0f} s: the larger of {self.floor_s:g} s and "
            f"{self.multiple:g} steps of {step}"
        )
        return f"{head} ({detail}; {limit}); group {self.group} killed, restarting it"


def judge(
    progress: Sequence[RankProgress], group: int, world_size: int, now: datetime
) -> Hang | None:
    """Whether ``group`` (of ``world_size`` ranks) hangs at ``now``; see the module's rule."""
    mine = {p.rank: p for p in progress if p.group == group and 0 <= p.rank < world_size}
    if not mine or not any(p.steps > 0 for p in mine.values()):
        return None  # no heartbeats (a loop without adl's library), or not at its first step
    fresh = [p for p in mine.values() if not p.stale(now)]
    if not fresh:
        return None  # nobody heard: the controller may be cut off from the job
    known = [p.step_time_s for p in mine.values() if p.step_time_s is not None]
    slowest = max(known) if known else None
    like = fresh[0]  # the job's settings, for a rank never heard of
    # a save is given its time only while every rank is heard: ranks "saving" beside a silent
    # one are waiting for it in the save's collective
    all_heard = len(fresh) == world_size
    first_heard = min(p.progress_at for p in mine.values())
    quiet: dict[int, float] = {}
    bounds: dict[int, float] = {}
    for rank in range(world_size):
        p = mine.get(rank)
        if p is None:
            bound = like.bound_s(slowest)
            since = first_heard
        else:
            bound = p.bound_s(slowest)
            since = p.progress_at
            if p.saving and all_heard and bound > 0:
                bound = max(bound, SAVING_BOUND_S)
        if bound <= 0:
            return None  # the job turned detection off
        quiet[rank] = (now - since).total_seconds()
        bounds[rank] = bound
        if quiet[rank] <= bound:
            return None  # this rank moved recently: the group moves
    silent = sorted(p.rank for p in mine.values() if p.stale(now))
    unheard = sorted(r for r in range(world_size) if r not in mine)
    if silent or unheard:
        named, why = tuple(silent or unheard), "silent" if silent else "unheard"
    else:
        least = min(p.steps for p in mine.values())
        behind = tuple(sorted(r for r, p in mine.items() if p.steps == least))
        named, why = (behind, "behind") if len(behind) < len(mine) else (behind, "all")
    first = mine.get(named[0])
    silent_s = (now - first.heard_at).total_seconds() if first is not None else None
    settings = first or like
    return Hang(
        group=group,
        ranks=named,
        quiet_s=min(quiet[r] for r in named),
        bound_s=max(bounds[r] for r in named),
        floor_s=settings.floor_s,
        multiple=settings.multiple,
        step_time_s=settings.step_time_s if settings.step_time_s is not None else slowest,
        silent_s=silent_s,
        why=why,
    )


def progressing(progress: Sequence[RankProgress], group: int) -> bool:
    """Whether a rank of ``group`` reached its first step (the group trains)."""
    return any(p.group == group and p.steps > 0 for p in progress)


class ProgressBook:
    """The heartbeats of every job, as the controller received them (thread-safe: the API
    writes from its threads, the backend's loop reads). In memory: a restarted controller
    starts from its first heartbeats, and judges a rank it never heard from as of then."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[tuple[int, int], RankProgress]] = {}

    def record(self, job: str, beat: Heartbeat) -> None:
        """A heartbeat of ``job`` arrived now. A heartbeat of a group older than the ones kept
        is dropped, and only the newest ``KEPT_GROUPS`` groups are kept (bounded memory, and a
        group number from nowhere cannot push the current group out for long)."""
        now = self.clock()
        key = (beat.group, beat.rank)
        with self._lock:
            ranks = self._jobs.setdefault(job, {})
            groups = sorted({g for g, _ in ranks} | {beat.group}, reverse=True)[:KEPT_GROUPS]
            if beat.group not in groups:
                return
            old = ranks.get(key)
            moved = old is None or old.steps != beat.steps
            ranks[key] = RankProgress(
                group=beat.group,
                rank=beat.rank,
                steps=beat.steps,
                heard_at=now,
                progress_at=now if moved or old is None else old.progress_at,
                interval_s=beat.interval_s,
                step_time_s=beat.step_time_s,
                saving=beat.saving,
                hang_timeout_s=beat.hang_timeout_s,
                hang_step_multiple=beat.hang_step_multiple,
            )
            for k in [k for k in ranks if k[0] not in groups]:
                del ranks[k]

    def snapshot(self, job: str) -> tuple[RankProgress, ...]:
        with self._lock:
            return tuple(self._jobs.get(job, {}).values())

    def forget(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)
