"""Opt-in TensorBoard scalars of what the library decides: batch size, LR scale, noise, goodput.

Asked for with ``ADL_TENSORBOARD_DIR=DIR`` or ``AdaptiveDataParallel(..., tensorboard_dir=DIR)``
(the argument wins). Rank 0 writes, every ``ADL_TENSORBOARD_EVERY`` optimizer steps (default
10), the scalars under ``adl/``:

- ``goodput``: the job's goodput estimate at its current configuration, in scale-invariant steps
  per second (the scheduler's model: AdaScale gain over the fitted step time); absent until a
  step time and a usable noise estimate exist;
- ``batch_size`` (global, all replicas and micro-steps), ``local_batch_size`` (one replica's
  micro-batch), ``accum_steps`` (extra micro-steps per optimizer step, 0 = none, as the data
  loader counts them) and ``replicas`` (world size), all of the step just taken;
- ``lr_scale``: the factor the scaling rule multiplied the learning rate by at that step
  (parameter group 0; further groups as ``lr_scale/group<i>``);
- ``grad_noise_scale``: the gradient noise scale in *samples*, ``B0 * var / sqr`` = tr(Sigma) /
  |G|^2 with ``GradParams`` (``var`` is the noise of a B0 batch, ``sqr`` the squared true
  gradient). Samples rather than multiples of B0 so it reads against ``batch_size`` directly:
  a batch well below it is still efficient, one well above it wastes samples;
- ``progress``: scale-invariant steps done (what the LR schedule follows).

The x axis is the optimizer step count, not the scale-invariant progress: it is an integer that
grows by exactly one per update (progress grows by the gain, which can be below one, so rounding
it would collide), it is what Lightning's ``global_step`` and most users' own ``add_scalar`` calls
use, so these curves line up with the user's loss, and ``progress`` is plotted as a scalar anyway.
The count is part of the checkpoint, so a resumed job writes new event files into the same
directory with steps that continue; steps the old run wrote after its last checkpoint (lost work
after a crash) are hidden with TensorBoard's ``purge_step``, so the curves do not fold back.

Cost: none when off (the wrapper holds None). When on, a modulo per step; values that need the
host (the noise estimate's latest copy, the throughput fit, well under a millisecond) are read
only on the steps that write. Events are flushed at every checkpoint (a preemption checkpoints
first, so it loses nothing already written) and at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from adl import contract as C
from adl.client_lib.profile import Profile
from adl.client_lib.scaling import Progress, adascale_gain
from adl.sched.goodput import GradParams, step_time


class TrainingView(Protocol):
    """What the scalars are read from (:class:`adl.client_lib.parallel.AdaptiveDataParallel`)."""

    progress: Progress
    profile: Profile

    @property
    def world_size(self) -> int: ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def init_batch_size(self) -> int: ...

    @property
    def lr_factors(self) -> list[float]: ...

    def grad_params(self, wait: bool = False) -> GradParams | None: ...


log = logging.getLogger(__name__)

DEFAULT_EVERY = 10
EVERY_BOUNDS = (1, 100_000)
INSTALL_HINT = 'pip install "adl[tensorboard]"'
PREFIX = "adl/"


def read_every(environ: Mapping[str, str]) -> int:
    """``ADL_TENSORBOARD_EVERY`` as an int in bounds (default 10); a ValueError naming it."""
    raw = environ.get(C.ENV_TENSORBOARD_EVERY)
    if raw is None or raw.strip() == "":
        return DEFAULT_EVERY
    lo, hi = EVERY_BOUNDS
    try:
        every = int(raw)
    except ValueError:
        every = None
    if every is None or not lo <= every <= hi:
        raise ValueError(
            f"{C.ENV_TENSORBOARD_EVERY} must be an integer number of optimizer steps in "
            f"[{lo}, {hi}], got {raw!r}"
        )
    return every


def summary_writer_class() -> Any:
    """torch's SummaryWriter, or an ImportError that says how to install what it needs."""
    try:
        # torch.utils.tensorboard only wraps the tensorboard package; importing that first
        # names the real missing piece (torch's own message asks for "TensorBoard 1.15").
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError(
            f"TensorBoard scalars were asked for ({C.ENV_TENSORBOARD_DIR} or tensorboard_dir=) "
            f"but the tensorboard package is not installed: {INSTALL_HINT}"
        ) from err
    return SummaryWriter


