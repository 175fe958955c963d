"""Derive per-GPU-type compute speeds for the simulator's applications from Gavel's published
throughputs, and write them as ``adl/sched/sim/data/gavel/type_speeds.json``.

Input: a local copy of ``scheduler/simulation_throughputs.json`` of stanford-futuredata/gavel
(MIT license; its text ships beside the output). That file maps a GPU type (``k80``, ``p100``,
``v100``) and a ``(model name, scale factor)`` pair to throughputs; the ``"null"`` entry is the
job alone on its GPU(s), in steps per second.

For each of the simulator's applications the closest Gavel model is named in ``SOURCES``. Its
speed on a type is the geometric mean, over every batch size Gavel measured for that model at
scale factor 1, of its single-GPU throughput on the type over its throughput on the anchor type
(P100, the class the Pollux traces' T4 measurements are taken to stand for). Only these ratios
are written: nothing else of Gavel's file is shipped.

    .venv/bin/python benchmarks/gavel_type_speeds.py PATH/simulation_throughputs.json \
        [--out adl/sched/sim/data/gavel/type_speeds.json]
"""

from __future__ import annotations

import argparse
import ast
import json
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "adl" / "sched" / "sim" / "data" / "gavel" / "type_speeds.json"

#: the simulator's GPU type names (as GPU feature discovery writes product labels) per Gavel key
TYPES = {"v100": "Tesla-V100", "p100": "Tesla-P100", "k80": "Tesla-K80"}
#: the type the traces' own step times are taken to be measured on
ANCHOR = "p100"
#: simulator application -> Gavel model whose per-type ratios stand for it, and why
SOURCES = {
    "cifar10": ("ResNet-18", "the same network (ResNet-18 on CIFAR-10)"),
    "imagenet": ("ResNet-50", "the same network (ResNet-50 on ImageNet)"),
    "bert": ("Transformer", "Gavel's attention model (Transformer translation)"),
    "deepspeech2": ("LM", "Gavel's recurrent model (LSTM language model)"),
    "yolov3": ("CycleGAN", "Gavel's fully convolutional high-resolution image model"),
    "ncf": ("Recommendation", "Gavel's recommendation model (embedding-bound)"),
}


def _model_of(key: str) -> tuple[str, int]:
    """``"('ResNet-18 (batch size 32)', 1)"`` -> ("ResNet-18", 1)."""
    name, scale = ast.literal_eval(key)
    return str(name).split(" (batch size")[0], int(scale)


def derive(throughputs: dict[str, dict[str, dict[str, object]]]) -> dict[str, object]:
    apps: dict[str, dict[str, object]] = {}
    for app, (model, why) in SOURCES.items():
        keys = [
            k for k in throughputs[ANCHOR] if _model_of(k) == (model, 1)
        ]  # every batch size measured on one GPU
        if not keys:
            raise ValueError(f"no single-GPU throughputs for {model!r}")
        speeds: dict[str, object] = {"gavel_model": model, "why": why, "batch_sizes": len(keys)}
        for gavel_type, label in TYPES.items():
            logs = []
            for key in keys:
                here = float(throughputs[gavel_type][key]["null"])  # type: ignore[arg-type]
                base = float(throughputs[ANCHOR][key]["null"])  # type: ignore[arg-type]
                logs.append(math.log(here / base))
            speeds[label] = round(math.exp(sum(logs) / len(logs)), 3)
        apps[app] = speeds
    return {
        "source": "stanford-futuredata/gavel scheduler/simulation_throughputs.json (MIT)",
        "anchor": TYPES[ANCHOR],
        "types": list(TYPES.values()),
        "apps": apps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("throughputs", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    data = derive(json.loads(args.throughputs.read_text()))
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"| app | Gavel model | {' | '.join(TYPES.values())} |")
    print("|---|---|" + "---|" * len(TYPES))
    for app, row in data["apps"].items():  # type: ignore[attr-defined]
        cells = " | ".join(f"{row[t]:.2f}" for t in TYPES.values())
        print(f"| {app} | {row['gavel_model']} | {cells} |")


if __name__ == "__main__":
    main()
