"""``adl.track``: the script's own objects in every checkpoint.

Apart from :mod:`adl.client_lib.checkpoint` because ``track`` joins the job on first use
(:func:`adl.client_lib.env.context`), and the checkpoint files must not depend on joining.
"""

from __future__ import annotations

from typing import Any

from adl.client_lib.env import context


class Tracked:
    """Checkpoint adapter for anything with ``state_dict``/``load_state_dict`` (model, optimizer,
    LR scheduler, GradScaler) in scripts that do not use AdaptiveDataParallel, or for a plain
    dict of the script's own state (restored in place)."""

    def __init__(self, name: str, obj: Any) -> None:
        if not isinstance(obj, dict) and not (
            hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")
        ):
            raise TypeError(
                f"cannot checkpoint {name!r}: give a dict or an object with state_dict() and "
                f"load_state_dict(), not {type(obj).__name__}"
            )
        self.name = name
        self.obj = obj

    def state_dict(self) -> Any:
        if isinstance(self.obj, dict):
            return dict(self.obj)
        return self.obj.state_dict()

    def load_state_dict(self, state: Any) -> None:
        if isinstance(self.obj, dict):
            self.obj.clear()
            self.obj.update(state)
        else:
            self.obj.load_state_dict(state)


def track(name: str, obj: Any) -> bool:
    """Include ``obj`` (a dict of the script's own state, or anything with ``state_dict`` and
    ``load_state_dict``) in every checkpoint under ``name``; True if it was just restored.
    Every rank should track the same names; rank 0's copy is the one saved.

    Calling it again with the same name (say, in a function run every epoch) is allowed: the
    same object stays tracked as it is; another object replaces it from then on."""
    ctx = context()
    current = ctx.state(name)
    if isinstance(current, Tracked):
        if current.obj is obj:
            return False
        ctx.unregister(name)
    return ctx.register(Tracked(name, obj))
