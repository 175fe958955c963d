"""Throughput profile: measured step times per configuration, fitted with the scheduler's model.

A configuration is (nodes, replicas, micro-batch). For each one we keep the mean time of pure
accumulation micro-steps (compute only) and of synchronizing optimizer steps (compute + sync),
then fit :func:`adl.sched.goodput.fit_perf_params` to them. The first few intervals after a
configuration change are warm-up and not recorded.

Measurements are per GPU type (``gpu_type``, as node labels name it; "" on CPU): a job that
the scheduler moves to another type fits its model there from that type's steps only, and
keeps the other types' measurements in its checkpoint for when it comes back. The scheduler
keeps the last model of each type (``status.typeModels``) to compare the types.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adl.contract import MAX_GPU_TYPES
from adl.sched.goodput import (
    BatchBounds,
    GoodputFunction,
    GradParams,
    Observations,
    PerfParams,
    fit_perf_params,
)

Config = tuple[int, int, int]  # (num_nodes, num_replicas, local_bsz)


@dataclass
class _Times:
    accum_sum: float = 0.0
    accum_n: int = 0
    step_sum: float = 0.0
    step_n: int = 0


class Profile:
    """Step-time bookkeeping plus a cached throughput-model fit."""

    def __init__(
        self,
        warmup_intervals: int = 3,
        clock: Callable[[], float] = time.perf_counter,
        gpu_type: str = "",
    ):
        self.warmup_intervals = warmup_intervals
        self._clock = clock
        #: the GPU type this process measures (its device's)
        self.gpu_type = gpu_type
        self._times: dict[Config, _Times] = {}
        #: other types' measurements, restored from a checkpoint and saved again as they were
        self._other_types: dict[str, list[list[float]]] = {}
        self._last_t: float | None = None
        self._last_cfg: Config | None = None
        self._last_sync = False
        self._skip = warmup_intervals
        self._fit: PerfParams | None = None
        self._fit_version = -1
        self._version = 0

    # ------------------------------------------------------------------ measuring

    def tick(self, config: Config, sync: bool) -> None:
        """Called at the start of every micro-step; times the previous one.

        ``sync`` says whether the micro-step now starting will synchronize gradients.
        """
        now = self._clock()
        if self._last_t is not None and self._last_cfg == config:
            if self._skip > 0:
                self._skip -= 1
            else:
                self.record(config, now - self._last_t, sync=self._last_sync)
        elif self._last_cfg != config:
            self._skip = self.warmup_intervals
        self._last_t, self._last_cfg, self._last_sync = now, config, sync

    def pause(self) -> None:
        """Forget the running interval (a checkpoint, an evaluation pass, an epoch boundary)."""
        self._last_t = None

    def record(self, config: Config, seconds: float, sync: bool) -> None:
        t = self._times.setdefault(config, _Times())
        if sync:
            t.step_sum += seconds
            t.step_n += 1
        else:
            t.accum_sum += seconds
            t.accum_n += 1
        self._version += 1

    # ------------------------------------------------------------------ model

    def observations(self) -> Observations | None:
        """One row per configuration with a measured optimizer step.

        Without accumulation measurements the compute time of a single replica equals its step
        time; for several replicas it is borrowed from a single-replica row of the same
        micro-batch, else taken equal to the step time (sync assumed hidden: optimistic).
        """
        single = {
            cfg[2]: t.step_sum / t.step_n
            for cfg, t in self._times.items()
            if cfg[1] == 1 and t.step_n
        }
        rows = []
        for (nodes, replicas, bsz), t in sorted(self._times.items()):
            if not t.step_n:
                continue
            step = t.step_sum / t.step_n
            if t.accum_n:
                compute = t.accum_sum / t.accum_n
            elif replicas == 1:
                compute = step
            else:
                compute = single.get(bsz, step)
            rows.append((nodes, replicas, bsz, min(compute, step), step))
        return Observations.from_rows(rows) if rows else None

    def perf_params(self) -> PerfParams | None:
        """Fitted throughput model, refitted only when new measurements arrived."""
        if self._fit_version != self._version:
            obs = self.observations()
            self._fit = fit_perf_params(obs, initial=self._fit) if obs is not None else None
            self._fit_version = self._version
        return self._fit

    def max_profiled_replicas(self) -> int:
        return max((cfg[1] for cfg, t in self._times.items() if t.step_n), default=0)

    def goodput_fn(self, grad: GradParams | None, bounds: BatchBounds) -> GoodputFunction | None:
        """The goodput provider for the data loader (None until something is measured)."""
        perf = self.perf_params()
        if perf is None or grad is None or not grad.usable:  # degenerate: keep B0 / the bounds
            return None
        return GoodputFunction(perf, grad, bounds)

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        return {
            "times": [
                [*cfg, t.accum_sum, t.accum_n, t.step_sum, t.step_n]
                for cfg, t in self._times.items()
            ],
            "gpu_type": self.gpu_type,
            "other_types": {t: list(rows) for t, rows in self._other_types.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the measurements of this process's GPU type; those of other types are kept
        aside (a checkpoint from before types were recorded counts as this type's)."""
        saved = str(state.get("gpu_type", self.gpu_type))
        by_type = {str(t): list(rows) for t, rows in (state.get("other_types") or {}).items()}
        by_type[saved] = list(state["times"])
        mine = by_type.pop(self.gpu_type, [])
        # bounded like status.typeModels: the types measured last (insertion order) stay
        self._other_types = dict(list(by_type.items())[-MAX_GPU_TYPES:])
        self._times = {}
        for row in mine:
            nodes, replicas, bsz, a_sum, a_n, s_sum, s_n = row
            self._times[(int(nodes), int(replicas), int(bsz))] = _Times(
                float(a_sum), int(a_n), float(s_sum), int(s_n)
            )
        self._fit = None  # not a warm start from another type's model
        self._version += 1
        self.pause()
