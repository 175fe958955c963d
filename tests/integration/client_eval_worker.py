"""Worker with the MNIST tutorial's metric pattern (run as a script by the tests).

``train()`` and ``evaluate()`` build an unnamed ``adl.Accumulator()`` every epoch; the best
accuracy is an ``adl.track``-ed dict. The printed metrics depend only on which samples were
counted (not on floating-point training results), so a run stopped and resized any number of
times must print exactly what an uninterrupted run prints. Rank 0 appends each printed metric
to ``--record/printed.jsonl``. ``--stop EPOCH PHASE BATCH`` stops the job there (rank
``--stop-rank``), by SIGTERM or, with ``--stop-file``, by writing the stop file as a suspend does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

import adl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the test kit
from tests.waiting import wait_for


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--stop", nargs=3, default=None)
    p.add_argument("--stop-rank", type=int, default=0)
    p.add_argument("--stop-file", action="store_true")
    args = p.parse_args()
    stop = None if args.stop is None else (int(args.stop[0]), args.stop[1], int(args.stop[2]))

    ctx = adl.init_process_group("gloo")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.arange(96), torch.randn(96, 4, generator=gen))
    train_loader = adl.AdaptiveDataLoader(data, batch_size=12, shuffle=True, name="train")
    val_loader = adl.AdaptiveDataLoader(TensorDataset(torch.arange(30)), batch_size=4, name="val")
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    net = adl.AdaptiveDataParallel(model, opt, report=False)
    best: dict[str, Any] = {"accuracy": 0.0, "epoch": -1}
    adl.track("best", best)
    args.record.mkdir(parents=True, exist_ok=True)
    out = (args.record / "printed.jsonl").open("a", buffering=1)

    def show(epoch: int, kind: str, value: Any) -> None:
        if ctx.rank == 0:
            out.write(json.dumps({"epoch": epoch, "kind": kind, "value": value}) + "\n")

    def maybe_stop(epoch: int, phase: str, i: int) -> None:
        if stop != (epoch, phase, i) or ctx.rank != args.stop_rank:
            return
        if not args.stop_file:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        assert ctx.preemption is not None and ctx.preemption.stop_file is not None
        ctx.preemption.stop_file.write_text("suspend\n")
        # the file is looked at (at most once a second) on each call
        wait_for(ctx.preemption.local_stop_requested, 60.0, "the stop file noticed")

    def train(epoch: int) -> None:
        stats = adl.Accumulator()
        for i, (ids, x) in enumerate(train_loader):
            loss = net(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            stats["samples"] += len(ids)
            stats["id_sum"] += float(ids.sum()) * (epoch + 1)
            maybe_stop(epoch, "train", i)
        with stats.synchronized():
            show(epoch, "train", dict(stats))

    def evaluate(epoch: int) -> None:
        net.eval()
        stats = adl.Accumulator()
        with torch.no_grad():
            for i, (ids,) in enumerate(val_loader):
                stats["correct"] += int((ids % (4 - epoch % 4) == 0).sum())  # best moves
                stats["total"] += len(ids)
                maybe_stop(epoch, "eval", i)
        net.train()
        with stats.synchronized():
            accuracy = 100.0 * stats["correct"] / stats["total"]
            show(epoch, "eval", {"accuracy": accuracy, **stats})
        if accuracy > best["accuracy"]:
            best.update(accuracy=accuracy, epoch=epoch)
        show(epoch, "best", dict(best))

    for epoch in adl.remaining_epochs_until(args.epochs):
        train(epoch)
        evaluate(epoch)
    out.close()


if __name__ == "__main__":
    main()
