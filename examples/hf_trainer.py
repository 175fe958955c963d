"""A Hugging Face Trainer made elastic with adl: the only change is the class name.

A 2-layer BERT built from a config (no download) learns a rule on generated token sequences:
is token 1 more frequent than token 2? Stock Trainer code, except the lines marked ``# adl``.

    python examples/hf_trainer.py --out history.json                 # one process
    adl submit bert --min 1 --max 2 -- python examples/hf_trainer.py --out /tmp/history.json

Rank 0 prints every log entry as a JSON line and ``--out`` writes ``state.log_history``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is built locally

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, TrainerCallback
from transformers import TrainingArguments as Args

import adl
from adl.integrations.hf import AdaptiveTrainer  # adl: instead of transformers.Trainer

VOCAB, LENGTH = 32, 16


class CountingTask(Dataset[dict[str, torch.Tensor]]):
    """Random sequences labelled 1 when token 1 occurs more often than token 2."""

    def __init__(self, size: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(3, VOCAB, (size, LENGTH), generator=gen)
        marks = torch.randint(1, 3, (size, LENGTH), generator=gen)
        keep = torch.rand(size, LENGTH, generator=gen) < 0.3
        self.ids = torch.where(keep, marks, self.ids)
        self.labels = ((self.ids == 1).sum(1) > (self.ids == 2).sum(1)).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def tiny_bert() -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        # no dropout: at another world size a sample is trained on another rank, which draws
        # other masks, and the runs could not be compared step by step
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)  # the same initial weights in every process
    return BertForSequenceClassification(config)


class PrintLogs(TrainerCallback):
    """Rank 0 prints each log entry as one JSON line (what the tests and a user watch)."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if state.is_world_process_zero:
            print(json.dumps({"step": state.global_step, **(logs or {})}), flush=True)


def main(argv: Sequence[str] | None = None, callbacks: Sequence[TrainerCallback] = ()) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--size", type=int, default=256, help="training sequences")
    p.add_argument("--batch", type=int, default=16, help="global batch size B0")
    p.add_argument("--max-batch", type=int, default=None, help="let adl grow the batch to this")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--out", type=Path, default=None, help="write state.log_history here")
    a = p.parse_args(argv)

    adl.init_process_group()  # adl: join the job before TrainingArguments looks for one
    args = Args(
        output_dir=os.environ.get("ADL_CHECKPOINT_DIR", "/tmp/hf_trainer_out"),
        num_train_epochs=a.epochs,
        per_device_train_batch_size=a.batch,  # adl: the global batch B0 at any world size
        learning_rate=a.lr,
        lr_scheduler_type="linear",
        warmup_steps=4,
        logging_steps=2,
        save_strategy="no",  # adl checkpoints on every stop
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    trainer = AdaptiveTrainer(  # adl
        model=tiny_bert(),
        args=args,
        train_dataset=CountingTask(a.size),
        callbacks=[PrintLogs(), *callbacks],
        max_batch_size=a.max_batch,  # adl: optional, lets adl pick the batch for goodput
    )
    trainer.train()
    if a.out is not None and trainer.is_world_process_zero():
        a.out.write_text(json.dumps(trainer.state.log_history, indent=1))


if __name__ == "__main__":
    main()
