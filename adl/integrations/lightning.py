"""PyTorch Lightning under adl: ``AdaptiveStrategy`` and ``AdaptiveCallback`` (``adl[lightning]``).

``Trainer(strategy=AdaptiveStrategy(), callbacks=[AdaptiveCallback()])`` makes a LightningModule
elastic whose ``train_dataloader()`` returns an ``adl.AdaptiveDataLoader``:

* the strategy joins adl's job (its process group, ranks and world size, whatever ``devices``
  says), wraps the module in ``adl.AdaptiveDataParallel`` (DDP, gradient-noise statistics, LR
  scaling, hints reports) and hands it the LR scheduler, which adl then steps once per
  scale-invariant step (Lightning's own stepping of it is turned off);
* the callback keeps Lightning's counters in adl's checkpoint (epoch, ``global_step``, the
  logging step) and puts them back on a restart, at any world size, so logging happens at the
  same steps as in a run that never stopped; the data position, model, optimizer and scheduler
  are in the checkpoint through the loader and the wrapper. It also reseeds the RNG at every
  step from (seed, step, rank) (see :func:`adl.integrations.common.step_seed`).

Limits: no gradient accumulation (Lightning zeroes the gradients of every batch it does not
accumulate itself, so adl may only vary the micro-batch: ``gradient_accumulation`` is off);
epoch-level aggregates that Lightning computes itself (``self.log(..., on_epoch=True)``) restart
their average at a resume mid-epoch (use ``adl.Accumulator`` for exact epoch sums); use a logger
whose history survives restarts, such as :class:`HistoryLogger`.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_only

from adl.client_lib.env import context
from adl.client_lib.epoch import epoch_state
from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.tracked import track
from adl.integrations.common import step_seed

__all__ = ["AdaptiveCallback", "AdaptiveStrategy", "HistoryLogger"]

STATE_NAME = "adl.lightning.trainer"


class _AdlEnvironment(ClusterEnvironment):
    """Ranks and world size as adl's launcher (daemon, operator, ``adl launch``) set them."""

    @property
    def creates_processes_externally(self) -> bool:
        return True  # adl starts every process; Lightning must not spawn any

    @property
    def main_address(self) -> str:
        return context().env.master_addr

    @property
    def main_port(self) -> int:
        return context().env.master_port or 0

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return context().world_size

    def set_world_size(self, size: int) -> None:
        pass  # the job's size is adl's to set

    def global_rank(self) -> int:
        return context().rank

    def set_global_rank(self, rank: int) -> None:
        pass

    def local_rank(self) -> int:
        return context().env.local_rank

    def node_rank(self) -> int:
        env = context().env
        return env.rank // max(env.local_world_size, 1)


class _HeldScheduler:
    """The scheduler as Lightning sees it: readable (monitors, hooks), but stepped only by adl."""

    def __init__(self, scheduler: Any) -> None:
        self.__dict__["_scheduler"] = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass  # AdaptiveDataParallel steps it once per scale-invariant step

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_scheduler"], name)


class AdaptiveStrategy(DDPStrategy):
    """DDP under adl. ``scaling_rule``: adl's LR scaling rule (default AdaScale / AdamScale);
    other keyword arguments go to ``DistributedDataParallel`` as with ``DDPStrategy``."""

    def __init__(self, scaling_rule: Any | None = None, **ddp_kwargs: Any) -> None:
        self._adl = context()  # join the job now: Lightning reads ranks before fitting
        super().__init__(cluster_environment=_AdlEnvironment(), **ddp_kwargs)
        self._scaling_rule = scaling_rule
        self.adl_model: AdaptiveDataParallel | None = None

    @property
    def root_device(self) -> torch.device:
        if torch.cuda.is_available() and self._adl.world_size > 0 and self._on_gpu():
            return torch.device("cuda", self._adl.env.local_rank)
        return torch.device("cpu")

    def _on_gpu(self) -> bool:
        devices = self.parallel_devices or []
        return bool(devices) and devices[0].type == "cuda"

    def _configure_launcher(self) -> None:
        self._launcher = None  # the processes exist already

    def setup_distributed(self) -> None:
        # adl's init_process_group made the group (and its control groups) already
        rank_zero_only.rank = self._adl.rank  # type: ignore[attr-defined]

    def setup(self, trainer: pl.Trainer) -> None:
        assert self.accelerator is not None and self.model is not None
        self.accelerator.setup(trainer)
        self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        if trainer.state.fn != "fit":
            return
        self.setup_optimizers(trainer)
        if len(self.optimizers) != 1:
            raise ValueError("AdaptiveStrategy supports one optimizer")
        scheduler = None
        for config in self.lr_scheduler_configs:
            if config.interval != "step" or scheduler is not None:
                raise ValueError(
                    "AdaptiveStrategy takes one LR scheduler with interval 'step', written in "
                    "steps at the initial batch size (adl steps it per scale-invariant step)"
                )
            scheduler = config.scheduler
            config.scheduler = _HeldScheduler(scheduler)  # type: ignore[assignment]
        self.adl_model = AdaptiveDataParallel(
            self.model,
            self.optimizers[0],
            scheduler,
            self._scaling_rule,
            name="adl.lightning.model",
            **self._ddp_kwargs,
        )
        self.model = self.adl_model  # Lightning forwards training_step through it
        self.setup_precision_plugin()

    def optimizer_step(
        self,
        optimizer: Any,
        closure: Callable[[], Any],
        model: Any = None,
        **kwargs: Any,
    ) -> Any:
        # Lightning hands the closure (forward and backward) to optimizer.step, which would run
        # it inside adl's step wrapper, after adl has read the gradients: run it first.
        module = model if isinstance(model, pl.LightningModule) else self.lightning_module
        assert module is not None
        wrapped = functools.partial(self.precision_plugin._wrap_closure, module, optimizer, closure)
        wrapped()
        return optimizer.step(**kwargs)

    def teardown(self) -> None:
        if self.adl_model is not None:
            self.adl_model.close()
            self.model = self.lightning_module
        super().teardown()


