"""Checkpoint files: one writer, atomic replacement, safe loading.

A checkpoint is one file, ``adl-checkpoint.pt`` in ``ADL_CHECKPOINT_DIR``, holding
``{"format": 1, "states": {name: state_dict}}``, with the sha256 of its bytes in a sidecar
(``adl-checkpoint.pt.sha256``). Rank 0 writes it to a temporary file in the same directory,
fsyncs it, reads it back, then keeps the old one as ``adl-checkpoint.prev.pt`` (with its
sidecar) and renames the new one over it, so a crash at any moment (kill -9 included) or a full
disk leaves at least one complete, verified checkpoint, never only a torn file. Loading checks
the sha256 (flipped bytes in tensor data would otherwise load silently) and falls back to the
previous copy, with a warning, when the last one is missing, torn or corrupted. Loading uses
``torch.load(weights_only=True)``: tensors and plain containers only, no arbitrary pickle code.
States describe the global job (not one rank), so a checkpoint loads at any world size.

Fencing: a worker group owns the directory from its start. Every rank of a new group claims it
(``claim``: ``adl-group`` holds the group number) before anything is loaded, and a commit
checks, under a lock on ``.adl-lock``, that the directory is still its group's: a worker of
an older group (cut off on a node the controller gave up as lost, and so still running) can
never overwrite the checkpoint the next group resumed from. The check and the renames of a
commit happen under the lock, as does a claim, so a commit is either before the claim (and
loaded by the new group) or refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from adl.client_lib.checkpoint_async import BackgroundWriter, snapshot
from adl.client_lib.restart_cost import SAVED_AT, RestartClock

log = logging.getLogger(__name__)

FILENAME = "adl-checkpoint.pt"
PREVIOUS = "adl-checkpoint.prev.pt"
#: the sidecar beside a checkpoint: ``{"sha256": hex, "bytes": size}`` of its file
DIGEST_SUFFIX = ".sha256"
FORMAT = 1
#: key of a state whose bulk lives in files beside the checkpoint (a sharded job's DCP
#: directory): ``{"dir": path relative to the checkpoint directory, "files": {relative path:
#: {"sha256": hex, "bytes": size}}}``, checked when the checkpoint loads
EXTERNAL = "external_files"
_TMP_PREFIX = ".adl-checkpoint-"
_TMP_SUFFIX = ".tmp"
#: the group that owns the directory (the last to claim it): only its commits are accepted
FENCE = "adl-group"
_LOCK = ".adl-lock"


class SavingJob(Protocol):
    """What a collective save needs of the job (:class:`adl.client_lib.context.JobContext`):
    named here so that the checkpoint files do not depend on the context that uses them."""

    env: Any  # WorkerEnv: checkpoint_dir, group
    restart: RestartClock
    cpu_group: Any
    checkpoint_writer: Any

    @property
    def rank(self) -> int: ...

    @property
    def states(self) -> dict[str, Any]: ...

    @property
    def pending_restored(self) -> dict[str, Any]: ...

    def wait_checkpoint_parts(self) -> None: ...


class CheckpointError(RuntimeError):
    """The checkpoint file exists but is not one this library wrote."""


class CheckpointFenced(RuntimeError):
    """A newer worker group owns the checkpoint directory: this group's commit is refused."""


@contextlib.contextmanager
def _locked(directory: Path) -> Any:
    """An exclusive lock on the directory's lock file (flock: local and NFSv4 file systems)."""
    fd = os.open(directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def owner(directory: Path) -> int | None:
    """The group that last claimed ``directory`` (None: never claimed, or unreadable)."""
    try:
        return int((Path(directory) / FENCE).read_text().strip())
    except (OSError, ValueError):
        return None


def claim(directory: Path | None, group: int) -> None:
    """Make ``group`` the owner of ``directory``: commits of any other group are refused from
    now on. Every rank of a starting group calls it before loading (idempotent); the
    controller starts a group only once the previous one is stopped or given up as lost."""
    if directory is None or group <= 0:
        return
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory):
        if owner(directory) == group:
            return
        tmp = _temporary(directory)
        try:
            with open(tmp, "w") as f:
                f.write(f"{group}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, directory / FENCE)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(directory)
    log.info("checkpoint directory %s claimed by group %d", directory, group)


def _check_owner(directory: Path, group: int) -> None:
    current = owner(directory)
    if current is not None and current != group:
        raise CheckpointFenced(
            f"checkpoint not committed: group {group} no longer owns {directory} (group "
            f"{current} started after it; this group was given up, e.g. its node was lost)"
        )


def checkpoint_path(directory: Path) -> Path:
    return Path(directory) / FILENAME


def previous_path(directory: Path) -> Path:
    """The checkpoint before the last one, kept to fall back to."""
    return Path(directory) / PREVIOUS


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + DIGEST_SUFFIX)


class _Hashing:
    """A write-only file that hashes what goes through it: the checksum costs no second read
    of a checkpoint that may be many gigabytes."""

    def __init__(self, f: io.BufferedWriter) -> None:
        self.f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _file_digest(path: Path) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size


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


