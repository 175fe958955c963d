"""An LSTM word language model, sequence-first, made elastic with adl (CPU or GPU).

The shape of pytorch/examples' ``word_language_model``: a corpus of token ids cut into
sequences of ``--bptt`` tokens, batches laid out ``[bptt, batch]`` (sequence first, as
``nn.LSTM`` takes them by default), a validation pass after every epoch, the learning rate
divided by 4 whenever the validation loss does not improve, and the best model saved with
``torch.save(model, path)``. The corpus is synthetic (a fixed random Markov chain over a small
vocabulary, so there is something to learn and nothing to download).

The lines marked ``# adl`` are all it takes. Two things change from the original, and why:

* The hidden state is started afresh for every batch (``model.init_hidden``). The original
  carries it from one batch to the next, which only means something when batch ``t+1``
  continues the very streams of batch ``t`` on the same process: once batches are split over
  replicas, shuffled, and re-split at another size after a resize, the carried state belongs
  to other text. See "Stateful loops" in docs/client-library.md.
* What must survive a restart beyond the model and optimizer (the best validation loss so far,
  the history printed) is registered with the job context, so a resized or resumed job goes
  on annealing exactly as an uninterrupted one.

    python examples/word_lm.py --epochs 3                                  # one process
    adl submit lm --min 1 --max 2 -- python examples/word_lm.py --epochs 6

Rank 0 prints one JSON line per epoch: ``{"epoch", "train_loss", "val_loss", "lr",
"batch_size", "steps", "world"}``; ``--out`` writes them all (kept across restarts) as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

import adl


def markov_corpus(tokens: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """``tokens`` ids of a fixed random Markov chain in which each word is followed by one of
    four successors, the first twice as often as the others: a text with structure an LSTM
    can learn."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=gen).tolist()
    picks = torch.tensor([0, 0, 1, 2, 3])[torch.randint(0, 5, (tokens,), generator=gen)].tolist()
    out, word = [], 0
    for pick in picks:
        word = successors[word][pick]
        out.append(word)
    return torch.tensor(out, dtype=torch.long)


class Sequences(Dataset[torch.Tensor]):
    """The corpus cut into sequences of ``bptt + 1`` tokens (inputs and the next tokens)."""

    def __init__(self, corpus: torch.Tensor, bptt: int) -> None:
        count = (len(corpus) - 1) // bptt
        self.data = corpus[: count * bptt + 1]
        self.bptt = bptt

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.bptt

    def __getitem__(self, i: int) -> torch.Tensor:
        start = i * self.bptt
        return self.data[start : start + self.bptt + 1]


def sequence_first(samples: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """[batch, bptt + 1] -> inputs and targets laid out [bptt, batch]."""
    batch = torch.stack(samples).t().contiguous()
    return batch[:-1], batch[1:]


class LSTMModel(nn.Module):
    """Embedding, LSTM and decoder, as in word_language_model's RNNModel (LSTM only)."""

    def __init__(self, vocab: int, emsize: int, nhid: int, nlayers: int) -> None:
        super().__init__()
        self.nlayers, self.nhid = nlayers, nhid
        self.encoder = nn.Embedding(vocab, emsize)
        self.rnn = nn.LSTM(emsize, nhid, nlayers)
        self.decoder = nn.Linear(nhid, vocab)

    def forward(self, x: torch.Tensor, hidden: Any) -> tuple[torch.Tensor, Any]:
        output, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


class RunState:
    """The best validation loss so far and the printed lines: kept in adl's checkpoint."""

    name = "word_lm.run"

    def __init__(self) -> None:
        self.best_val: float | None = None
        self.steps = 0
        self.rows: list[dict[str, Any]] = []

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_val": self.best_val,
            "steps": self.steps,
            "rows": [dict(r) for r in self.rows],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_val, self.steps = state["best_val"], int(state["steps"])
        self.rows = [dict(r) for r in state["rows"]]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--tokens", type=int, default=24000, help="tokens in the synthetic corpus")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--bptt", type=int, default=35, help="sequence length")
    p.add_argument("--batch", type=int, default=20, help="training batch (sequences)")
    p.add_argument("--eval-batch", type=int, default=10, help="validation batch (sequences)")
    p.add_argument("--max-batch", type=int, default=None, help="let adl grow the batch to this")
    p.add_argument("--emsize", type=int, default=32)
    p.add_argument("--nhid", type=int, default=32)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--lr", type=float, default=20.0, help="initial learning rate (plain SGD)")
    p.add_argument("--clip", type=float, default=0.25, help="gradient norm clipping")
    p.add_argument("--save", type=Path, default=None, help="where to save the best model")
    p.add_argument("--out", type=Path, default=None, help="write every epoch's line as JSON")
    a = p.parse_args(argv)
    for name in ("epochs", "tokens", "vocab", "bptt", "batch", "eval_batch", "emsize", "nhid"):
        if not 1 <= getattr(a, name) <= 1 << 24:  # bound what the command line hands over
            p.error(f"--{name.replace('_', '-')} must be in [1, 2**24]")
    if not 1 <= a.nlayers <= 8:
        p.error("--nlayers must be in [1, 8]")
    return a


