"""The one process-wide job context of the in-job library.

Why a global: a training script holds several independent objects (data loaders, the
AdaptiveDataParallel wrapper, epoch loop, metric accumulators) that must agree on facts owned by
none of them: where this worker sits in the job, which micro-batch is the last before a gradient
sync, what to put in the next checkpoint, and how good a batch size would be. Threading one object
through every constructor would change the user API; like ``torch.distributed``'s default group,
the context is created once by :func:`adl.init_process_group` and looked up with
:func:`get_context`. It holds no policy: the loader decides batch sizes, the wrapper measures,
:mod:`adl.client_lib.checkpoint` reads and writes files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from adl.client_lib import checkpoint
from adl.client_lib.restart_cost import RestartClock
from adl.sched.goodput import BatchBounds, GoodputFunction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerEnv:
    """This worker's place in the job, as the launcher or the pod template described it."""

    job: str | None = None
    group: int = 0
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    num_nodes: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    checkpoint_dir: Path | None = None
    api_url: str | None = None
    token_file: Path | None = None
    #: wall time since which the job has held GPUs without a break (``ADL_SCHEDULED_SINCE``)
    scheduled_since: float | None = None

    @property
    def standalone(self) -> bool:
        """One process, no process group: nothing to rendezvous with."""
        return self.world_size == 1


@runtime_checkable
class Checkpointable(Protocol):
    """Anything the checkpoint registry can save and restore.

    ``state_dict`` must return tensors, numbers, strings, bools, None and lists/tuples/dicts of
    them (what ``torch.load(weights_only=True)`` accepts), and describe the *global* state so that
    a checkpoint is readable at any world size. An optional ``prepare_checkpoint()`` method is
    called on every rank before rank 0 writes (a collective point, e.g. to sum metrics). A state
    that writes its own files may also have ``prepare_background_checkpoint()``, called instead
    for a background save: it starts its write on another thread and returns, on rank 0, a
    function that waits for it and returns the state to save (see
    :mod:`adl.client_lib.checkpoint`).
    """

    name: str

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


GoodputProvider = Callable[[BatchBounds], GoodputFunction | None]


