"""How the local daemon runs: its state directory, slots, timings (``adl local up``'s options).
A module of its own so that the worker groups (:mod:`adl.local.groups`) read them without
importing the daemon that owns them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from adl.controller.lifecycle import Timing


@dataclass
class Settings:
    home: Path
    slots: int = 4
    gpus: int = 0  # > 0: slots are GPUs, each group gets CUDA_VISIBLE_DEVICES
    round_s: float = 5.0
    tick_s: float = 0.2
    api: bool = True
    timing: Timing = field(default_factory=Timing)
    kill_margin_s: float = 5.0  # SIGKILL the group this long after its grace period
    prewarm: bool = True  # CPU slots: keep the next group's shim ready (torch imported)
    #: the type of each GPU slot (``adl.local.gpus.detect_gpu_types``); none for CPU slots
    gpu_types: tuple[str, ...] = ()
