"""Causal language modelling with a Hugging Face Trainer under adl, in the shape of HF's
``run_clm.py``: tokenize a text corpus, group the tokens into blocks, train a GPT-2, save the
train metrics and the trainer state. Stock Trainer code, except the lines marked ``# adl``.

Nothing is downloaded: the corpus is generated (sentences of a small grammar, seeded), the
tokenizer is a word-level ``tokenizers`` model over the corpus' words, and the GPT-2 is built
from a ``GPT2Config``.

    python examples/hf_clm.py --output-dir /tmp/clm                    # one process
    python examples/hf_clm.py --trainer stock --output-dir /tmp/stock   # transformers.Trainer
    adl submit clm --min 1 --max 3 -- python examples/hf_clm.py --output-dir /tmp/clm

Rank 0 prints every log entry as a JSON line, then ``{"result": ...}`` (optimizer steps, the
step count planned, samples trained); ``--output-dir`` gets ``train_results.json``,
``all_results.json`` and ``trainer_state.json`` as with ``run_clm.py``, and ``--out`` the
``state.log_history``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is built locally

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

import adl
from adl.integrations.hf import AdaptiveTrainer  # adl: instead of transformers.Trainer

WORDS = {
    "det": ["the", "a", "every", "no"],
    "adj": ["small", "red", "quiet", "old", "bright", "heavy"],
    "noun": ["cat", "dog", "bird", "robot", "child", "river", "stone", "tree"],
    "verb": ["sees", "follows", "carries", "hears", "finds", "paints"],
    "prep": ["near", "under", "behind", "beside"],
}


def corpus(lines: int, seed: int = 0) -> list[str]:
    """Sentences of a small grammar: ``det [adj] noun verb det [adj] noun [prep det noun] .``"""
    rng = random.Random(seed)

    def phrase() -> list[str]:
        words = [rng.choice(WORDS["det"])]
        if rng.random() < 0.5:
            words.append(rng.choice(WORDS["adj"]))
        return [*words, rng.choice(WORDS["noun"])]

    text = []
    for _ in range(lines):
        words = [*phrase(), rng.choice(WORDS["verb"]), *phrase()]
        if rng.random() < 0.4:
            words += [rng.choice(WORDS[part]) for part in ("prep", "det", "noun")]
        text.append(" ".join([*words, "."]))
    return text


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the grammar's words (the same ids in every process)."""
    words = sorted({w for group in WORDS.values() for w in group} | {"."})
    vocab = {"<unk>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    model = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>", eos_token="<eos>")


class Blocks(Dataset[dict[str, torch.Tensor]]):
    """``run_clm``'s ``group_texts``: the token stream cut into blocks; labels are the inputs
    (the model shifts them). The remainder shorter than a block is dropped."""

    def __init__(self, ids: list[int], block_size: int) -> None:
        usable = len(ids) // block_size * block_size
        self.blocks = torch.tensor(ids[:usable], dtype=torch.long).view(-1, block_size)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        block = self.blocks[i]
        return {"input_ids": block, "attention_mask": torch.ones_like(block), "labels": block}


def build_dataset(lines: int, block_size: int) -> tuple[Blocks, PreTrainedTokenizerFast]:
    tokenizer = word_tokenizer()
    encoded = tokenizer(corpus(lines))["input_ids"]
    stream = [t for ids in encoded for t in (*ids, tokenizer.eos_token_id)]
    return Blocks(stream, block_size), tokenizer


def tiny_gpt2(tokenizer: PreTrainedTokenizerFast, block_size: int) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        n_positions=block_size,
        n_embd=32,
        n_layer=2,
        n_head=2,
        # no dropout: at another world size a sample is trained on another rank, which draws
        # other masks, and the runs could not be compared step by step
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)  # the same initial weights in every process
    return GPT2LMHeadModel(config)


class PrintLogs(TrainerCallback):
    """Rank 0 prints each log entry as one JSON line (what the tests and a user watch)."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if state.is_world_process_zero:
            print(json.dumps({"step": state.global_step, **(logs or {})}), flush=True)


def main(argv: Sequence[str] | None = None, callbacks: Sequence[TrainerCallback] = ()) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lines", type=int, default=600, help="sentences in the corpus")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--batch", type=int, default=16, help="global batch size B0")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--output-dir", type=Path, default=Path("/tmp/hf_clm_out"))
    p.add_argument("--out", type=Path, default=None, help="write state.log_history here")
    p.add_argument(
        "--trainer", choices=("adl", "stock"), default="adl", help="stock: transformers.Trainer"
    )
    a = p.parse_args(argv)

    stock = a.trainer == "stock"
    if not stock:
        adl.init_process_group()  # adl: join the job before TrainingArguments looks for one
    train_dataset, tokenizer = build_dataset(a.lines, a.block_size)
    args = TrainingArguments(
        output_dir=str(a.output_dir),
        num_train_epochs=a.epochs,
        per_device_train_batch_size=a.batch,  # adl: the global batch B0 at any world size
        learning_rate=a.lr,
        lr_scheduler_type="linear",
        warmup_steps=4,
        logging_steps=3,
        save_strategy="no",  # adl checkpoints on every stop
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    trainer_class = Trainer if stock else AdaptiveTrainer  # adl
    trainer = trainer_class(
        model=tiny_gpt2(tokenizer, a.block_size),
        args=args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        data_collator=default_data_collator,
        callbacks=[PrintLogs(), *callbacks],
    )
    train_result = trainer.train()
    trainer.save_model()
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    if trainer.is_world_process_zero():
        state = trainer.state
        result = {"global_step": state.global_step, "max_steps": state.max_steps}
        print(json.dumps({"result": result}), flush=True)
        if a.out is not None:
            a.out.write_text(json.dumps(state.log_history, indent=1))


if __name__ == "__main__":
    main()