class TensorBoardScalars:
    """Rank 0's writer of the library's scalars (see the module docstring)."""

    def __init__(self, directory: Path, every: int, writer_class: Any) -> None:
        self.directory = directory
        self.every = every
        self._writer_class = writer_class
        self._writer: Any | None = None
        self._written_step = -1  # the last step whose scalars were written
        # (global batch, local micro-batch, accumulation steps) of the last step, so that a
        # checkpoint between writes can still put a point at the step it saves.
        self._last: tuple[int, int, int] | None = None
        self._first_step = 0  # this process's first optimizer step (1 unless resumed)
        self._goodput_failed = False
        ref = weakref.ref(self)  # atexit must not keep a discarded wrapper's writer alive

        def close_at_exit() -> None:
            alive = ref()
            if alive is not None:
                alive.close()

        atexit.register(close_at_exit)

    @classmethod
    def create(
        cls,
        directory: str | os.PathLike[str] | None,
        rank: int,
        environ: Mapping[str, str] | None = None,
    ) -> TensorBoardScalars | None:
        """The writer when asked for (``directory`` or ``ADL_TENSORBOARD_DIR``), else None.

        Every rank checks the settings and the package, so a misconfigured job fails at once
        everywhere instead of rank 0 failing while the others wait for it in a collective;
        only rank 0 gets a writer.
        """
        e = os.environ if environ is None else environ
        chosen = directory if directory is not None else (e.get(C.ENV_TENSORBOARD_DIR) or None)
        if chosen is None:
            return None
        every = read_every(e)
        writer_class = summary_writer_class()
        if rank != 0:
            return None
        return cls(Path(chosen), every, writer_class)

    # ------------------------------------------------------------------ called by the wrapper

    def after_step(self, adp: TrainingView, batch: int, local: int, micro: int) -> None:
        """Once per optimizer step, after the progress advanced; writes every ``every`` steps."""
        step = adp.progress.steps
        if self._last is None:
            self._first_step = step
        self._last = (batch, local, micro - 1)
        if step % self.every == 0:
            self._write(adp, step)

    def checkpoint(self, adp: TrainingView) -> None:
        """At a checkpoint: a point at the saved step (if not written yet), then flush."""
        step = adp.progress.steps
        if self._last is not None and step != self._written_step:
            self._write(adp, step)
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # ------------------------------------------------------------------ writing

    def _open(self) -> Any:
        # A resumed job (its first step is past 1) hides what the previous run wrote after the
        # checkpoint it resumes from: those steps are redone now and would otherwise be drawn
        # twice. A fresh start purges nothing (a directory may hold an unrelated older run).
        purge = self._first_step if self._first_step > 1 else None
        self._writer = self._writer_class(log_dir=str(self.directory), purge_step=purge)
        return self._writer

    def _write(self, adp: TrainingView, step: int) -> None:
        assert self._last is not None
        writer = self._writer or self._open()
        batch, local, accum = self._last
        scalars: dict[str, float] = {
            "batch_size": batch,
            "local_batch_size": local,
            "accum_steps": accum,
            "replicas": adp.world_size,
            "progress": adp.progress.progress,
        }
        factors = adp.lr_factors
        scalars["lr_scale"] = factors[0]
        for i, factor in enumerate(factors[1:], start=1):
            scalars[f"lr_scale/group{i}"] = factor
        b0 = adp.init_batch_size
        grad = adp.grad_params()  # the latest host copy: no wait on the device
        if grad is not None and grad.usable:
            scalars["grad_noise_scale"] = b0 * grad.var / grad.sqr
            goodput = self._goodput(adp, grad, batch / b0, local, accum)
            if goodput is not None:
                scalars["goodput"] = goodput
        for tag, value in scalars.items():
            writer.add_scalar(PREFIX + tag, float(value), step)
        self._written_step = step

    def _goodput(
        self, adp: TrainingView, grad: GradParams, scale: float, local: int, accum: int
    ) -> float | None:
        """Scale-invariant steps per second at the step's configuration (None while unknown)."""
        if self._goodput_failed:
            return None
        try:
            perf = adp.profile.perf_params()
            if perf is None:
                return None
            seconds = float(step_time(perf, adp.num_nodes, adp.world_size, local, accum))
            return adascale_gain(scale, grad) / seconds if seconds > 0 else None
        except Exception:  # a scalar must never stop training
            self._goodput_failed = True
            log.exception("cannot estimate goodput for TensorBoard; leaving it out from now on")
            return None