def evaluate(model: nn.Module, loader: adl.AdaptiveDataLoader, vocab: int) -> float:
    """Mean cross-entropy per token over the whole validation set, all replicas together."""
    model.eval()
    stats = adl.Accumulator()  # adl: sums over the replicas (and across a restart)
    with torch.no_grad():
        for x, y in loader:
            out, _ = model(x, model.init_hidden(x.shape[1]))
            loss = nn.functional.cross_entropy(out.view(-1, vocab), y.reshape(-1), reduction="sum")
            stats["loss"] += loss.item()
            stats["tokens"] += y.numel()
    model.train()
    with stats.synchronized():
        return float(stats["loss"] / stats["tokens"])


def main(argv: Sequence[str] | None = None, on_step: Callable[[int], None] | None = None) -> None:
    """Train; ``on_step(step)`` runs on every rank after each optimizer step (tests hook it)."""
    args = parse_args(argv)
    ctx = adl.init_process_group()  # adl: join the job (standalone without ADL_* variables)
    corpus = markov_corpus(args.tokens, args.vocab)
    split = len(corpus) * 9 // 10
    train = Sequences(corpus[:split], args.bptt)
    valid = Sequences(corpus[split:], args.bptt)

    torch.manual_seed(0)
    model = LSTMModel(args.vocab, args.emsize, args.nhid, args.nlayers)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    # adl: the loader that trains sets the job's batch size (the validation one only evaluates)
    loader = adl.AdaptiveDataLoader(
        train, batch_size=args.batch, shuffle=True, collate_fn=sequence_first
    )
    if args.max_batch is not None:  # adl: the batch size of the best goodput, up to this
        loader.autoscale_batch_size(args.max_batch, local_bsz_bounds=(4, args.max_batch))
    val_loader = adl.AdaptiveDataLoader(
        valid, batch_size=args.eval_batch, collate_fn=sequence_first
    )
    model = adl.AdaptiveDataParallel(model, optimizer)  # adl: model.init_hidden still works
    run = RunState()
    ctx.register(run)  # adl: the best loss, the step count and the history are checkpointed
    stats = adl.Accumulator()  # adl: the training loss summed over replicas and restarts

    for epoch in adl.remaining_epochs_until(args.epochs):  # adl: resumes mid-run
        for x, y in loader:
            out, _ = model(x, model.init_hidden(x.shape[1]))  # fresh state every batch
            loss = nn.functional.cross_entropy(out.view(-1, args.vocab), y.reshape(-1))
            loss.backward()
            stats[f"loss{epoch}"] += loss.item() * y.numel()
            stats[f"tokens{epoch}"] += y.numel()
            if not ctx.is_sync_step:  # adl: a micro-batch before the last of a step
                continue
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            optimizer.zero_grad()
            run.steps += 1
            if on_step is not None:
                on_step(run.steps)
        with stats.synchronized():
            train_loss = float(stats[f"loss{epoch}"] / stats[f"tokens{epoch}"])
        val_loss = evaluate(model, val_loader, args.vocab)
        lr = optimizer.param_groups[0]["lr"]
        row = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "lr": lr,
            "batch_size": loader.current_batch_size,
            "steps": run.steps,
            "world": ctx.world_size,
        }
        run.rows.append(row)
        if ctx.rank == 0:
            print(json.dumps(row), flush=True)
        if run.best_val is None or val_loss < run.best_val:
            run.best_val = val_loss
            if ctx.rank == 0 and args.save is not None:
                torch.save(model, args.save)  # adl: saves the model the wrapper holds
        else:
            for group in optimizer.param_groups:  # anneal: no improvement on validation
                group["lr"] = lr / 4.0

    if ctx.rank == 0 and args.out is not None:
        result = {"epochs": run.rows, "best_val": run.best_val, "ppl": math.exp(run.best_val or 0)}
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
