"""Random event sequences against a fake backend that executes the controller's actions, and
sometimes crashes half-way through them. Whatever happens, the invariants hold: two groups of one
job never run at once, counters never go back, finished is final, and a calm period converges."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from adl.controller.actions import CreateGroup, DeleteGroup, SetStatus
from adl.controller.lifecycle import (
    EXIT_STOPPED,
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    Timing,
    step,
)
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase, RestartCause

JOB = "ns/j"
START = datetime(2024, 1, 1, tzinfo=UTC)
SHAPES = [[], ["n0"], ["n0", "n0"], ["n0", "n1", "n1"]]
TIMING = Timing(backoff_base_s=10, backoff_max_s=40, pending_timeout_s=60)


class FakeBackend:
    def __init__(self) -> None:
        self.replicas: dict[tuple[int, int], ReplicaState] = {}
        self.status = AdaptiveJobStatus()
        self.creates = 0

    def observed(self) -> ObservedWorkers:
        return ObservedWorkers(tuple(self.replicas.values()))

    def alive_groups(self) -> set[int]:
        return {g for (g, _), r in self.replicas.items() if r.alive}

    def execute(self, actions: list, now: datetime, crash_after: int | None) -> None:
        for i, action in enumerate(actions):
            if crash_after is not None and i >= crash_after:
                return  # the backend died; the next step must finish the work
            if isinstance(action, SetStatus):
                self.status = action.status
            elif isinstance(action, CreateGroup):
                others = self.alive_groups() - {action.group}
                assert not others, f"group {action.group} created while {others} alive"
                for rank in action.ranks:
                    assert (action.group, rank) not in self.replicas, "duplicate replica"
                    self.replicas[(action.group, rank)] = ReplicaState(
                        action.group, rank, ReplicaPhase.PENDING, since=now
                    )
                    self.creates += 1
            elif isinstance(action, DeleteGroup):
                for key, r in self.replicas.items():
                    if key[0] == action.group and r.alive:
                        self.replicas[key] = replace(r, terminating=True)

    def world_moves(self, rng: random.Random, calm: bool) -> None:
        """Replicas make progress; outside calm periods, bad things happen."""
        for key, r in list(self.replicas.items()):
            if r.terminating and r.alive and rng.random() < 0.5:
                self.replicas[key] = ReplicaState.exited(key[0], key[1], EXIT_STOPPED)
            elif r.phase == ReplicaPhase.PENDING and rng.random() < 0.6:
                self.replicas[key] = replace(r, phase=ReplicaPhase.RUNNING)
            elif r.phase == ReplicaPhase.RUNNING and not calm:
                roll = rng.random()
                if roll < 0.03:
                    self.replicas[key] = ReplicaState.exited(key[0], key[1], 1)
                elif roll < 0.04:
                    self.replicas[key] = ReplicaState.exited(key[0], key[1], EXIT_STOPPED)
                elif roll < 0.05:
                    del self.replicas[key]  # vanished (node lost)

    def finish_training(self) -> None:
        for key, r in list(self.replicas.items()):
            if r.phase == ReplicaPhase.RUNNING and not r.terminating:
                self.replicas[key] = ReplicaState.exited(key[0], key[1], 0)


def _counters(st: AdaptiveJobStatus) -> tuple[int, ...]:
    return (st.group, *(st.restart_count(c) for c in RestartCause))


@pytest.mark.parametrize("seed", range(60))
def test_random_histories_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    spec = AdaptiveJobSpec(
        template={"spec": {"containers": [{"name": "t", "command": ["x"]}]}},
        min_replicas=1,
        max_restarts=rng.choice([0, 2, 5]),
        termination_grace_period_seconds=5,
    )
    backend, desired = FakeBackend(), rng.choice(SHAPES)
    now = START
    for tick in range(160):
        calm = tick >= 80
        if not calm:
            if rng.random() < 0.1:
                desired = rng.choice(SHAPES)
            if rng.random() < 0.04:
                spec = spec.model_copy(update={"suspend": not spec.suspend})
        else:
            desired = ["n0", "n0"]
            spec = spec.model_copy(update={"suspend": False})
        before = backend.status
        actions = step(JOB, spec, before, backend.observed(), desired, now, TIMING)
        crash = rng.randrange(len(actions)) if actions and not calm and rng.random() < 0.1 else None
        backend.execute(actions, now, crash)
        after = backend.status
        assert all(a >= b for a, b in zip(_counters(after), _counters(before), strict=True))
        if before.phase.finished:
            assert after.phase == before.phase
        if after.phase == Phase.FAILED:
            assert after.restart_count(RestartCause.FAILURE) > spec.max_restarts
            assert after.reason and "maxRestarts" in after.message
        assert after.restart_count(RestartCause.FAILURE) <= spec.max_restarts + 1
        assert len(backend.alive_groups()) <= 1, "two groups alive at once"
        backend.world_moves(rng, calm)
        if tick == 150:
            backend.finish_training()
        now += timedelta(seconds=5)
    # after a calm period and the end of training, every job is finished
    final = backend.status
    assert final.phase.finished, (final.phase, final.reason, final.message)
    assert not backend.alive_groups()
    if final.phase == Phase.SUCCEEDED:
        assert final.completion_time is not None
        assert {c.type: c.status for c in final.conditions}["Complete"] == "True"
