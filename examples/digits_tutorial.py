"""Handwritten digits with adl: examples/digits_plain.py (DDP) made elastic.

The classic "MNIST with DDP" recipe on scikit-learn's bundled 8x8 digits (no download). Under
adl the job runs on as many processes as the scheduler gives it, picks its own batch size,
and survives every resize: it checkpoints, restarts and goes on from the sample it reached.

    python examples/digits_tutorial.py                        # one process, no scheduler
    adl submit digits --min 1 --max 2 -- python examples/digits_tutorial.py
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import adl


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        return self.fc2(F.relu(self.fc1(x)))


def digits(train: bool) -> TensorDataset:
    """The 1797 digits scaled to [0, 1]: the first 80% to train on, the rest to test."""
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    split = int(0.8 * len(y))
    return TensorDataset(x[:split], y[:split]) if train else TensorDataset(x[split:], y[split:])


def accuracy(model: nn.Module, dataset: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = dataset.tensors
        correct = int((model(x).argmax(dim=1) == y).sum())
    model.train()
    return correct / len(y)


def main() -> None:
    parser = argparse.ArgumentParser(description="digits with adl")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="initial global batch size")
    parser.add_argument("--lr", type=float, default=1.0)
    args = parser.parse_args()

    torch.manual_seed(0)  # the same initial model in every process
    ctx = adl.init_process_group("gloo")  # joins the job; standalone when not under adl
    rank, world = ctx.rank, ctx.world_size

    train, test = digits(train=True), digits(train=False)
    # the loader shards and shuffles like a DistributedSampler, and resumes mid-epoch
    loader = adl.AdaptiveDataLoader(train, batch_size=args.batch_size, shuffle=True)
    # let the job grow its batch (for goodput) up to 4x, 32 to 128 samples per process
    loader.autoscale_batch_size(
        4 * args.batch_size, local_bsz_bounds=(32, 128), gradient_accumulation=False
    )
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    model = adl.AdaptiveDataParallel(model, optimizer)  # DDP + checkpoints + AdaScale

    for epoch in adl.remaining_epochs_until(args.epochs):  # after a restart: where it was
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            record = {"epoch": epoch, "accuracy": accuracy(model, test), "world": world}
            record["batch_size"] = loader.current_batch_size
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
