"""Worker training through AdaptiveDataParallel on a plain torch DataLoader (or, with
``--adaptive``, an AdaptiveDataLoader); writes the warnings it saw to ``--record``."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import adl


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--adaptive", action="store_true")
    args = p.parse_args()
    ctx = adl.init_process_group("gloo")
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = (
        adl.AdaptiveDataLoader(data, batch_size=8)
        if args.adaptive
        else DataLoader(data, batch_size=4)
    )
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    net = adl.AdaptiveDataParallel(model, opt, report=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _epoch in adl.remaining_epochs_until(2):
            for x, y in loader:
                nn.functional.mse_loss(net(x), y).backward()
                opt.step()
                opt.zero_grad()
    args.record.mkdir(parents=True, exist_ok=True)
    out = args.record / f"rank{ctx.rank}.json"
    out.write_text(json.dumps([str(w.message) for w in caught]))


if __name__ == "__main__":
    main()
