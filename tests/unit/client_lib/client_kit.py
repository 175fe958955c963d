"""Helpers shared by the in-job library's tests (also imported by their spawned ranks)."""

from __future__ import annotations

import torch
from torch import nn


def sgd_reference_step(ref: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> None:
    """One plain SGD step of a single-process reference model on the whole (global) batch."""
    ref.zero_grad()
    nn.functional.mse_loss(ref(x), y).backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= lr * p.grad
