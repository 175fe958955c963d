"""Mixed GPU-type clusters for the simulator, with per-type speeds grounded in measurements.

The Pollux traces measured every application on one GPU type. A mixed cluster needs each
application's speed on other types: ``data/gavel/type_speeds.json`` holds them, derived from
Gavel's published per-type throughputs (its README says exactly how). On a type of speed ``r``
a step's compute takes ``1 / r`` of the traces' time and its gradient sync the same
(:meth:`adl.sched.sim.traces.AppTrace.step_sync_on`); a job spread over several types runs at
its slowest type's pace (the simulator's ``_pacing``).

Two clusters of 16 nodes x 4 GPUs (the traces' 64 GPUs) are named here: three types (4 V100
nodes, 6 P100, 6 K80) and two types (8 V100, 8 K80).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from adl.sched.sim.simulator import SimConfig

#: the per-type speeds shipped with adl (see the README beside it for provenance)
TYPE_SPEEDS_FILE = Path(__file__).resolve().parent / "data" / "gavel" / "type_speeds.json"


@dataclass(frozen=True)
class ClusterMix:
    """A named cluster: (GPU type, nodes) in node order, ``gpus_per_node`` GPUs each."""

    name: str
    node_types: tuple[tuple[str, int], ...]
    gpus_per_node: int = 4

    @property
    def gpus(self) -> int:
        return sum(count for _, count in self.node_types) * self.gpus_per_node

    def describe(self) -> str:
        """``16 x Tesla-V100 + 24 x Tesla-P100 + ...`` (GPUs per type)."""
        return " + ".join(f"{n * self.gpus_per_node} x {t}" for t, n in self.node_types)


THREE_TYPES = ClusterMix("three-types", (("Tesla-V100", 4), ("Tesla-P100", 6), ("Tesla-K80", 6)))
TWO_TYPES = ClusterMix("two-types", (("Tesla-V100", 8), ("Tesla-K80", 8)))
MIXES = {m.name: m for m in (THREE_TYPES, TWO_TYPES)}


@functools.lru_cache(maxsize=4)
def load_type_speeds(path: Path = TYPE_SPEEDS_FILE) -> dict[str, dict[str, float]]:
    """application -> GPU type -> compute speed relative to the traces' times."""
    data = json.loads(Path(path).read_text())
    types = [str(t) for t in data["types"]]
    out: dict[str, dict[str, float]] = {}
    for app, row in data["apps"].items():
        speeds = {t: float(row[t]) for t in types}
        bad = {t: v for t, v in speeds.items() if not 0.0 < v <= 100.0}
        if bad:
            raise ValueError(f"{path}: speeds of {app} out of (0, 100]: {bad}")
        out[str(app)] = speeds
    return out


def mixed_config(mix: ClusterMix, base: SimConfig | None = None, **overrides: Any) -> SimConfig:
    """``base`` (default settings if None) on the cluster ``mix`` with the shipped per-type
    speeds; ``overrides`` set any other :class:`SimConfig` field."""
    speeds = load_type_speeds()
    config = replace(
        base or SimConfig(),
        num_nodes=sum(n for _, n in mix.node_types),
        gpus_per_node=mix.gpus_per_node,
        node_types=mix.node_types,
        type_speeds=speeds,
    )
    return replace(config, **overrides)
