"""AdaptiveTrainer with ``max_batch_size``: a job on which adl's goodput model clearly prefers a
larger batch, recording what each optimizer step really used.

The model is a tiny MLP (a step costs mostly its fixed overhead, so throughput grows with the
batch) on labels with heavy noise (the gradient noise dwarfs the true gradient, so a larger
batch loses little statistical efficiency): goodput then picks a batch above B0 as soon as it
has measured both. Run as ``--gates W:S,... -- ARGS`` (see elastic_gates) or without gates.

Every rank's callback records, per optimizer step: the global step, the epoch fraction, the
loader's batch, micro-batch and accumulation steps, the micro-batches the step actually ran and
the world size. Rank 0 prints each as ``{"rec": ...}``; ``--out`` writes ``state.log_history``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from elastic_gates import hold, parse_gates  # beside this script: on sys.path when it runs
from torch import nn
from torch.utils.data import Dataset
from transformers import TrainerCallback
from transformers import TrainingArguments as Args

import adl
from adl.integrations.hf import AdaptiveTrainer

DIM = 8


class NoisyLabels(Dataset[dict[str, torch.Tensor]]):
    """A linear rule whose labels are flipped with probability ``flip_p``."""

    def __init__(self, size: int, flip_p: float) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, DIM, generator=gen)
        rule = (self.x[:, 0] > 0).long()
        flip = torch.rand(size, generator=gen) < flip_p
        self.y = torch.where(flip, 1 - rule, rule)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(DIM, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class Record(TrainerCallback):
    """What each optimizer step used, from the trainer's own loader; gates for the test."""

    def __init__(self, gates: str) -> None:
        self.gates = parse_gates(gates)
        self.trainer: AdaptiveTrainer | None = None
        self.micro = 0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.micro = 1

    def on_substep_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.micro += 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        assert self.trainer is not None and self.trainer.adl_loader is not None
        loader = self.trainer.adl_loader
        rec = {
            "step": state.global_step,
            "epoch": state.epoch,
            "batch": loader.current_batch_size,
            "local": loader.current_local_bsz,
            "accum": loader.accumulation_steps,
            "micro": self.micro,
            "world": self.trainer._adl.world_size,
        }
        if state.is_world_process_zero:
            print(json.dumps({"rec": rec}), flush=True)
        hold(self.gates, state.global_step)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gates", default="")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-batch", type=int, default=128)
    p.add_argument("--local-max", type=int, default=32, help="larger batches accumulate")
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--flip", type=float, default=0.25)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args([arg for arg in argv if arg != "--"])

    adl.init_process_group()
    args = Args(
        output_dir=os.environ.get("ADL_CHECKPOINT_DIR", "/tmp/hf_autoscale_out"),
        num_train_epochs=a.epochs,
        per_device_train_batch_size=a.batch,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        logging_steps=1,  # every step: each entry can be checked against its step
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    record = Record(a.gates)
    trainer = AdaptiveTrainer(
        model=Classifier(),
        args=args,
        train_dataset=NoisyLabels(a.size, a.flip),
        callbacks=[record],
        max_batch_size=a.max_batch,
        local_bsz_bounds=(2, a.local_max),
    )
    record.trainer = trainer
    trainer.train()
    if trainer.is_world_process_zero():
        a.out.write_text(json.dumps(trainer.state.log_history, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
