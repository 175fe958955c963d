"""Hugging Face ``Trainer`` under adl: ``AdaptiveTrainer`` (``pip install "adl[hf]"``).

The user keeps ``Trainer(model=..., args=..., train_dataset=...)`` and ``trainer.train()``;
only the class name changes. ``train()`` runs its own loop, because Trainer's loop fixes what adl
varies: the per-device batch and the accumulation steps (read once from ``TrainingArguments``),
and a checkpoint tied to one world size (data skipped by batch count, one RNG file per rank).
The loop keeps Trainer's parts: ``compute_loss``, ``create_optimizer_and_scheduler``, the
callbacks (``on_step_end`` decides when to log, as ``DefaultFlowCallback`` says), ``log`` and
``state.log_history``. adl's parts do the rest:

* ``adl.AdaptiveDataLoader`` shards and shuffles the training set and picks the micro-batch and
  accumulation (``max_batch_size=`` lets it grow the batch for goodput). A fixed batch is B0
  samples a step at every world size, in shares that differ by at most one (``exact_batch``;
  AdaptiveDataParallel weighs each share by its size, so the update is the mean over the
  step's samples);
* ``adl.AdaptiveDataParallel`` does DDP, gradient-noise statistics, LR scaling, the LR
  scheduler's steps (one per scale-invariant step) and the hints reports;
* the checkpoint (SIGTERM or a resize) holds the model, optimizer, scheduler, data position,
  epoch, ``state.global_step``, ``state.log_history`` and the loss summed since the last log, so a
  resumed job, at any world size, logs what an uninterrupted one logs;
* the end-of-training metrics (runtime, samples and steps per second, FLOs, loss, epoch) cover
  the whole run: every start's time in ``train()``, every replica's samples and FLOs.

Metrics differ from stock Trainer in two ways, both so that they do not depend on the world
size: ``loss`` is the mean over every sample since the last log (not the mean over ranks of
per-rank means), and ``epoch`` is the fraction of the epoch's samples consumed. ``learning_rate``
is the LR the optimizer applied (the scheduler's value times adl's scaling factor).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist
from transformers import Trainer, TrainerState
from transformers.trainer_utils import TrainOutput

from adl.client_lib.accumulator import Accumulator
from adl.client_lib.context import has_context
from adl.client_lib.data import AdaptiveDataLoader
from adl.client_lib.env import context
from adl.client_lib.epoch import remaining_epochs_until
from adl.client_lib.parallel import AdaptiveDataParallel
from adl.integrations.common import BatchSettings, batch_length, step_seed

__all__ = ["AdaptiveTrainer"]

STATE_NAME = "adl.hf.trainer"
_UNSUPPORTED = "adl resumes a job itself, from its own checkpoint"


class _TrainerStateCheckpoint:
    """The part of ``TrainerState`` a resumed run needs to log as if it had never stopped."""

    name = STATE_NAME

    def __init__(self, trainer: AdaptiveTrainer) -> None:
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        state = self._trainer.state
        return {
            "global_step": int(state.global_step),
            "epoch": float(state.epoch or 0.0),
            "log_history": [dict(entry) for entry in state.log_history],
            "num_input_tokens_seen": int(state.num_input_tokens_seen),
            "train_runtime": self._trainer._adl_runtime(),
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        state = self._trainer.state
        state.global_step = int(saved["global_step"])
        state.epoch = float(saved["epoch"])
        state.log_history = [dict(entry) for entry in saved["log_history"]]
        state.num_input_tokens_seen = int(saved.get("num_input_tokens_seen", 0))
        self._trainer._adl_runtime_before = float(saved.get("train_runtime", 0.0))


class AdaptiveTrainer(Trainer):
    """A ``transformers.Trainer`` whose ``train()`` is elastic under adl.

    Extra keyword arguments (all optional):

    * ``init_batch_size``: B0, the global batch the LR and schedule are written for. Default:
      ``per_device_train_batch_size * gradient_accumulation_steps`` (one device's batch in the
      arguments; under adl the number of devices changes, so the *global* batch is fixed).
    * ``max_batch_size``, ``local_bsz_bounds``, ``gradient_accumulation``: let adl grow the
      batch up to ``max_batch_size`` for goodput (see ``AdaptiveDataLoader.autoscale_batch_size``).
    * ``scaling_rule``: adl's LR scaling rule (default: AdaScale for SGD, AdamScale for Adam).
    """

    def __init__(
        self,
        *args: Any,
        init_batch_size: int | None = None,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int, int] | None = None,
        gradient_accumulation: bool = True,
        scaling_rule: Any | None = None,
        **kwargs: Any,
    ) -> None:
        # accelerate adopts a process group that exists, so adl's must come first: the one that
        # TrainingArguments starts on its own (from the torchrun variables adl also sets) has
        # none of adl's control groups and a checkpoint restored before it
        if dist.is_initialized() and not has_context():
            raise RuntimeError(
                "call adl.init_process_group() before building TrainingArguments: they joined "
                "the job by themselves, without adl"
            )
        self._adl = context()
        super().__init__(*args, **kwargs)
        b0 = init_batch_size or (
            self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps
        )
        self.adl_batch = BatchSettings(b0, max_batch_size, local_bsz_bounds, gradient_accumulation)
        self._scaling_rule = scaling_rule
        self.adl_loader: AdaptiveDataLoader | None = None
        self.adl_model: AdaptiveDataParallel | None = None
        # time in train() of the job's earlier starts (from the checkpoint), and of this one
        self._adl_runtime_before = 0.0
        self._adl_start: float | None = None
        # (micro-batches, samples) of the optimizer step under way, over all replicas

    # ------------------------------------------------------------------ set-up

    def _adl_check_arguments(self, resume_from_checkpoint: Any) -> None:
        if resume_from_checkpoint:
            raise ValueError(f"resume_from_checkpoint is not supported: {_UNSUPPORTED}")
        if self.args.max_steps > 0:
            raise ValueError(
                "max_steps is not supported: the run is num_train_epochs epochs, whatever batch "
                "size adl picks (a step count would change meaning with the batch size)"
            )
        if self.train_dataset is None:
            raise ValueError("AdaptiveTrainer.train() needs a train_dataset")

    def _adl_build_loader(self) -> AdaptiveDataLoader:
        loader = AdaptiveDataLoader(
            self.train_dataset,  # type: ignore[arg-type]
            batch_size=self.adl_batch.init_batch_size,
            shuffle=True,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            name="adl.hf.train",
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
        )
        loader.exact_batch = True  # B0 at every world size, in shares that may differ by one
        self.adl_batch.apply(loader)
        return loader

    def _adl_build_model(self, total_steps: int) -> AdaptiveDataParallel:
        # the schedule is written in steps at B0: adl steps it once per scale-invariant step
        self.create_optimizer_and_scheduler(num_training_steps=total_steps)
        assert self.optimizer is not None and self.model is not None
        self.model.train()
        return AdaptiveDataParallel(
            self.model,
            self.optimizer,
            self.lr_scheduler,
            self._scaling_rule,
            init_batch_size=self.adl_batch.init_batch_size,
            name="adl.hf.model",
        )

    def _adl_fresh_state(self, total_steps: int, epochs: int) -> None:
        self.state = TrainerState()
        self.state.train_batch_size = self.adl_batch.init_batch_size
        self.state.compute_steps(self.args, total_steps)
        self.state.init_training_references(self, total_steps, epochs, None)
        rank0 = self._adl.rank == 0
        self.state.is_world_process_zero = self.state.is_local_process_zero = rank0

    # ------------------------------------------------------------------ the loop

    def train(  # type: ignore[override]
        self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any
    ) -> TrainOutput:
        """Train ``num_train_epochs`` epochs, resuming where the job's last checkpoint stopped."""
        self._adl_check_arguments(resume_from_checkpoint)
        self.is_in_train = True
        ctx = self._adl
        epochs = math.ceil(self.args.num_train_epochs)
        loader = self.adl_loader = self._adl_build_loader()
        size = len(loader.dataset)
        total_steps = max(1, epochs * math.ceil(size / self.adl_batch.init_batch_size))
        self._adl_fresh_state(total_steps, epochs)
        model = self.adl_model = self._adl_build_model(total_steps)
        ctx.register(_TrainerStateCheckpoint(self))  # restores global_step and log history
        window = Accumulator("adl.hf.window")  # loss since the last log, summed over replicas
        run = Accumulator("adl.hf.run")  # the same over the whole run
        self.callback_handler.model = self.model
        self.callback_handler.optimizer = self.optimizer
        self.callback_handler.lr_scheduler = self.lr_scheduler
        self.callback_handler.train_dataloader = loader
        self._adl_start = time.time()
        self.control = self.callback_handler.on_train_begin(self.args, self.state, self.control)
        for epoch in remaining_epochs_until(epochs):
            self.control = self.callback_handler.on_epoch_begin(self.args, self.state, self.control)
            self._adl_run_epoch(model, loader, epoch, size, window, run)
            self.control = self.callback_handler.on_epoch_end(self.args, self.state, self.control)
            self._adl_after_step(model, window)
            if self.control.should_training_stop:
                break
        with run.synchronized():
            samples, flos = run["samples"], float(run["flos"])
            train_loss = run["loss"] / max(samples, 1)
        metrics = self._adl_train_metrics(samples, flos, train_loss)
        self.log(metrics)  # adds the epoch, as Trainer's does
        self.control = self.callback_handler.on_train_end(self.args, self.state, self.control)
        self.is_in_train = False
        return TrainOutput(self.state.global_step, train_loss, metrics)

    def _adl_runtime(self) -> float:
        """Seconds in ``train()`` over every start of the job so far (not the time between
        starts: stopped, suspended or starting up)."""
        now = time.time() - self._adl_start if self._adl_start is not None else 0.0
        return self._adl_runtime_before + now

    def _adl_train_metrics(
        self, samples: float, flos: float, train_loss: float
    ) -> dict[str, float]:
        """Trainer's end-of-training metrics, over the whole run (every start, every replica):
        its runtime, samples and optimizer steps per second, FLOs and mean loss."""
        runtime = self._adl_runtime()
        metrics = {"train_runtime": round(runtime, 4)}
        if runtime > 0:
            metrics["train_samples_per_second"] = round(samples / runtime, 3)
            metrics["train_steps_per_second"] = round(self.state.global_step / runtime, 3)
        self.state.total_flos = flos
        metrics["total_flos"] = flos
        metrics["train_loss"] = train_loss
        return metrics

    def _adl_run_epoch(
        self,
        model: AdaptiveDataParallel,
        loader: AdaptiveDataLoader,
        epoch: int,
        size: int,
        window: Accumulator,
        run: Accumulator,
    ) -> None:
        ctx = self._adl
        first = True  # the next batch starts an optimizer step
        for inputs in loader:
            if first:
                torch.manual_seed(step_seed(self.args.seed, self.state.global_step, ctx.rank))
                self.control = self.callback_handler.on_step_begin(
                    self.args, self.state, self.control
                )
            samples = batch_length(inputs)
            loss = self._adl_micro_step(model, inputs)
            flos = float(self.floating_point_ops(inputs))
            window.update_sums({"loss": loss * samples, "samples": samples})
            run.update_sums({"loss": loss * samples, "samples": samples, "flos": flos})
            first = ctx.is_sync_step
            if not first:
                self.control = self.callback_handler.on_substep_end(
                    self.args, self.state, self.control
                )
                continue
            self._adl_optimizer_step(model, epoch + loader.offset / size)
            self._adl_after_step(model, window)
            if self.control.should_epoch_stop or self.control.should_training_stop:
                break

    def _adl_micro_step(self, model: AdaptiveDataParallel, inputs: Any) -> float:
        """Forward and backward on one micro-batch; its mean loss.

        The shares of a step may differ (B0 split over replicas that do not divide it, an
        epoch's last step): AdaptiveDataParallel weighs each by its size in the backward, so the
        update is the mean over every sample of the step, as on one process.
        """
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        assert isinstance(loss, torch.Tensor)  # return_outputs=False: the loss alone
        loss.backward()
        return float(loss.detach())

    def _adl_optimizer_step(self, model: AdaptiveDataParallel, epoch: float) -> None:
        args = self.args
        self._grad_norm: float | None = None
        if args.max_grad_norm and args.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            self._grad_norm = float(norm)
        scheduled = self._get_learning_rate()  # adl steps the scheduler inside step()
        self.control = self.callback_handler.on_pre_optimizer_step(args, self.state, self.control)
        assert self.optimizer is not None
        self.optimizer.step()
        self.control = self.callback_handler.on_optimizer_step(args, self.state, self.control)
        self._applied_lr = scheduled * model.lr_factors[0]
        self.optimizer.zero_grad(set_to_none=True)
        self.state.global_step += 1
        self.state.epoch = epoch
        self.control = self.callback_handler.on_step_end(args, self.state, self.control)

    def _adl_after_step(self, model: AdaptiveDataParallel, window: Accumulator) -> None:
        """Log, evaluate and save as the callbacks asked (collective: every rank runs it)."""
        if self.control.should_log:
            with window.synchronized():
                samples = window["samples"]
                logs: dict[str, float] = {}
                if samples:
                    logs["loss"] = window["loss"] / samples
                    if getattr(self, "_grad_norm", None) is not None:
                        logs["grad_norm"] = float(self._grad_norm)  # type: ignore[arg-type]
                    logs["learning_rate"] = float(getattr(self, "_applied_lr", 0.0))
                    logs["batch_size"] = float(samples_per_step(self))
            window.reset()
            if logs:
                self.log(logs)
            self.control.should_log = False
        if self.control.should_evaluate:
            self.evaluate()
            self.control.should_evaluate = False
        # Trainer's own checkpoints are per world size; adl checkpoints on every stop instead
        self.control.should_save = False


def samples_per_step(trainer: AdaptiveTrainer) -> int:
    """The global batch of the data loader's current configuration."""
    loader = trainer.adl_loader
    return loader.current_batch_size if loader is not None else 0
