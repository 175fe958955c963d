"""Handwritten digits with PyTorch DistributedDataParallel: the plain script adl's tutorial
starts from (examples/digits_tutorial.py is the same script made elastic; diff the two).

The classic "MNIST with DDP" recipe on scikit-learn's bundled 8x8 digits (no download):
a small CNN, a DistributedSampler giving each process its share, Adadelta.

    python examples/digits_plain.py                           # one process
    torchrun --nproc_per_node 2 examples/digits_plain.py      # two processes (gloo, CPU)
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


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
    parser = argparse.ArgumentParser(description="digits with DDP")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--lr", type=float, default=1.0)
    args = parser.parse_args()

    torch.manual_seed(0)  # the same initial model in every process
    distributed = "RANK" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    train, test = digits(train=True), digits(train=False)
    sampler = DistributedSampler(train) if distributed else None
    loader = DataLoader(
        train, batch_size=args.batch_size // world, sampler=sampler, shuffle=sampler is None
    )
    model = Net()
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            record = {"epoch": epoch, "accuracy": accuracy(model, test), "world": world}
            print(json.dumps(record), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
