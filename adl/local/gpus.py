"""The local machine's GPUs as the daemon may use them, found without importing torch."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from adl.contract import normalize_gpu_type


def visible_gpus() -> list[str] | None:
    """The daemon's own ``CUDA_VISIBLE_DEVICES`` entries (indices, UUIDs or MIG ids, kept as
    given), or None when it is unset and every GPU of the machine is ours."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]


def gpu_ids(count: int) -> list[str]:
    """What GPU slot i is called in a rank's ``CUDA_VISIBLE_DEVICES``: entry i of the daemon's
    own list (a daemon given GPUs 2,3 hands out 2 and 3, not 0 and 1), else i."""
    visible = visible_gpus()
    return visible[:count] if visible is not None else [str(i) for i in range(count)]


def _nvidia_smi_list() -> str | None:
    """``nvidia-smi -L``: one ``GPU i: NAME (UUID: GPU-...)`` line per GPU (None: no tool)."""
    nvsmi = shutil.which("nvidia-smi")
    if nvsmi is None:
        return None
    try:
        return subprocess.run([nvsmi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def detect_gpus() -> int:
    """NVIDIA GPUs visible on this machine."""
    visible = visible_gpus()
    if visible is not None:
        return len(visible)
    out = _nvidia_smi_list()
    if out is None:
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


_GPU_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)")


def gpu_types_from_list(listing: str, slots: list[str]) -> list[str]:
    """The type of each slot (an index or a UUID, as ``CUDA_VISIBLE_DEVICES`` names it) from an
    ``nvidia-smi -L`` listing, written as a node label writes it; "" where not listed (a MIG
    instance, a GPU gone)."""
    names: dict[str, str] = {}
    for line in listing.splitlines():
        m = _GPU_LINE.match(line.strip())
        if m:
            index, name, uuid = m.groups()
            names[index] = names[uuid] = normalize_gpu_type(name)
    return [names.get(slot, "") for slot in slots]


def detect_gpu_types(count: int) -> list[str]:
    """The type of each of the daemon's ``count`` GPU slots (``NVIDIA-A100-SXM4-80GB``; "" where
    unknown). From ``nvidia-smi -L``, which names GPUs as ``torch.cuda.get_device_name`` does
    (both ask the driver) without importing torch, which would cost the daemon seconds at
    every start; from torch only where nvidia-smi is missing and torch with CUDA is installed."""
    if count <= 0:
        return []
    listing = _nvidia_smi_list()
    if listing is not None:
        return gpu_types_from_list(listing, gpu_ids(count))
    if importlib.util.find_spec("torch") is None:
        return [""] * count
    try:
        import torch

        if not torch.cuda.is_available():
            return [""] * count
        found = [normalize_gpu_type(torch.cuda.get_device_name(i)) for i in range(count)]
    except Exception:  # a broken driver: the types are unknown, the GPUs still usable
        return [""] * count
    return (found + [""] * count)[:count]


#: the one node of a machine whose slots are CPUs or GPUs of one type
LOCAL_NODE = "local"


@dataclass(frozen=True)
class LocalNode:
    """A node of the local cluster: ``slots`` GPUs (``devices``, the daemon's GPU slot
    indices) of one type, or CPU slots (no devices, type "")."""

    name: str
    gpu_type: str
    slots: int
    devices: tuple[int, ...]


def local_nodes(slots: int, gpu_types: Sequence[str]) -> list[LocalNode]:
    """The local cluster: one node ``local`` while every slot is of one type (``gpu_types``:
    each GPU slot's type, "" where unknown; empty for CPU slots), else one node per type,
    ``local-<type>`` in the order of its first GPU (``local-unknown`` for GPUs the driver
    did not name). A data-parallel step waits for its slowest GPU and the policy keeps each
    job on one node type, so a node per type is what keeps a job off an A100 and a T4 at once."""
    if not gpu_types:
        return [LocalNode(LOCAL_NODE, "", slots, ())]
    by_type: dict[str, list[int]] = {}
    for index, gpu_type in enumerate(gpu_types):
        by_type.setdefault(gpu_type, []).append(index)
    if len(by_type) == 1:
        ((gpu_type, devices),) = by_type.items()
        return [LocalNode(LOCAL_NODE, gpu_type, len(devices), tuple(devices))]
    return [
        LocalNode(f"{LOCAL_NODE}-{gpu_type or 'unknown'}", gpu_type, len(devices), tuple(devices))
        for gpu_type, devices in by_type.items()
    ]


def slot_types(gpus: int, gpu_types: Sequence[str]) -> list[str]:
    """Each of ``gpus`` GPU slots' type ("" where not known); empty for CPU slots."""
    return [*gpu_types, *[""] * gpus][:gpus] if gpus > 0 else []
