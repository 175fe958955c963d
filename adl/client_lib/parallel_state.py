"""What AdaptiveDataParallel saves to resume a job, and its entry in the checkpoint registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adl.client_lib.parallel import AdaptiveDataParallel


def adaptive_state_dict(adp: AdaptiveDataParallel, with_weights: bool = True) -> dict[str, Any]:
    """Everything to resume: model, optimizer, scheduler, scaler, statistics, progress
    (``with_weights=False``: all but the model and the optimizer, which a sharded job saves
    through DCP)."""
    adp.gns.publish()
    if adp._tensorboard is not None:  # the scalars so far reach the disk with the checkpoint
        adp._tensorboard.checkpoint(adp)
    state: dict[str, Any] = {
        "gns": adp.gns.state_dict(),
        "progress": adp.progress.state_dict(),
        "profile": adp.profile.state_dict(),
        "init_batch_size": adp._init_batch_size,
        "sched_ticks": adp._scheduler.ticks,
    }
    if with_weights:
        state["model"] = adp._model.state_dict()
        state["optimizer"] = adp.optimizer.state_dict()
    if adp.lr_scheduler is not None:
        state["lr_scheduler"] = adp.lr_scheduler.state_dict()
    if adp.grad_scaler is not None:
        state["grad_scaler"] = adp.grad_scaler.state_dict()
    return state


def load_adaptive_state_dict(
    adp: AdaptiveDataParallel, state: dict[str, Any], with_weights: bool = True
) -> None:
    if with_weights:
        adp._model.load_state_dict(state["model"])
        adp.optimizer.load_state_dict(state["optimizer"])
    adp.gns.load_state_dict(state["gns"])
    adp.progress.load_state_dict(state["progress"])
    adp.profile.load_state_dict(state["profile"])
    if state.get("init_batch_size") is not None:
        adp._init_batch_size = int(state["init_batch_size"])
    adp._scheduler.ticks = int(state.get("sched_ticks", 0))
    if adp.lr_scheduler is not None and "lr_scheduler" in state:
        adp.lr_scheduler.load_state_dict(state["lr_scheduler"])
    if adp.grad_scaler is not None and "grad_scaler" in state:
        adp.grad_scaler.load_state_dict(state["grad_scaler"])


class CheckpointState:
    """Adapter between the wrapper and the job's checkpoint registry."""

    def __init__(self, adp: AdaptiveDataParallel) -> None:
        self._adp = adp
        self.name = adp.name

    def state_dict(self) -> dict[str, Any]:
        return self._adp.adaptive_state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._adp.load_adaptive_state_dict(state)
