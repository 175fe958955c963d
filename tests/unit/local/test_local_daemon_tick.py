"""The daemon's tick: a user's write that lands while a round runs is not lost to the round.

``tick`` reloads the store, steps every job, runs a round when one is due, then reloads again.
A write that arrives between the round and that last reload (``adl suspend`` just then) was
loaded without asking for a round, so no round saw the job suspended until ``round_s`` later:
its pre-suspension answer stayed recorded, and a quick ``adl resume`` started its next group on
that stale answer, only to resize it once a round ran (seen under load in the sharded example
test as an extra group)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from local_kit import counter_spec

from adl.local.daemon import Daemon, Settings
from adl.sched.types import Allocation, JobInfo, NodeInfo


class Idle:
    """Gives no job anything (no worker ever starts); records who it was asked about."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        self.asked.append(sorted(j.name for j in jobs))
        return {}


def test_a_suspend_written_during_a_round_gets_a_round_of_its_own(tmp_path: Path) -> None:
    policy = Idle()
    settings = Settings(home=tmp_path / "home", api=False, round_s=3600.0)
    daemon = Daemon(settings, policy_factory=lambda: policy)
    try:
        for name in ("stays", "pauses"):
            daemon.store.add_job("default", name, counter_spec())
        real_schedule = daemon.schedule

        def schedule_then_user_writes(now):  # type: ignore[no-untyped-def]
            real_schedule(now)
            if len(policy.asked) == 1:
                daemon.store.set_suspend("default/pauses", True)

        daemon.schedule = schedule_then_user_writes  # type: ignore[method-assign]
        daemon.tick()  # the first round (one is always due at start); the suspend lands after it
        assert policy.asked == [["default/pauses", "default/stays"]]
        daemon.tick()  # round_s is an hour away: only the write can make this round due
        assert policy.asked[1:] == [["default/stays"]]
    finally:
        daemon.store.close()
