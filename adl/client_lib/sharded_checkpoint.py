"""Checkpoints of a sharded (FSDP2) job: model and optimizer through torch.distributed.checkpoint.

No rank holds the whole model, so the adl checkpoint file (written by rank 0, see
:mod:`adl.client_lib.checkpoint`) cannot carry it. Instead every rank writes its shards with DCP
into a fresh directory ``adl-dcp/<name>`` beside the file, at the collective point before rank 0
writes (``prepare_checkpoint``); the file then records that directory and the sha256 and size of
every file in it. DCP stores each tensor with its global shape and offsets, so a checkpoint
written at N ranks loads at M: ``dcp.load`` reads, for each rank, the parts of the saved shards
that its new shards cover (a resharding read, no full copy on any rank).

A periodic save runs in the background (``prepare_background_checkpoint``): every rank copies
its shards to host memory and ``dcp.async_save`` writes them on a thread of DCP's, over a gloo
group of this state's own (DCP's collectives then run beside the training's, never on the same
connections); rank 0's checkpoint writer waits for that write before it records the digests and
commits the file, and every rank waits for its part before the next save and at exit.

Crash safety is the file's: a directory is only referenced once it is complete (DCP's save
returns on rank 0 after every rank wrote and the metadata is down), and the reference commits
with the file's atomic rename. A save killed half-way leaves an unreferenced directory, swept
at the next save; the checkpoint before the last one (``adl-checkpoint.prev.pt``) keeps its own
directory, so the fall-back to it (a torn or corrupted file, or a DCP file whose digest no longer
matches: :func:`adl.client_lib.checkpoint.verify_external`) restores a complete set.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from adl.client_lib import checkpoint
from adl.client_lib.checkpoint import Completion
from adl.client_lib.scaling import Progress
from adl.client_lib.sharded_safe_load import SafeFileSystemReader, SafeLoadPlanner


class ShardedTraining(Protocol):
    """What the checkpoint entry reads of the job's
    :class:`adl.client_lib.sharded.AdaptiveShardedDataParallel`."""

    name: str
    rank: int
    world_size: int
    progress: Progress
    optimizer: torch.optim.Optimizer
    #: the sharded model (``fully_shard``), whose state DCP saves
    module: nn.Module

    def settle(self) -> None: ...

    def passthrough(self) -> AbstractContextManager[None]: ...

    def adaptive_state_dict(self, *, with_weights: bool = True) -> dict[str, Any]: ...

    def load_adaptive_state_dict(
        self, state: dict[str, Any], *, with_weights: bool = True
    ) -> None: ...


log = logging.getLogger(__name__)

#: the folder, beside the checkpoint file, that holds the DCP directories
DCP_ROOT = "adl-dcp"
_CHUNK = 1 << 20


def _digest(path: Path) -> dict[str, Any]:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"sha256": sha.hexdigest(), "bytes": size}


def manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file under ``directory``, by relative path."""
    return {
        str(p.relative_to(directory)): _digest(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _referenced(directory: Path) -> set[str]:
    """DCP directories the current and the previous checkpoint files refer to."""
    names: set[str] = set()
    for path in (checkpoint.checkpoint_path(directory), checkpoint.previous_path(directory)):
        if not path.exists():
            continue
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            for state in payload.get("states", {}).values():
                ref = state.get(checkpoint.EXTERNAL) if isinstance(state, dict) else None
                if isinstance(ref, dict) and isinstance(ref.get("dir"), str):
                    names.add(Path(ref["dir"]).name)
        except Exception:  # unreadable: nothing it refers to can be trusted to be needed
            continue
    return names


def sweep(directory: Path) -> None:
    """Delete DCP directories no checkpoint file refers to (saves killed half-way, and the
    directory of the checkpoint that the last save pushed out of the ``.prev`` slot)."""
    root = directory / DCP_ROOT
    if not root.is_dir():
        return
    keep = _referenced(directory)
    for child in root.iterdir():
        if child.is_dir() and child.name not in keep:
            shutil.rmtree(child, ignore_errors=True)


class ShardedCheckpointState:
    """Checkpoint registry entry of :class:`AdaptiveShardedDataParallel`."""

    def __init__(self, adp: ShardedTraining, ctx: Any) -> None:
        self._adp = adp
        self._ctx = ctx  # the job's JobContext: where to save, and its background parts
        self.name = adp.name
        self._saved: dict[str, Any] | None = None  # the DCP reference of the save under way
        self._background_group: Any | None = None  # DCP's own gloo group, made at first use

    # ------------------------------------------------------------------ save (every rank)

    def prepare_checkpoint(self) -> None:
        """Collective: every rank writes its shards into one new DCP directory."""
        target = self._new_directory()
        if target is None:
            return
        dcp.save(self._dcp_state(), checkpoint_id=str(target))
        if self._adp.rank == 0:  # dcp.save returned on the coordinator: every rank's files are down
            self._saved = {"dir": self._relative(target), "files": manifest(target)}

    def prepare_background_checkpoint(self) -> Completion | None:
        """Collective: every rank copies its shards to host memory and writes them on a DCP thread
        (``dcp.async_save``) while training goes on. Returns, on rank 0, the completion that the
        checkpoint writer runs before it commits the file: it waits for DCP's write (which returns
        on the coordinator once every rank's files and the metadata are down) and records the
        files' digests. The other ranks' futures are waited for before the next save."""
        target = self._new_directory()
        if target is None:
            return None
        # DCP's collectives then run on its own thread; a group of their own keeps them from
        # interleaving with the training's and the checkpoint barrier's on the same connections
        if self._background_group is None:
            self._background_group = dist.new_group(backend="gloo")
        future = dcp.async_save(
            self._dcp_state(), checkpoint_id=str(target), process_group=self._background_group
        )
        assert isinstance(future, Future)  # the thread executor with the default stager
        ctx = self._ctx
        assert ctx is not None  # a save is always the context's (checkpoint.save(ctx))
        ctx.checkpoint_parts.append(future)
        if self._adp.rank != 0:
            return None
        rel = self._relative(target)
        # No files yet: were this state ever saved without its completion, the file would fail
        # verify_external on load (an empty file list) instead of trusting unchecked shards.
        self._saved = {"dir": rel, "files": {}}

        def complete(state: dict[str, Any]) -> dict[str, Any]:
            future.result()  # raises DCP's error: then the file is not written at all
            return {**state, checkpoint.EXTERNAL: {"dir": rel, "files": manifest(target)}}

        return complete

    def _new_directory(self) -> Path | None:
        """Collective: the fresh DCP directory of this save (None: the job has nowhere to save).
        Rank 0 first sweeps directories no checkpoint file refers to; the save before this one
        has committed by then (``checkpoint.save`` waits for it first)."""
        ctx = self._ctx
        directory = getattr(getattr(ctx, "env", None), "checkpoint_dir", None)
        self._saved = None
        self._adp.settle()  # the last step's statistics are in the estimate that is saved
        if directory is None:
            return None
        directory = Path(directory)
        rank0 = self._adp.rank == 0
        if rank0:
            sweep(directory)
        # One name for every rank (rank 0's clock), unique across restarts of the job.
        names = [f"{time.time_ns():020d}-s{self._adp.progress.steps:09d}" if rank0 else None]
        if self._adp.world_size > 1:
            dist.broadcast_object_list(names, src=0, group=getattr(ctx, "cpu_group", None))
        return directory / DCP_ROOT / str(names[0])

    @staticmethod
    def _relative(target: Path) -> str:
        """``target`` as the checkpoint file records it: ``adl-dcp/<name>``, relative to the
        checkpoint directory (``_new_directory`` makes it two levels below)."""
        return str(target.relative_to(target.parents[1]))

    def _dcp_state(self) -> dict[str, Any]:
        with self._adp.passthrough():  # may initialize the optimizer's state with a step
            model_sd, optim_sd = get_state_dict(self._adp.module, self._adp.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def state_dict(self) -> dict[str, Any]:
        state = self._adp.adaptive_state_dict(with_weights=False)
        if self._saved is None:
            raise RuntimeError(
                "a sharded checkpoint needs the job's checkpoint directory (ADL_CHECKPOINT_DIR) "
                "and a collective save (adl's checkpoint.save), not a state_dict() on one rank"
            )
        state[checkpoint.EXTERNAL] = dict(self._saved)
        return state

    # ------------------------------------------------------------------ load (every rank)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ref = state.get(checkpoint.EXTERNAL)
        ctx = self._ctx
        directory = getattr(getattr(ctx, "env", None), "checkpoint_dir", None)
        if not isinstance(ref, dict) or directory is None:
            raise checkpoint.CheckpointError(
                f"checkpoint state {self.name!r} has no sharded model to restore"
            )
        source = Path(directory) / str(ref["dir"])
        with self._adp.passthrough():  # initializes the optimizer's state with a step
            model_sd, optim_sd = get_state_dict(self._adp.module, self._adp.optimizer)
        holder: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        # each rank reads what its shards cover; nothing in the files is run (sharded_safe_load)
        dcp.load(holder, storage_reader=SafeFileSystemReader(source), planner=SafeLoadPlanner())
        set_state_dict(
            self._adp.module,
            self._adp.optimizer,
            model_state_dict=holder["model"],
            optim_state_dict=holder["optim"],
        )
        self._adp.load_adaptive_state_dict(state, with_weights=False)
        log.info("restored the sharded model and optimizer from %s", source)
