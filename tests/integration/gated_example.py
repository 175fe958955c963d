"""An example script with gates (see elastic_gates): ``--gates 1:6,2:16 -- EXAMPLE.py ARGS``.

The example's ``main(argv, on_step=...)`` runs with ``on_step`` holding each rank at the gates
(``examples/sharded_train.py``, ``examples/word_lm.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from elastic_gates import hold, parse_gates  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    gates = parse_gates(argv[argv.index("--gates") + 1])
    script = Path(argv[split + 1])
    spec = importlib.util.spec_from_file_location(script.stem, script)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(argv[split + 2 :], on_step=lambda step: hold(gates, step))
