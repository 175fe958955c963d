"""examples/lightning_module.py with gates (see elastic_gates): ``--gates 1:6,2:16 -- ARGS``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "examples")]

import lightning.pytorch as pl  # noqa: E402
import lightning_module  # noqa: E402
from elastic_gates import hold, parse_gates  # noqa: E402


class Gates(pl.Callback):
    def __init__(self, spec: str) -> None:
        self.gates = parse_gates(spec)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        hold(self.gates, trainer.global_step)


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    lightning_module.main(argv[split + 1 :], callbacks=[Gates(argv[argv.index("--gates") + 1])])
