"""A Hugging Face example with gates (see elastic_gates) and records for the tests:
``--gates 1:6,2:16 [--record DIR] -- [EXAMPLE.py] EXAMPLE ARGS``.

The example is ``examples/hf_trainer.py`` unless a script is named first after ``--``. Rank 0
prints ``{"clock": "begin", "t": ...}`` as each start's ``train()`` begins and
``{"clock": "step", "t": ..., "step": ...}`` after each optimizer step. With ``--record``,
every process counts the samples its data collator batched (an example that passes
``default_data_collator`` to its Trainer, as ``hf_clm.py`` does) and writes
``{"rank": ..., "samples": ...}`` to ``DIR/rankN.jsonl`` when it exits normally."""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "examples")]

from elastic_gates import hold, parse_gates  # noqa: E402
from transformers import TrainerCallback  # noqa: E402


class Gates(TrainerCallback):
    def __init__(self, spec: str) -> None:
        self.gates = parse_gates(spec)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.is_world_process_zero:
            print(json.dumps({"clock": "begin", "t": time.time()}), flush=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.is_world_process_zero:
            clock = {"clock": "step", "t": time.time(), "step": state.global_step}
            print(json.dumps(clock), flush=True)
        hold(self.gates, state.global_step)


def count_samples(example: Any, record: Path) -> None:
    """Wrap the example's collator to count the samples this process trained on."""
    collate = example.default_data_collator
    seen = [0]

    def counting(features: list[Any], *args: Any, **kwargs: Any) -> Any:
        seen[0] += len(features)
        return collate(features, *args, **kwargs)

    def write() -> None:
        rank = int(os.environ.get("RANK", "0"))
        record.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"rank": rank, "samples": seen[0]})
        (record / f"rank{rank}.jsonl").write_text(line + "\n")

    example.default_data_collator = counting
    atexit.register(write)


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--gates", default="")
    p.add_argument("--record", type=Path, default=None)
    a = p.parse_args(argv[:split])
    rest = argv[split + 1 :]
    name = "hf_trainer"
    if rest and rest[0].endswith(".py"):
        name, rest = Path(rest[0]).stem, rest[1:]
    example = importlib.import_module(name)
    if a.record is not None:
        count_samples(example, a.record)
    example.main(rest, callbacks=[Gates(a.gates)])
