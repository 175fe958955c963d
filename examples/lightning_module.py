"""A LightningModule made elastic with adl: a strategy, a callback and adl's data loader.

A small MLP learns a teacher's labels on generated data. Stock Lightning code, except the
lines marked ``# adl``.

    python examples/lightning_module.py --out history.json              # one process
    adl submit mlp --min 1 --max 2 -- python examples/lightning_module.py --out /tmp/h.json

Rank 0 prints every logged row as a JSON line and ``--out`` writes all of them.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor
from torch import nn
from torch.utils.data import TensorDataset

import adl
from adl.integrations.lightning import AdaptiveCallback, AdaptiveStrategy, HistoryLogger  # adl


def teacher_dataset(size: int, dim: int = 16, classes: int = 4) -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(size, dim, generator=gen)
    y = (x @ torch.randn(dim, classes, generator=gen)).argmax(dim=1)
    return TensorDataset(x, y)


class Classifier(pl.LightningModule):
    def __init__(self, size: int, batch: int, epochs: int, lr: float) -> None:
        super().__init__()
        self.size, self.batch, self.epochs, self.lr = size, batch, epochs, lr
        torch.manual_seed(0)  # the same initial weights in every process
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def train_dataloader(self) -> Any:
        # adl: shards, shuffles and resumes mid-epoch at any world size; batch is the global B0
        data = teacher_dataset(self.size)
        return adl.AdaptiveDataLoader(data, batch_size=self.batch, shuffle=True)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False, sync_dist=True)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        steps = self.epochs * math.ceil(self.size / self.batch)  # steps at B0
        schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class PrintRows(pl.Callback):
    """Rank 0 prints the rows logged in this process (what a user and the tests watch)."""

    printed = 0

    def on_train_start(self, trainer: pl.Trainer, *args: Any) -> None:
        logger = trainer.logger
        self.printed = len(logger.history) if isinstance(logger, HistoryLogger) else 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        logger = trainer.logger
        if trainer.is_global_zero and isinstance(logger, HistoryLogger):
            rows = logger.history
            for row in rows[self.printed :]:
                print(json.dumps(row), flush=True)
            self.printed = len(rows)


def main(argv: Sequence[str] | None = None, callbacks: Sequence[pl.Callback] = ()) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--batch", type=int, default=32, help="global batch size B0")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=None, help="write the logged rows here")
    a = p.parse_args(argv)

    adl.init_process_group()  # adl: join the job (standalone without the ADL_* variables)
    logger = HistoryLogger()  # adl: its rows are checkpointed with the job
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=a.epochs,
        strategy=AdaptiveStrategy(),  # adl
        callbacks=[AdaptiveCallback(), LearningRateMonitor("step"), PrintRows(), *callbacks],
        logger=logger,
        log_every_n_steps=2,
        enable_checkpointing=False,  # adl checkpoints on every stop
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Classifier(a.size, a.batch, a.epochs, a.lr))
    if a.out is not None and trainer.is_global_zero:
        a.out.write_text(json.dumps(logger.history, indent=1))


if __name__ == "__main__":
    main()
