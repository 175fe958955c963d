"""One simulated training job: true progress from the traces, and what the job itself learns.

The job's *true* speed comes from the measured traces. Separately, like the real in-job library,
an adaptive job keeps a profile of the step times it has actually run, fits the throughput model
to it and picks its batch size for goodput from that model and its current gradient statistics.
The policy only ever sees the job's own model (see :meth:`SimJob.job_info`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from adl.sched.goodput import (
    BatchBounds,
    GoodputFunction,
    GradParams,
    Observations,
    PerfParams,
    fit_perf_params,
    identifiable,
)
from adl.sched.sim.batching import BatchConfig, split_batch
from adl.sched.sim.traces import AppTrace
from adl.sched.sim.truth import TrueSpeedup
from adl.sched.sim.workload import WorkloadJob
from adl.sched.speedup import SpeedupFunction
from adl.sched.types import JobInfo, JobMode, SpeedupFn, linear_speedup

#: seconds of no progress after every (re)start, the first start included
RESTART_DELAY_S = 30
#: the most replicas any job is offered (the cluster size of the published runs)
MAX_REPLICAS = 64
#: applications whose adaptive runs keep a fixed batch on a single GPU (traces README)
FIXED_ADAPTIVE_BATCH: dict[str, int] = {"ncf": 32768}


#: a profile of one GPU type: (nodes, replicas, micro-batch) -> (step, sync), its fitted model
#: and the parameters the fit could identify
_TypeProfile = tuple[
    dict[tuple[int, int, int], tuple[float, float]], PerfParams | None, dict[str, bool] | None
]
#: bounds of a per-type speed ratio (as ``adl.sched.hints`` bounds the operator's)
_MIN_TYPE_SPEED, _MAX_TYPE_SPEED = 0.01, 100.0


@dataclass(eq=False)
class SimJob:
    """State and physics of one job inside the simulator."""

    spec: WorkloadJob
    app: AppTrace
    mode: JobMode
    order: int
    placement: tuple[int, ...] = ()
    batch: BatchConfig = field(default_factory=lambda: BatchConfig(0, 0))
    rescale_left: int = 0
    progress: float = 0.0
    epoch: int = 0
    completion_time: int | None = None
    attained_service: float = 0.0
    #: GPU-seconds held on each GPU type (the pacing type of a placement that spans types)
    service_by_type: dict[str, float] = field(default_factory=dict)
    restarts: int | None = None  # None until the first start
    #: simulated times at which the job was resumed: given GPUs again after a preemption
    resume_times: list[int] = field(default_factory=list)
    #: (nodes, replicas, micro-batch) -> (step_time, sync_time) the job has measured
    profile: dict[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)
    #: seconds without progress after every (re)start (a what-if knob of the simulator)
    restart_delay_s: int = RESTART_DELAY_S
    #: what-if: the restart cost the job reports to the policy, if not its true delay
    reported_restart_s: int | None = None
    #: diagnostic: report trace truth (speedup of the current epoch, remaining work) instead of
    #: the job's own model; given by the simulator as ``truth(app, epoch)``
    truth: Callable[[AppTrace, int], TrueSpeedup] | None = None
    #: the GPU type it runs on ("" on a uniform cluster; on a placement mixing types, the
    #: slowest one's, which paces every step) and its compute speed there relative to the
    #: traces' (:meth:`AppTrace.step_sync_on`)
    gpu_type: str = ""
    speed: float = 1.0
    grad: GradParams | None = None
    #: what the job measured on each type it ran on before the current one: (profile, fitted
    #: model, identifiable parameters), as the worker's profile keeps its steps per type
    _other_types: dict[str, _TypeProfile] = field(default_factory=dict)
    _perf: PerfParams | None = None
    _perf_stale: bool = False
    _fit_free: dict[str, bool] | None = None  # parameters the last fit could identify
    _speedup: SpeedupFn | None = None
    _speedup_key: tuple[object, ...] | None = None

    # ------------------------------------------------------------------ configuration

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def target_batch(self) -> int | None:
        """The fixed global batch this job runs at, or None when it adapts."""
        if self.mode is JobMode.ADAPTIVE:
            return FIXED_ADAPTIVE_BATCH.get(self.app.name)
        return self.spec.batch_size

    @property
    def max_replicas(self) -> int:
        """The most replicas this job can use: enough that each GPU gets a minimal micro-batch."""
        app = self.app
        if app.name in FIXED_ADAPTIVE_BATCH:
            return 1
        if self.mode is JobMode.FIXED:
            return self.spec.num_replicas
        batch = self.target_batch or app.max_batch_size
        return max(1, min(MAX_REPLICAS, batch // app.min_local_bsz))

    @property
    def bounds(self) -> BatchBounds:
        app = self.app
        return BatchBounds(
            init_batch_size=app.init_batch_size,
            max_batch_size=app.max_batch_size,
            local_bsz_bounds=(app.min_local_bsz, app.max_local_bsz),
            gradient_accumulation=True,
        )

    @property
    def max_profiled_replicas(self) -> int:
        """The most replicas measured on any GPU type (scaling is the model's, not the type's)."""
        here = max((key[1] for key in self.profile), default=0)
        there = (key[1] for prof, _, _ in self._other_types.values() for key in prof)
        return max(here, max(there, default=0))

    @property
    def done(self) -> bool:
        return self.completion_time is not None

    @property
    def replicas(self) -> int:
        return sum(self.placement)

    # ------------------------------------------------------------------ the job's own model

    @property
    def perf(self) -> PerfParams | None:
        """Throughput model fitted to the job's own profile (refitted lazily when it grew)."""
        if self._perf_stale:
            rows = [(n, k, m, st - sy, st) for (n, k, m), (st, sy) in self.profile.items()]
            obs = Observations.from_rows(rows)
            # Warm start from the last fit: one local solve unless a new regime appeared.
            self._perf = fit_perf_params(obs, initial=self._perf, warm_free=self._fit_free)
            self._fit_free = identifiable(obs)
            self._perf_stale = False
        return self._perf

    def goodput_fn(self) -> GoodputFunction | None:
        perf = self.perf
        if perf is None or self.grad is None:
            return None
        return GoodputFunction(perf, self.grad, self.bounds)

    def speedup_fn(self) -> SpeedupFn:
        """The speedup the job would report; the same object while its model is unchanged."""
        key = (self.perf, self.grad)
        if self._speedup is None or key != self._speedup_key:
            fn = self.goodput_fn()
            self._speedup = linear_speedup if fn is None else SpeedupFunction(fn)
            self._speedup_key = key
        return self._speedup

    @property
    def work_left(self) -> float:
        """Scale-invariant iterations still to run (trace truth)."""
        return max(self.app.total_progress - self.progress, 0.0)

    def remaining_s(self) -> float | None:
        """Seconds left on one GPU at its best batch, from the job's own model and its declared
        epochs; None before the job has a model."""
        fn = self.speedup_fn()
        if not isinstance(fn, SpeedupFunction) or fn.base_goodput <= 0:
            return None
        return self.work_left / fn.base_goodput

    def done_work_s(self) -> float | None:
        """Work done so far in seconds on one GPU at its best batch (the unit of
        ``remaining_s``), as the job itself would report it: its progress over its own model's
        single-GPU goodput; 0 before it has progressed, None when it has no model to say."""
        if self.progress <= 0:
            return 0.0
        fn = self.speedup_fn()
        if not isinstance(fn, SpeedupFunction) or fn.base_goodput <= 0:
            return None
        return self.progress / fn.base_goodput

    def job_info(self, now: int, *, hide_remaining: bool = False) -> JobInfo:
        """What a real job could report to the scheduler: its own model (no trace knowledge),
        or, as the simulator's diagnostic what-if, the trace truth with no ramp cap."""
        speedup: SpeedupFn
        if self.mode is not JobMode.ADAPTIVE:  # baselines' jobs run no model-fitting library
            speedup, remaining, profiled = linear_speedup, None, self.max_profiled_replicas
        elif self.truth is not None:
            truth = self.truth(self.app, self.epoch)
            speedup, remaining = truth, self.work_left / truth.base_goodput
            profiled = self.max_replicas
        else:
            speedup, remaining = self.speedup_fn(), self.remaining_s()
            profiled = self.max_profiled_replicas
        return JobInfo(
            name=self.name,
            speedup=speedup,
            min_replicas=0,
            max_replicas=self.max_replicas,
            age_s=float(now - self.spec.submit_time),
            restarts=self.restarts or 0,
            restart_cost_s=float(
                self.restart_delay_s if self.reported_restart_s is None else self.reported_restart_s
            ),
            attained_service_s=float(self.attained_service),
            remaining_s=None if hide_remaining else remaining,
            max_profiled_replicas=profiled,
            preemptible=True,
            submit_order=self.order,
            kind=self.app.name,
            type_speed=self.measured_type_speeds() if self.mode is JobMode.ADAPTIVE else {},
        )

    def measured_type_speeds(self) -> dict[str, float]:
        """The job's speed on each GPU type it has a model of, relative to its current type's
        model: the ratio of the models' compute times for one micro-batch (the current one,
        else the initial batch within the micro-batch bounds), as the operator compares the
        per-type models a worker reports (``adl.sched.hints.type_speed_from_models``)."""
        perf, current = self.perf, self.gpu_type
        others = {t: self._model_of(t) for t in self._other_types if t}
        if not current or perf is None:  # not started: relative to the first type profiled
            current = next((t for t, p in others.items() if p is not None), "")
            perf = others.get(current)
        if not current or perf is None:
            return {}
        app = self.app
        m = self.batch.local_bsz or app.init_batch_size
        m = min(max(m, app.min_local_bsz), app.max_local_bsz)
        here = perf.alpha_c + perf.beta_c * m
        out = {current: 1.0}
        for gpu_type, other in others.items():
            if gpu_type != current and other is not None:
                ratio = here / max(other.alpha_c + other.beta_c * m, 1e-12)
                out[gpu_type] = min(max(ratio, _MIN_TYPE_SPEED), _MAX_TYPE_SPEED)
        return out

    def _model_of(self, gpu_type: str) -> PerfParams | None:
        """The model fitted to what the job measured on another type (fitted on first use)."""
        profile, perf, _ = self._other_types[gpu_type]
        if perf is None and profile:
            rows = [(n, k, m, st - sy, st) for (n, k, m), (st, sy) in profile.items()]
            obs = Observations.from_rows(rows)
            perf = fit_perf_params(obs)
            self._other_types[gpu_type] = (profile, perf, identifiable(obs))
        return perf

    def profile_types(self, speeds: dict[str, float]) -> None:
        """Sia's bootstrapping: before its first start the job runs a few steps on one GPU of
        each type (``speeds``: type -> compute speed), at its initial batch within the
        micro-batch bounds, so that its speed on every type is known from the start."""
        app = self.app
        m = min(max(app.init_batch_size, app.min_local_bsz), app.max_local_bsz)
        for gpu_type, speed in speeds.items():
            if gpu_type and gpu_type not in self._other_types and gpu_type != self.gpu_type:
                point = {(1, 1, m): app.step_sync_on((1,), m, speed)}
                self._other_types[gpu_type] = (point, None, None)

    # ------------------------------------------------------------------ batch choice

    def pick_batch(self) -> None:
        """Choose micro-batch and accumulation for the current placement."""
        k = self.replicas
        if k == 0:
            self.batch = BatchConfig(0, 0)
            return
        app = self.app
        target = self.target_batch
        fn = self.goodput_fn() if target is None else None
        if fn is not None:
            choice = fn.optimize(len(self.placement), k)
            if float(choice.goodput[0]) > 0:
                self.batch = BatchConfig(int(choice.local_bsz[0]), int(choice.accum_steps[0]))
                return
        if target is None:  # no model yet: assume linear scaling, smallest allowed batch
            target = max(app.init_batch_size, app.min_local_bsz * k)
        self.batch = split_batch(
            target,
            k,
            max_local_bsz=app.max_local_bsz,
            init_batch_size=app.init_batch_size,
            max_batch_size=app.max_batch_size,
        )

    # ------------------------------------------------------------------ events

    def reallocate(
        self,
        placement: tuple[int, ...],
        now: int | None = None,
        gpu_type: str = "",
        speed: float = 1.0,
    ) -> None:
        """Apply a changed allocation: a (re)start with its delay, or a wait with no GPUs;
        ``now`` (when given) records a resume after a preemption in ``resume_times``;
        ``gpu_type`` and ``speed``: the type that paces the new placement and its speed."""
        waiting = not self.placement
        if any(placement):
            self._switch_type(gpu_type)
            self.speed = speed
        self.placement = tuple(x for x in placement if x)
        if self.placement and waiting and self.restarts is not None and now is not None:
            self.resume_times.append(now)
        if not self.placement:
            self.batch = BatchConfig(0, 0)
            return
        self.pick_batch()
        self.rescale_left = self.restart_delay_s
        self.restarts = 0 if self.restarts is None else self.restarts + 1

    def _switch_type(self, gpu_type: str) -> None:
        """Keep the current type's profile and model aside and take up ``gpu_type``'s (empty
        if the job never ran there): each type's model is fitted from its own steps only."""
        if gpu_type == self.gpu_type:
            return
        if self.profile:
            perf = self.perf  # refit first if the profile grew since the last fit
            self._other_types[self.gpu_type] = (self.profile, perf, self._fit_free)
        self.profile, self._perf, self._fit_free = self._other_types.pop(gpu_type, ({}, None, None))
        self._perf_stale = bool(self.profile) and self._perf is None
        self.gpu_type = gpu_type

    def advance(self, now: int, seconds: int) -> None:
        """Run from ``now`` for ``seconds``; epochs and completion are accounted to the second."""
        if not self.placement or self.done:
            return
        before = self.attained_service
        self._run(now, seconds)
        held = self.service_by_type.get(self.gpu_type, 0.0)
        self.service_by_type[self.gpu_type] = held + self.attained_service - before

    def _run(self, now: int, seconds: int) -> None:
        gpus = self.replicas
        delay = int(min(self.rescale_left, seconds))
        self.rescale_left -= delay
        self.attained_service += delay * gpus
        t = now + delay
        left = seconds - delay
        app = self.app
        while left > 0 and not self.done:
            rate = self._true_rate()
            target = app.progress_at(self.epoch + 1)
            if self.progress + rate * left < target:
                self.progress += rate * left
                self.attained_service += left * gpus
                t += left
                left = 0
            else:
                dt = round(float((target - self.progress) / rate))
                self.epoch += 1
                self.progress = target
                self.attained_service += dt * gpus
                t += dt
                left -= dt
                if self.epoch >= app.max_epochs:
                    self.completion_time = t
                elif self.mode is JobMode.ADAPTIVE:
                    self.pick_batch()  # epoch boundary: new gradient statistics
            if self.mode is JobMode.ADAPTIVE and self._perf_stale and not self.done:
                self.pick_batch()  # first measurement of a configuration: refit, re-pick

    def _true_rate(self) -> float:
        """Scale-invariant iterations per second at the current configuration (trace truth);
        records what the job measures along the way."""
        app = self.app
        n, k = len(self.placement), self.replicas
        m, s = self.batch
        self.grad = GradParams(*app.grad_stats(k * m * (s + 1), self.epoch))
        key = (n, k, m)
        if key not in self.profile:
            self.profile[key] = app.step_sync_on(self.placement, m, self.speed)
            self._perf_stale = True
        return app.rate(self.placement, m, s, self.epoch, self.speed)


def placement_of(nodes: list[str]) -> tuple[int, ...]:
    """GPUs per node, nodes in order of first appearance in the allocation."""
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node] = counts.get(node, 0) + 1
    return tuple(counts.values())


def same_allocation(a: list[str] | None, b: list[str] | None) -> bool:
    """Equal as multisets of nodes (replica order within a job does not matter)."""
    return sorted(a or []) == sorted(b or [])


__all__ = [
    "RESTART_DELAY_S",
    "JobMode",
    "SimJob",
    "placement_of",
    "same_allocation",
]
