"""Epoch loop that survives restarts: ``for epoch in remaining_epochs_until(n)``.

The current epoch is part of the checkpoint: a job stopped during epoch 3 resumes in epoch 3
(the data loader then continues from the sample where it stopped), not at epoch 0. Declaring
``n`` also tells the scheduler the length of the run (``total_progress`` in the hints).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from adl.client_lib.context import JobContext
from adl.client_lib.env import context

STATE_NAME = "adl.epoch"


class EpochState:
    """The checkpointed epoch counter; ``active`` while inside ``remaining_epochs_until``."""

    name = STATE_NAME

    def __init__(self) -> None:
        self.epoch = 0
        self.active = False
        # In this process only (not checkpointed): whether a remaining_epochs_until loop has
        # ended, so code after it is told apart from code before it (see ``segment``).
        self.looped = False

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])


def epoch_state(ctx: JobContext | None = None) -> EpochState:
    """The job's epoch state, registered (and restored) on first use."""
    ctx = ctx or context()
    state = ctx.states.get(STATE_NAME)
    if state is None:
        state = EpochState()
        ctx.register(state)
    assert isinstance(state, EpochState)
    return state


def remaining_epochs_until(epochs: int) -> Iterator[int]:
    """Yield the epochs still to run, starting from the one the last checkpoint was in."""
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    ctx = context()
    ctx.total_epochs = epochs
    state = epoch_state(ctx)
    state.active = True
    try:
        while state.epoch < epochs:
            yield state.epoch
            state.epoch += 1
    finally:
        state.active = False
        state.looped = True
    # every declared epoch ran: say so at once (a final hints report), so the status shows the
    # finished progress and the scheduler leaves the job its GPUs while it saves and exits
    for hook in list(ctx.work_done_hooks):
        hook()


def declared_epochs_done(ctx: Any) -> bool:
    """Whether every epoch declared to ``remaining_epochs_until`` has run (in this process or
    before the checkpoint it resumed from)."""
    states = getattr(ctx, "states", None)
    state = states.get(STATE_NAME) if isinstance(states, dict) else None
    total = getattr(ctx, "total_epochs", None)
    if not isinstance(state, EpochState) or not isinstance(total, int) or total <= 0:
        return False
    return state.epoch >= total


def current_epoch() -> int | None:
    """The epoch being run by ``remaining_epochs_until``, or None outside that loop."""
    ctx = context()
    state = ctx.states.get(STATE_NAME)
    if isinstance(state, EpochState) and state.active:
        return state.epoch
    return None


BEFORE = "before"
AFTER = "after"


def segment(ctx: JobContext) -> str | int:
    """Which part of the script runs now, in terms a restart replays identically: the epoch of
    an active ``remaining_epochs_until`` loop, or the code ``BEFORE`` or ``AFTER`` that loop.

    A restarted script runs the code before the loop again, skips the finished epochs and
    re-enters the epoch it stopped in, so two objects created at the same point of the same
    segment are the same object across a restart (see :mod:`adl.client_lib.accumulator`).
    """
    state = ctx.state(STATE_NAME)
    if isinstance(state, EpochState):
        if state.active:
            return state.epoch
        if state.looped:
            return AFTER
    return BEFORE
