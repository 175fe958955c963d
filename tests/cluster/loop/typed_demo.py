"""``examples/demo_train.py`` at a speed set by the GPU type its node stands in for.

The process kubelet runs pods on CPUs and tells each worker its node's GPU type
(``ADL_GPU_TYPE``, from the node's ``nvidia.com/gpu.product`` label). This wrapper gives the
example a per-type step time, as a real model would have on GPUs of different generations:
``--sleep-on TYPE=SECONDS`` (repeatable) adds that many seconds to every step on ``TYPE``; the
remaining arguments go to the example as they are. The worker measures these steps like any
others, so the scheduler sees the types' speeds only through the job's own reports.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo_train.py"


def main() -> None:
    sleeps: dict[str, float] = {}
    rest: list[str] = []
    args = iter(sys.argv[1:])
    for arg in args:
        if arg == "--sleep-on":
            gpu_type, _, seconds = next(args).partition("=")
            sleeps[gpu_type] = float(seconds)
        else:
            rest.append(arg)
    here = os.environ.get("ADL_GPU_TYPE", "")
    if here not in sleeps:
        raise SystemExit(f"typed_demo: no --sleep-on for this node's GPU type {here!r}")
    sys.argv = [str(DEMO), *rest, "--step-sleep", str(sleeps[here])]
    runpy.run_path(str(DEMO), run_name="__main__")


if __name__ == "__main__":
    main()
