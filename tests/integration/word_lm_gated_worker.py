"""examples/word_lm.py with gates (see elastic_gates): ``--gates 1:6,2:16 -- ARGS``."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "examples")]

import word_lm  # noqa: E402
from elastic_gates import hold, parse_gates  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    gates = parse_gates(argv[argv.index("--gates") + 1])
    word_lm.main(argv[split + 1 :], on_step=lambda step: hold(gates, step))
