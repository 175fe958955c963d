"""Periodic checkpoints written in the background: the training loop pauses only to copy.

A periodic save (:func:`adl.client_lib.preemption.periodic_checkpoint`) used to hold every rank
for the whole write: serializing, fsync, reading the file back to check it, the digest. Here rank
0 takes a *snapshot* instead (every tensor of the states copied to host memory, everything else
deep-copied), the ranks go on training, and one writer thread commits the snapshot the way a
synchronous save would (:func:`adl.client_lib.checkpoint.write`: temp file, fsync, digest,
rename). The snapshot is needed because training mutates the parameters and optimizer moments
in place while the file is written.

Order and failures:

- one write at a time: the next save (periodic or the final one of a stop) first waits for the
  write under way, so checkpoints commit in the order they were taken, and a stop's checkpoint is
  never overtaken by an older one;
- a failed background write leaves the checkpoint before it in place (the write is atomic) and is
  raised on rank 0 at the next save, after the ranks' barrier, just as a synchronous save's
  failure is raised after it; a write refused because a newer group fenced the directory
  (:class:`adl.client_lib.checkpoint.CheckpointFenced`) therefore ends this group one save later;
- the thread is not a daemon: a job that finishes with a write under way exits after it commits.

A state that writes its own files (a sharded model's DCP shards, written by every rank) starts
that write on its own thread at the save and gives rank 0 a completion that the writer thread
runs first: it waits for those files, then the file that refers to them is written
(:func:`adl.client_lib.checkpoint.save`, ``prepare_background_checkpoint``).

The cost moves from the training loop to host memory (one copy of the saved states) and to the
background thread's CPU time. ``$ADL_CHECKPOINT_ASYNC=0`` keeps periodic saves synchronous.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from adl.contract import ENV_CHECKPOINT_ASYNC

log = logging.getLogger(__name__)


def background_saves_from_env(environ: Mapping[str, str]) -> bool:
    """Whether periodic saves are written in the background ("1"/unset: yes, "0": no)."""
    raw = environ.get(ENV_CHECKPOINT_ASYNC, "").strip().lower()
    if raw in ("", "1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{ENV_CHECKPOINT_ASYNC}={raw!r}: expected 1 or 0")


def snapshot(obj: Any) -> Any:
    """A copy of ``obj`` that later in-place updates of the original cannot reach: tensors copied
    to host memory (a GPU tensor is copied down, a CPU one cloned), containers rebuilt, anything
    else deep-copied."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        out = copy.copy(obj)  # the same mapping type (an OrderedDict, a defaultdict's factory)
        for key, value in obj.items():
            out[key] = snapshot(value)
        return out
    if isinstance(obj, list):
        return [snapshot(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(snapshot(v) for v in obj)
    return copy.deepcopy(obj)


class BackgroundWriter:
    """Runs one checkpoint write at a time on its own thread (rank 0 only)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_write_s: float | None = None  # how long the last completed write took

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, write: Callable[[], object], done: Callable[[float], None]) -> None:
        """Start ``write()`` in the background; ``done(seconds)`` after it succeeds. The caller
        must have called :meth:`wait` first (one write at a time)."""
        if self.busy:
            raise RuntimeError("a checkpoint write is already under way: wait() for it first")

        def run() -> None:
            start = time.monotonic()
            try:
                path = write()
            except BaseException as err:  # kept for the next save on the training thread
                self._error = err
                log.error("background checkpoint write failed: %s", err)
                return
            took = time.monotonic() - start
            self.last_write_s = took
            log.info("checkpoint written to %s in the background in %.2f s", path, took)
            done(took)

        self._thread = threading.Thread(target=run, name="adl-checkpoint-writer", daemon=False)
        self._thread.start()

    def wait(self) -> None:
        """Wait for the write under way, if any; raise its error, if it failed (once)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error
