"""Checkpoint files: one writer, atomic replacement, safe loading.

A checkpoint is one file, ``adl-checkpoint.pt`` in ``ADL_CHECKPOINT_DIR``, holding
``{"format": 1, "states": {name: state_dict}}``. Rank 0 writes it to a temporary file in the same
directory, fsyncs it and renames it over the old one, so a crash at any moment (kill -9 included)
leaves either the previous checkpoint or the new one, never a torn file. Loading uses
``torch.load(weights_only=True)``: tensors and plain containers only, no arbitrary pickle code.
States describe the global job (not one rank), so a checkpoint loads at any world size.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from adl.client_lib.restart_cost import SAVED_AT

if TYPE_CHECKING:
    from adl.client_lib.context import JobContext

log = logging.getLogger(__name__)

FILENAME = "adl-checkpoint.pt"
FORMAT = 1
_TMP_PREFIX = ".adl-checkpoint-"
_TMP_SUFFIX = ".tmp"


class CheckpointError(RuntimeError):
    """The checkpoint file exists but is not one this library wrote."""


def checkpoint_path(directory: Path) -> Path:
    return Path(directory) / FILENAME


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_stale_temporaries(directory: Path) -> None:
    for stale in directory.glob(f"{_TMP_PREFIX}*{_TMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            stale.unlink()


def write(directory: Path, states: dict[str, Any], saved_at: float | None = None) -> Path:
    """Write ``states`` atomically (temp file + fsync + rename); return the checkpoint path.
    ``saved_at``: the wall time the save began (what a restart costs is measured from it)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(directory)
    payload: dict[str, Any] = {"format": FORMAT, "states": states}
    if saved_at is not None:
        payload[SAVED_AT] = float(saved_at)
    fd, tmp_name = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=directory)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; a checkpoint is as readable as the dir
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        _check_loadable(tmp, states)
        final = checkpoint_path(directory)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return final


def _loads(data: bytes | Path) -> None:
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    torch.load(source, map_location="cpu", weights_only=True, mmap=not isinstance(data, bytes))


def _check_loadable(path: Path, states: dict[str, Any]) -> None:
    """Unpickle the new file with ``weights_only`` as :func:`load` will (tensor data memory-
    mapped, so not read again): a value it refuses (a numpy scalar, a set, an object) would
    otherwise make a checkpoint that every restart fails to load. Raises CheckpointError naming
    the states. A file system that cannot map files skips the check rather than every save."""
    try:
        _loads(path)
    except pickle.UnpicklingError as err:
        bad = []
        for name, state in states.items():
            buf = io.BytesIO()
            torch.save(state, buf)
            try:
                _loads(buf.getvalue())
            except Exception:
                bad.append(name)
        lines = [ln.strip() for ln in str(err).splitlines() if "Unpickler error" in ln]
        reason = lines[0].split(". ")[0] if lines else f"{type(err).__name__}: {err}"
        raise CheckpointError(
            f"cannot checkpoint {', '.join(map(repr, bad)) or 'the job'}: it would not load back "
            f"with torch.load(weights_only=True) ({reason}); keep to tensors, Python numbers, "
            f"strings, None and lists/tuples/dicts of them (e.g. float(x) for a numpy value); "
            f"the previous checkpoint is kept"
        ) from err
    except Exception as err:  # not the pickle's fault (e.g. mmap unsupported on this mount)
        log.warning("could not read the new checkpoint back to check it (%s); keeping it", err)


def load(directory: Path | None) -> dict[str, Any] | None:
    """The states of the last checkpoint in ``directory``, or None when there is none."""
    return load_timed(directory)[0]


def load_timed(directory: Path | None) -> tuple[dict[str, Any] | None, float | None]:
    """The states of the last checkpoint and the wall time its save began (None: no
    checkpoint, or one written before that was stored)."""
    if directory is None:
        return None, None
    path = checkpoint_path(Path(directory))
    if not path.exists():
        return None, None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an adl checkpoint (format {FORMAT})")
    states = payload.get("states")
    if not isinstance(states, dict):
        raise CheckpointError(f"{path} has no states")
    log.info("restoring checkpoint %s (%s)", path, ", ".join(sorted(states)))
    saved_at = payload.get(SAVED_AT)
    return states, float(saved_at) if isinstance(saved_at, (int, float)) else None


def save(ctx: JobContext) -> Path | None:
    """Collective checkpoint of every registered state; rank 0 writes, all ranks wait for it.

    States restored from the last checkpoint but not registered (yet) in this run are carried
    over unchanged, so a lazily created object does not lose its state.
    """
    for state in ctx.states.values():
        prepare = getattr(state, "prepare_checkpoint", None)
        if callable(prepare):
            prepare()
    path: Path | None = None
    failed: Exception | None = None
    directory = ctx.env.checkpoint_dir
    saved_at = ctx.restart.saving()
    if ctx.rank == 0 and directory is not None:
        try:
            states: dict[str, Any] = dict(ctx.pending_restored)
            for name, state in ctx.states.items():
                states[name] = state.state_dict()
            path = write(directory, states, saved_at)
            log.info("checkpoint written to %s", path)
        except Exception as err:  # raised after the barrier, which the other ranks are in
            failed = err
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier(group=ctx.cpu_group)
    if failed is not None:
        raise failed
    ctx.restart.saved()
    return path


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
    from adl.client_lib.env import context

    ctx = context()
    current = ctx.state(name)
    if isinstance(current, Tracked):
        if current.obj is obj:
            return False
        ctx.unregister(name)
    return ctx.register(Tracked(name, obj))