class JobContext:
    """Shared state of one worker process; see the module docstring for why it exists."""

    def __init__(self, env: WorkerEnv, restored: dict[str, Any] | None = None) -> None:
        self.env = env
        self._states: dict[str, Checkpointable] = {}
        self._restored: dict[str, Any] = dict(restored or {})
        self._resumed = restored is not None
        # Batch configuration, set by the data loader, read by AdaptiveDataParallel.
        self.init_batch_size: int | None = None
        self.local_bsz: int | None = None
        self.accum_steps: int = 0
        self.is_sync_step: bool = True
        self.batch_bounds: BatchBounds | None = None
        # Set by an AdaptiveDataLoader while its batch is in the user's hands (None otherwise):
        # the loader, and the samples of the job's current micro-batch over all replicas (the
        # same on every rank, unlike this replica's share at the uneven tail of an epoch).
        self.feeding_loader: Any | None = None
        self.global_micro_batch: int | None = None
        # ... and this replica's share of it: the batch size of the step, which the tensors'
        # dim 0 is not for a sequence-first layout ([seq, batch], as RNN language models take).
        self.local_micro_batch: int | None = None
        # ... and what this share weighs in its optimizer step (data.share_weights): not 1.0
        # where the replicas' or micro-batches' shares differ
        self.share_weight: float = 1.0
        # The loader whose batches train (claimed by AdaptiveDataParallel at the first training
        # step): its batch configuration is the job's, not that of a validation loader run last.
        self.training_loader: Any | None = None
        # (id, offset) of every AdaptiveDataLoader whose batch is in the user's hands, outermost
        # first: what a metric created inside a loop body is scoped to (adl.client_lib.accumulator).
        self.feeding_path: tuple[tuple[int, int], ...] = ()
        # Set by an AdaptiveDataLoader when a training pass (gradients enabled) of an epoch
        # after the first starts outside ``remaining_epochs_until``: a hand-written epoch loop,
        # which a restart sends back to its first epoch.
        self.manual_epoch_loop = False
        # Whether an AdaptiveDataLoader was ever iterated in this process, and whether a
        # training batch from elsewhere (a plain DataLoader) was already warned about.
        self.loader_iterated = False
        self.warned_unsharded = False
        # Epoch bookkeeping (adl.client_lib.epoch) and the declared length of the run.
        self.total_epochs: int | None = None
        self.dataset_size: int | None = None
        self._goodput_provider: GoodputProvider | None = None
        # The LR factor the training wrapper would apply at a given global batch size (set by
        # AdaptiveDataParallel), for the loader's log line when the batch size changes.
        self.lr_scale_provider: Callable[[int], float] | None = None
        self.preemption: Any | None = None  # a PreemptionMonitor once init_process_group ran
        self.heartbeat: Any | None = None  # its HeartbeatSender, with a job and an API
        # A CPU (gloo) group for small control collectives (batch-size broadcast, metrics,
        # checkpoint barrier), kept apart from the training group's gradient traffic.
        self.cpu_group: Any | None = None
        # What a restart costs this job (adl.client_lib.restart_cost), reported with the hints.
        self.restart = RestartClock()
        # Called once the declared epochs are done (AdaptiveDataParallel: a last report).
        self.work_done_hooks: list[Callable[[], None]] = []
        # Called after a periodic checkpoint (AdaptiveDataParallel: the step-time profile skips
        # the interval the save took).
        self.checkpoint_hooks: list[Callable[[], None]] = []
        # Rank 0's writer of background periodic checkpoints (adl.client_lib.checkpoint_async),
        # made at the first such save.
        self.checkpoint_writer: Any | None = None
        # This rank's share of a background save still being written by another thread (a
        # sharded model's DCP files: adl.client_lib.sharded_checkpoint); waited for before the
        # next save and before the process leaves the job.
        self.checkpoint_parts: list[Future[Any]] = []

    # ------------------------------------------------------------------ placement

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def num_nodes(self) -> int:
        return self.env.num_nodes

    # ------------------------------------------------------------------ checkpoint registry

    def register(self, state: Checkpointable) -> bool:
        """Add ``state`` to every checkpoint; restore it now if the last checkpoint has it.

        Returns True when the state was restored. Names must be unique within the job.
        """
        if state.name in self._states:
            raise ValueError(f"a checkpoint state named {state.name!r} is already registered")
        self._states[state.name] = state
        saved = self._restored.pop(state.name, None)
        if saved is None:
            return False
        state.load_state_dict(saved)
        return True

    @property
    def pending_restored(self) -> dict[str, Any]:
        """States of the last checkpoint that nothing has registered (yet) in this run."""
        return dict(self._restored)

    def state(self, name: str) -> Checkpointable | None:
        """The registered state called ``name`` (no copy of the registry, unlike ``states``)."""
        return self._states.get(name)

    def unregister(self, name: str) -> None:
        self._states.pop(name, None)

    @property
    def states(self) -> dict[str, Checkpointable]:
        return dict(self._states)

    @property
    def restored(self) -> bool:
        """Whether this process resumed from a checkpoint (a restart, not a fresh start)."""
        return self._resumed

    def wait_checkpoint_parts(self) -> None:
        """Wait for this rank's share of the last background save. A failure is logged, not
        raised: rank 0 raises it at the next save, since the checkpoint file that would have
        referred to those files is then not written."""
        parts, self.checkpoint_parts = self.checkpoint_parts, []
        for part in parts:
            try:
                part.result()
            except Exception as err:
                log.warning("this rank's part of a background checkpoint failed: %s", err)

    def save(self, *, background: bool = False) -> Path | None:
        """Collective: every rank calls it; rank 0 writes the checkpoint atomically (on its
        writer thread when ``background``: see :func:`adl.client_lib.checkpoint.save`)."""
        return checkpoint.save(self, background=background)

    # ------------------------------------------------------------------ goodput provider

    def set_goodput_provider(self, provider: GoodputProvider | None) -> None:
        """Attach the code that knows this job's throughput and noise (AdaptiveDataParallel)."""
        self._goodput_provider = provider

    def goodput_fn(self, bounds: BatchBounds) -> GoodputFunction | None:
        """The job's goodput model for the given batch bounds, or None while unknown."""
        provider = self._goodput_provider
        if provider is None:
            return None
        try:
            return provider(bounds)
        except Exception:  # a model that cannot be built yet must not stop training
            log.exception("goodput provider failed; keeping the current batch size")
            return None

    # ------------------------------------------------------------------ progress

    @property
    def total_progress(self) -> float | None:
        """Scale-invariant steps of the whole run, when the user declared the epochs."""
        if not (self.total_epochs and self.dataset_size and self.init_batch_size):
            return None
        return self.total_epochs * self.dataset_size / self.init_batch_size


_CONTEXT: JobContext | None = None


def get_context() -> JobContext:
    """The context made by :func:`adl.init_process_group`; raises if it was never called."""
    if _CONTEXT is None:
        raise RuntimeError("adl.init_process_group() has not been called in this process")
    return _CONTEXT


def has_context() -> bool:
    return _CONTEXT is not None


def set_context(ctx: JobContext | None) -> None:
    """Install (or clear, with None) the process-wide context; used by init and by tests."""
    global _CONTEXT
    _CONTEXT = ctx
