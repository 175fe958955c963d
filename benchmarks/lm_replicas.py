"""Does a multi-replica run of a language model start worse than a single-process one?

Runs examples/word_lm.py (sequence-first LSTM, validation after every epoch) at 1 and at 2
replicas (``adl launch``), with the batch fixed at B0 and with adl's batch autoscaling, and
prints each epoch's validation loss and batch size side by side. With a fixed batch the
replicas split the same global batch, so the runs should match to float rounding; with
autoscaling the batch (and so the optimizer steps per epoch) follows the measured goodput,
which depends on the replica count.

    .venv/bin/python benchmarks/lm_replicas.py --epochs 4 --json lm_replicas.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "word_lm.py"


def run(replicas: int, epochs: int, tokens: int, max_batch: int | None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        args = [str(EXAMPLE), "--epochs", str(epochs), "--tokens", str(tokens), "--out", str(out)]
        if max_batch is not None:
            args += ["--max-batch", str(max_batch)]
        launch = [sys.executable, "-m", "adl.cli.main", "launch", "--nproc", str(replicas)]
        launch += ["--checkpoint-dir", str(Path(tmp) / "ckpt"), "--", sys.executable, *args]
        done = subprocess.run(launch, capture_output=True, text=True, timeout=3600, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(launch)} failed:\n{done.stdout[-2000:]}{done.stderr}")
        return list(json.loads(out.read_text())["epochs"])


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--tokens", type=int, default=24000)
    p.add_argument("--max-batch", type=int, default=160, help="the autoscaled runs' ceiling")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {}
    for label, replicas, max_batch in [
        ("fixed x1", 1, None),
        ("fixed x2", 2, None),
        ("autoscaled x1", 1, a.max_batch),
        ("autoscaled x2", 2, a.max_batch),
    ]:
        print(f"running {label} ...", file=sys.stderr, flush=True)
        runs[label] = run(replicas, a.epochs, a.tokens, max_batch)
    header = "| epoch | " + " | ".join(f"{k}: val loss (batch, steps)" for k in runs) + " |"
    print(header)
    print("|" + "---|" * (len(runs) + 1))
    for e in range(a.epochs):
        cells = [
            f"{r[e]['val_loss']:.4f} ({r[e]['batch_size']}, {r[e]['steps']})" for r in runs.values()
        ]
        print(f"| {e} | " + " | ".join(cells) + " |")
    if a.json is not None:
        a.json.write_text(json.dumps({"args": vars(a) | {"json": str(a.json)}, "runs": runs}))


if __name__ == "__main__":
    main()
