"""examples/hf_trainer.py with gates (see elastic_gates): ``--gates 1:6,2:16 -- EXAMPLE ARGS``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "examples")]

import hf_trainer  # noqa: E402
from elastic_gates import hold, parse_gates  # noqa: E402
from transformers import TrainerCallback  # noqa: E402


class Gates(TrainerCallback):
    def __init__(self, spec: str) -> None:
        self.gates = parse_gates(spec)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        hold(self.gates, state.global_step)


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    hf_trainer.main(argv[split + 1 :], callbacks=[Gates(argv[argv.index("--gates") + 1])])