class _Counters:
    """Lightning's step counters in adl's checkpoint."""

    name = STATE_NAME

    def __init__(self) -> None:
        self.saved: dict[str, int] | None = None
        self.trainer: pl.Trainer | None = None

    def state_dict(self) -> dict[str, int]:
        assert self.trainer is not None
        loop = self.trainer.fit_loop.epoch_loop
        return {
            "epoch": self.trainer.current_epoch,
            "optimizer_steps": loop.automatic_optimization.optim_progress.optimizer_steps,
            "batches_that_stepped": loop._batches_that_stepped,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.saved = {k: int(v) for k, v in state.items()}


class AdaptiveCallback(pl.Callback):
    """Keeps Lightning's epoch and step counters across adl restarts (see the module doc)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._counters = _Counters()
        self._registered = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        ctx = context()
        ctx.total_epochs = trainer.max_epochs
        _adl_handles_sigterm(ctx)
        self._counters.trainer = trainer
        if not self._registered:
            self._registered = True
            ctx.register(self._counters)
        saved = self._counters.saved
        if saved is not None:
            _restore(trainer, saved)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # adl's epoch follows Lightning's, so the data loader runs this epoch's order (resuming
        # mid-epoch after a restart), and Lightning expects the batches the loader has left
        state = epoch_state(context())
        state.epoch, state.active = trainer.current_epoch, True
        loader = trainer.train_dataloader
        if loader is not None and hasattr(loader, "__len__"):
            trainer.fit_loop.max_batches = len(loader)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        torch.manual_seed(step_seed(self.seed, trainer.global_step, context().rank))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        ctx = context()
        state = epoch_state(ctx)
        state.active, state.looped = False, True
        state.epoch = trainer.current_epoch
        for hook in list(ctx.work_done_hooks):  # a last hints report: the work is done
            hook()


def _adl_handles_sigterm(ctx: Any) -> None:
    """Give SIGTERM back to adl alone. Lightning's handler (installed as ``fit`` starts) makes the
    loop raise ``SIGTERMException`` at the next batch, a plain ``SystemExit``: the process would
    exit 0, as if done, without a checkpoint. adl's stops every rank at the same step, saves,
    and exits 143, so the job restarts where it stopped."""
    monitor = ctx.preemption
    if monitor is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, monitor._on_signal)


def _restore(trainer: pl.Trainer, saved: Mapping[str, int]) -> None:
    """Put Lightning's counters where the checkpointed run had them."""
    epoch = saved["epoch"]
    progress = trainer.fit_loop.epoch_progress
    for counter in (progress.total, progress.current):
        counter.ready = counter.completed = epoch
        counter.started = counter.processed = epoch  # type: ignore[attr-defined]
    loop = trainer.fit_loop.epoch_loop
    step = loop.automatic_optimization.optim_progress.optimizer.step
    step.total.ready = step.total.completed = saved["optimizer_steps"]
    loop._batches_that_stepped = saved["batches_that_stepped"]


class HistoryLogger(Logger):
    """A Lightning logger that keeps every logged row in adl's checkpoint: after any number of
    restarts, ``history`` holds exactly the rows an uninterrupted run logged."""

    def __init__(self, name: str = "adl.lightning.history") -> None:
        super().__init__()
        self._store: dict[str, Any] = {"rows": []}
        track(name, self._store)  # restored in place when the job resumes

    @property
    def history(self) -> list[dict[str, float]]:
        return list(self._store["rows"])

    @property
    def name(self) -> str:
        return "adl"

    @property
    def version(self) -> int:
        return 0

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        row = {k: float(v) for k, v in metrics.items()}
        row["step"] = float(step if step is not None else -1)
        self._store["rows"].append(row)
