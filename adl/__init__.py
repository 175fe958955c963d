"""adl: elastic deep-learning training scheduler.

The user-facing training API lives in :mod:`adl.client_lib` and needs torch; it is re-exported
here lazily so that ``import adl`` (the operator, the scheduler, the CLI) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "init_process_group": "adl.client_lib.env",
    "AdaptiveDataLoader": "adl.client_lib.data",
    "AdaptiveDataParallel": "adl.client_lib.parallel",
    "AdaptiveShardedDataParallel": "adl.client_lib.sharded",
    "job_mesh": "adl.client_lib.sharded",
    "remaining_epochs_until": "adl.client_lib.epoch",
    "current_epoch": "adl.client_lib.epoch",
    "Accumulator": "adl.client_lib.accumulator",
    "track": "adl.client_lib.tracked",
    "check_preemption": "adl.client_lib.preemption",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'adl' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