def write(
    directory: Path,
    states: dict[str, Any],
    saved_at: float | None = None,
    group: int | None = None,
) -> Path:
    """Write ``states`` atomically (temp file + fsync + rename); return the checkpoint path.
    ``saved_at``: the wall time the save began (what a restart costs is measured from it).
    ``group``: the worker group writing; the commit is refused (``CheckpointFenced``) when
    another group has claimed the directory since."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(directory)
    payload: dict[str, Any] = {"format": FORMAT, "states": states}
    if saved_at is not None:
        payload[SAVED_AT] = float(saved_at)
    final = checkpoint_path(directory)
    tmp = _temporary(directory)
    sidecar: Path | None = None
    try:
        with open(tmp, "wb") as f:
            hashing = _Hashing(f)
            torch.save(payload, hashing)  # type: ignore[arg-type]  # write+flush suffice
            f.flush()
            os.fsync(f.fileno())
        _check_loadable(tmp, states)
        sidecar = _temporary(directory)
        digest = {"sha256": hashing.sha.hexdigest(), "bytes": hashing.size}
        with open(sidecar, "w") as f:
            f.write(json.dumps(digest) + "\n")
            f.flush()
            os.fsync(f.fileno())
        # Commit. The new file and its digest are complete on disk; a failure (ENOSPC) before
        # this point left the old checkpoint untouched. Keep the old one as the previous copy
        # (hard links: the last checkpoint stays in place meanwhile), then put the new digest
        # and the new file in place. A crash between those two renames leaves the new digest
        # beside the old file: that mismatch falls back to the previous copy, the same bytes.
        with _locked(directory) if group else contextlib.nullcontext():
            if group:
                _check_owner(directory, group)
            if final.exists():
                _keep_previous(directory, final)
            os.replace(sidecar, _digest_path(final))
            os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if sidecar is not None:
            sidecar.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return final


def _temporary(directory: Path) -> Path:
    """A new empty file named as the stale-temporary sweep expects."""
    fd, name = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=directory)
    # mkstemp makes it 0600 whatever the umask: give it the mode any new file of this process
    # gets (0644 under the usual umask 022; private under the local backend's 077)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    return Path(name)


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it to read it, which
    races with other threads creating files); 022 where /proc does not say."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _keep_previous(directory: Path, final: Path) -> None:
    """Make the current checkpoint (and its digest, when it has one) the previous copy."""
    prev = previous_path(directory)
    for src, dst in ((final, prev), (_digest_path(final), _digest_path(prev))):
        if not src.exists():  # written before digests existed: the previous copy has none
            _digest_path(prev).unlink(missing_ok=True)
            continue
        link = _temporary(directory)
        link.unlink()
        try:
            os.link(src, link)
        except OSError:  # no hard links on this file system: copy instead
            link.write_bytes(src.read_bytes())
        os.replace(link, dst)


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
    states, saved_at, _ = load_with_times(directory)
    return states, saved_at


def load_with_times(
    directory: Path | None,
) -> tuple[dict[str, Any] | None, float | None, float | None]:
    """``load_timed``, plus the wall time the restored checkpoint's save ended (its file's
    modification time; None without a checkpoint)."""
    if directory is None:
        return None, None, None
    directory = Path(directory)
    if directory.is_dir():  # a save killed half-way left a (large) temporary: free it now
        _remove_stale_temporaries(directory)
    first: CheckpointError | None = None
    for path in (checkpoint_path(directory), previous_path(directory)):
        if not path.exists():
            continue
        try:
            states, saved_at = _load_verified(path)
        except CheckpointError as err:
            first = first or err
            log.warning("%s; trying the previous checkpoint", err)
            continue
        if first is not None:
            log.warning("restoring the previous checkpoint %s: the last one is unusable", path)
        log.info("restoring checkpoint %s (%s)", path, ", ".join(sorted(states)))
        try:
            saved_until: float | None = path.stat().st_mtime
        except OSError:
            saved_until = None
        return states, saved_at, saved_until
    if first is not None:
        raise first
    return None, None, None


def _load_verified(path: Path) -> tuple[dict[str, Any], float | None]:
    """One checkpoint file, its digest checked when it has one; CheckpointError if unusable."""
    sidecar = _digest_path(path)
    if sidecar.exists():
        try:
            want = json.loads(sidecar.read_text())
            expected = (str(want["sha256"]), int(want["bytes"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{sidecar} is unreadable ({err})") from err
        if _file_digest(path) != expected:
            raise CheckpointError(
                f"{path} is corrupted: its sha256 or size differs from the ones recorded when "
                "it was written"
            )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise  # a value this loader refuses: loading an older copy would not change that
    except Exception as err:  # torn or truncated (a checkpoint from before the digests)
        raise CheckpointError(f"{path} cannot be loaded ({type(err).__name__}: {err})") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an adl checkpoint (format {FORMAT})")
    states = payload.get("states")
    if not isinstance(states, dict):
        raise CheckpointError(f"{path} has no states")
    verify_external(path.parent, states)
    saved_at = payload.get(SAVED_AT)
    return states, float(saved_at) if isinstance(saved_at, (int, float)) else None


def verify_external(directory: Path, states: dict[str, Any]) -> None:
    """Check the files that states keep beside the checkpoint (``EXTERNAL``) against the digests
    recorded when it was written; CheckpointError (so: the previous checkpoint) if one differs.
    Reads them once more (sha256 runs at disk speed); a sharded load reads them anyway."""
    for name, state in states.items():
        ref = state.get(EXTERNAL) if isinstance(state, dict) else None
        if ref is None:
            continue
        try:
            base = (directory / str(ref["dir"])).resolve()
            files = dict(ref["files"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"state {name!r} has a malformed file list ({err})") from err
        if not base.is_relative_to(directory.resolve()) or not files:
            raise CheckpointError(f"state {name!r} refers to files outside {directory}")
        for rel, want in files.items():
            path = (base / rel).resolve()
            if not path.is_relative_to(base) or not path.is_file():
                raise CheckpointError(f"state {name!r}: {base / rel} is missing")
            if _file_digest(path) != (str(want["sha256"]), int(want["bytes"])):
                raise CheckpointError(
                    f"state {name!r}: {path} is corrupted (its sha256 or size differs from the "
                    "ones recorded when it was written)"
                )


def save(ctx: SavingJob, *, background: bool = False) -> Path | None:
    """Collective checkpoint of every registered state; rank 0 writes, all ranks wait for it.

    States restored from the last checkpoint but not registered (yet) in this run are carried
    over unchanged, so a lazily created object does not lose its state.

    ``background``: rank 0 snapshots the states and writes them on its writer thread
    (:mod:`adl.client_lib.checkpoint_async`); the ranks wait only for the snapshot, and the
    path returned is None (the file is not committed yet). Every save first waits for the
    background write under way, and raises (on rank 0, after the barrier) its error if it failed.
    """
    failed: Exception | None = None
    writer = ctx.checkpoint_writer
    if writer is not None:
        try:
            writer.wait()
        except Exception as err:  # raised after the barrier, like a failure of this save
            failed = err
    ctx.wait_checkpoint_parts()  # every rank's share of the last background save is down
    completions = _prepare(ctx, background)
    path: Path | None = None
    submitted = False  # to the writer thread, which reports the save's duration itself
    directory = ctx.env.checkpoint_dir
    saved_at = ctx.restart.saving()
    if ctx.rank == 0 and directory is not None and failed is None:
        try:
            states: dict[str, Any] = dict(ctx.pending_restored)
            for name, state in ctx.states.items():
                states[name] = state.state_dict()
            if background:
                path = _write_in_background(ctx, directory, states, saved_at, completions)
                submitted = path is None
            else:
                path = write(directory, states, saved_at, ctx.env.group or None)
                log.info("checkpoint written to %s", path)
        except Exception as err:  # raised after the barrier, which the other ranks are in
            failed = err
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier(group=ctx.cpu_group)
    if failed is not None:
        raise failed
    if not submitted:
        ctx.restart.saved()
    return path


#: completes, on rank 0 and before the file is written, a state whose bulk another thread is
#: still writing (a sharded model's DCP files): waits for that write, returns the state to save
Completion = Callable[[Any], Any]


def _prepare(ctx: SavingJob, background: bool) -> dict[str, Completion]:
    """Collective: every state's optional preparation, on every rank, in registration order.

    A background save calls ``prepare_background_checkpoint()`` where a state has it (it starts
    writing the state's own files on another thread and returns, on rank 0, the completion the
    checkpoint writer runs before it commits the file); every other case ``prepare_checkpoint()``.
    """
    completions: dict[str, Completion] = {}
    for name, state in ctx.states.items():
        start = getattr(state, "prepare_background_checkpoint", None) if background else None
        if callable(start):
            completion = start()
            if completion is not None:
                completions[name] = completion
            continue
        prepare = getattr(state, "prepare_checkpoint", None)
        if callable(prepare):
            prepare()
    return completions


def _completed(states: dict[str, Any], completions: dict[str, Completion]) -> dict[str, Any]:
    return {name: completions[name](s) if name in completions else s for name, s in states.items()}


def _write_in_background(
    ctx: SavingJob,
    directory: Path,
    states: dict[str, Any],
    saved_at: float,
    completions: dict[str, Completion],
) -> Path | None:
    """Snapshot ``states`` and hand the write to rank 0's writer thread, which first runs the
    ``completions`` (waits for the states' own background files); a state that cannot be copied
    (an object deepcopy refuses) is written synchronously instead, as before."""
    group = ctx.env.group or None
    try:
        frozen = snapshot(states)  # training goes on mutating the originals in place
    except Exception as err:
        log.warning("checkpoint written synchronously: its states cannot be copied (%s)", err)
        return write(directory, _completed(states, completions), saved_at, group)
    if ctx.checkpoint_writer is None:
        ctx.checkpoint_writer = BackgroundWriter()
    ctx.checkpoint_writer.submit(
        lambda: write(directory, _completed(frozen, completions), saved_at, group),
        done=ctx.restart.save_took,
    )
    return None
