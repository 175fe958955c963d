"""The trace-driven cluster simulator: drives any :class:`~adl.sched.types.Policy` round by round.

Semantics (traces README): 16 nodes x 4 GPUs, a scheduling round every 60 s. At the end of each
round the policy sees every submitted, unfinished job (only what a real job could report) and
returns an allocation; a job whose allocation changed restarts (30 s without progress, the
first start included), a job left without GPUs waits. JCT = completion - submission.

With ``SimConfig.rounds_on_events`` a round also runs the moment a job is submitted and as soon
as one finishes (noticed within ``event_tick_s``), as adl's operator and local daemon do: a new
job need not wait for the next round, nor a finished job's GPUs sit idle until it (the 60 s grid
stays; the operator's own interval restarts after each extra round). The published baselines
are replayed without it (every 60 s only), as their figures were produced.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

from adl.sched.decisions import Decision, explain
from adl.sched.registry import PolicyEntry, entry_of, prediction_ranker
from adl.sched.sim.cost import ClusterBill
from adl.sched.sim.elastic import ElasticCluster, ElasticConfig
from adl.sched.sim.job import (
    FIXED_ADAPTIVE_BATCH,
    RESTART_DELAY_S,
    JobMode,
    SimJob,
    placement_of,
    same_allocation,
)
from adl.sched.sim.traces import AppTrace, load_traces
from adl.sched.sim.truth import TrueGoodput, TrueSpeedup
from adl.sched.sim.workload import WorkloadJob, load_workload
from adl.sched.type_explore import explore_types, free_by_type
from adl.sched.type_history import TypeSpeedHistory, with_type_estimates
from adl.sched.types import Allocation, JobInfo, NodeInfo, Policy
from adl.sched.work_history import WorkHistory


@dataclass(frozen=True)
class SimConfig:
    """Cluster shape and driver options."""

    num_nodes: int = 16
    gpus_per_node: int = 4
    round_s: int = 60
    #: report ``remaining_s = None`` for every job (policies must cope without job lengths)
    hide_remaining: bool = False
    #: give up (raise) if the workload is not finished by then: a policy that starves jobs
    max_time_s: int = 60 * 86400
    #: what-if: seconds without progress after every (re)start (the traces' semantics: 30)
    restart_delay_s: int = RESTART_DELAY_S
    #: what-if: the restart cost jobs report to the policy (None: ``restart_delay_s``, the
    #: truth); with it the two parts of what restarts cost can be told apart: the progress
    #: lost while restarting, and the caution the policy's restart penalty imposes
    reported_restart_s: int | None = None
    #: what-if: seconds lost per (re)start by application, overriding ``restart_delay_s`` for
    #: those listed (e.g. :data:`SIA_RESTART_S`, Sia's measured per-model costs)
    restart_delay_by_app: tuple[tuple[str, int], ...] = ()
    #: what-if (diagnostic): adaptive jobs report the traces' true speedups and remaining work
    #: instead of their own learned model, and are never capped by what they profiled
    oracle_info: bool = False
    #: also run a round when a job is submitted or finishes, not only every ``round_s``
    rounds_on_events: bool = False
    #: with ``rounds_on_events``: a finished job is noticed within this many seconds
    event_tick_s: int = 5
    #: when lengths are hidden, predict each job's remaining work from completed jobs of the
    #: same application (:mod:`adl.sched.work_history`), as the operator can from what jobs
    #: report; only policies that read ``JobInfo.expected_remaining_s`` (adl) use it
    predict_remaining: bool = True
    #: keep every allocation change with its reason (``SimResult.decisions``), as the
    #: backends' decision log would show it
    explain: bool = False
    #: a cluster of several GPU types: (type, number of nodes) in node order, replacing
    #: ``num_nodes`` uniform nodes (:mod:`adl.sched.sim.gpu_mix` builds the published mixes)
    node_types: tuple[tuple[str, int], ...] = ()
    #: application -> GPU type -> compute speed relative to the traces' (1.0 where absent)
    type_speeds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: on a mixed cluster, estimate a job's speed on types it has not run on from jobs of its
    #: kind that ran on both (:mod:`adl.sched.type_history`), as a driver can from what jobs
    #: report; off: such types count as 1.0, as the operator counts them today
    learn_type_speeds: bool = True
    #: on a mixed cluster, every adaptive job profiles one GPU of each type before its first
    #: start (Sia's bootstrapping; its few steps are not charged), so its per-type speeds are
    #: known from its arrival; off: a job knows a type only once it has run there
    profile_types: bool = True
    #: on a mixed cluster, a running job tries a free GPU type it has not measured, as the
    #: operator's and the daemon's round let it (:mod:`adl.sched.type_explore`); with
    #: ``profile_types`` off this replays what production adl knows and does
    explore_types: bool = False
    #: issue 31: an elastic cluster whose nodes an autoscaler adds and that cost money
    #: (:mod:`adl.sched.sim.elastic`), replacing ``num_nodes`` fixed ones; None: fixed
    elastic: ElasticConfig | None = None

    def __post_init__(self) -> None:
        if self.round_s < 1 or self.event_tick_s < 1:
            raise ValueError("round_s and event_tick_s must be at least 1 second")
        delays = [self.restart_delay_s, self.reported_restart_s or 0]
        delays += [d for _, d in self.restart_delay_by_app]
        if min(delays) < 0:
            raise ValueError("restart delays must be at least 0 seconds")
        if any(count < 1 or not name for name, count in self.node_types):
            raise ValueError("node_types needs a type name and at least one node per type")
        speeds = [v for per_app in self.type_speeds.values() for v in per_app.values()]
        if any(not 0.0 < v <= 100.0 for v in speeds):
            raise ValueError("type speeds must be in (0, 100]")
        if self.oracle_info and self.node_types:
            raise ValueError("oracle_info replays uniform clusters only")

    def speed_of(self, application: str, gpu_type: str) -> float:
        """Compute speed of ``application`` on ``gpu_type`` relative to the traces'."""
        return float(self.type_speeds.get(application, {}).get(gpu_type, 1.0))

    def build_nodes(self) -> list[NodeInfo]:
        """The cluster's nodes: ``node_types`` in order, else ``num_nodes`` untyped ones."""
        if not self.node_types:
            return [NodeInfo(f"node-{i:02d}", self.gpus_per_node) for i in range(self.num_nodes)]
        out: list[NodeInfo] = []
        for gpu_type, count in self.node_types:
            out += [
                NodeInfo(f"node-{len(out) + i:02d}", self.gpus_per_node, gpu_type=gpu_type)
                for i in range(count)
            ]
        return out

    def restart_delay_for(self, application: str) -> int:
        """Seconds a job of ``application`` loses per (re)start."""
        return dict(self.restart_delay_by_app).get(application, self.restart_delay_s)


#: restart cost per model as measured and reported by Sia (SOSP '23), in seconds (the figures
#: issue 22 lists); ncf is not among them and keeps the traces' 30 s
SIA_RESTART_S: tuple[tuple[str, int], ...] = (
    ("cifar10", 30),
    ("deepspeech2", 25),
    ("yolov3", 45),
    ("bert", 120),
    ("imagenet", 250),
)


#: restart delay per model under the peer conditions of issue 34 (Sia's simulator as a peer ran
#: it), in seconds; ncf, absent there, keeps the traces' 30 s (a one-GPU job with a small model)
PEER_RESTART_S: tuple[tuple[str, int], ...] = (
    ("cifar10", 50),
    ("deepspeech2", 25),
    ("yolov3", 80),
    ("bert", 120),
    ("imagenet", 250),
)


def peer_conditions(**overrides: Any) -> SimConfig:
    """The *peer conditions* mode (issue 34): what a peer's simulator, and a real cluster,
    impose. Rounds every 60 s only (no extra round on a submission or a finish), the per-model
    restart delays of :data:`PEER_RESTART_S` (lost and reported alike), and every adaptive job's
    throughput model fitted online from the configurations it actually ran (never the traces'
    truth: ``oracle_info`` stays off). ``overrides`` set any other :class:`SimConfig` field."""
    base = SimConfig(
        round_s=60, rounds_on_events=False, restart_delay_by_app=PEER_RESTART_S, oracle_info=False
    )
    return replace(base, **overrides)


class SimulatorOracle:
    """Trace knowledge no real scheduler has, handed explicitly to oracle baselines only.

    A policy that wants it defines ``bind_oracle(oracle)``; the simulator calls it once before
    the first round. Nothing here ever reaches a policy through :class:`JobInfo`.
    """

    def __init__(
        self,
        jobs: Mapping[str, SimJob],
        gpus_per_node: int,
        config: SimConfig | None = None,
    ) -> None:
        self._jobs = jobs
        self.gpus_per_node = gpus_per_node
        self._config = config or SimConfig()

    def type_speed(self, name: str, gpu_type: str) -> float:
        """True compute speed of the job on ``gpu_type`` relative to the traces'."""
        return self._config.speed_of(self._jobs[name].app.name, gpu_type)

    def app(self, name: str) -> AppTrace:
        return self._jobs[name].app

    def batch_size(self, name: str) -> int:
        """The global batch the job runs at (its fixed workload batch, else B0)."""
        job = self._jobs[name]
        return job.target_batch or job.app.init_batch_size

    def remaining_steps(self, name: str) -> float:
        """Exact optimizer steps left at the job's batch size, from the validation traces.

        Counted, as in the published Optimus+Oracle runs, from the end of the epoch in
        progress to the end of the last epoch (at least 1 while the job runs)."""
        job = self._jobs[name]
        app, b = job.app, self.batch_size(name)
        if job.epoch + 1 >= app.max_epochs:
            return 1.0
        return app.iterations_after(b, app.max_epochs) - app.iterations_after(b, job.epoch + 1)

    def step_time(self, name: str, replicas: int, gpu_type: str = "") -> float:
        """True seconds per optimizer step at ``replicas`` GPUs packed ``gpus_per_node`` per node,
        with the job's batch split over them (accumulating when a GPU's share is too big), on
        GPUs of ``gpu_type`` ("": the traces' own)."""
        from adl.sched.sim.batching import split_batch

        job = self._jobs[name]
        app = job.app
        per = self.gpus_per_node
        placement = tuple([per] * (replicas // per) + ([replicas % per] if replicas % per else []))
        m, s = split_batch(
            self.batch_size(name),
            replicas,
            max_local_bsz=app.max_local_bsz,
            init_batch_size=app.init_batch_size,
            max_batch_size=app.max_batch_size,
        )
        speed = self.type_speed(name, gpu_type) if gpu_type else 1.0
        step, sync = app.step_sync_on(placement, m, speed)
        return step + s * (step - sync)


class OracleAware(Protocol):
    """The method of the capability ``PolicyEntry.binds_oracle`` (called only on a policy
    whose registry entry declares it): the policy is given trace knowledge before a replay."""

    def bind_oracle(self, oracle: SimulatorOracle) -> None: ...


@dataclass(frozen=True)
class JobOutcome:
    """What became of one simulated job: its times, restarts and the GPU-time it used."""

    name: str
    application: str
    submit_s: int
    completion_s: int | None
    restarts: int
    gpu_seconds: float
    #: simulated times at which the job was given GPUs again after a preemption
    resume_times: tuple[int, ...] = ()
    #: GPU-seconds by GPU type (by the type that paced it, where a placement spanned types)
    gpu_seconds_by_type: tuple[tuple[str, float], ...] = ()

    @property
    def jct_s(self) -> int | None:
        return None if self.completion_s is None else self.completion_s - self.submit_s


@dataclass
class SimResult:
    """Outcome of one replay: per-job records, policy latency, and the schedule over time."""

    jobs: list[JobOutcome]
    round_s: list[float] = field(default_factory=list)  # wall seconds of each optimize call
    #: (time, {job: GPUs}) after each round's allocation
    timeline: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    total_gpus: int = 0
    #: (time, decision) for every allocation change, with ``SimConfig.explain``
    decisions: list[tuple[int, Decision]] = field(default_factory=list)
    #: with ``SimConfig.elastic``: what the nodes cost, and the cluster's size after each
    #: round as (time, ready nodes, nodes on their way)
    bill: ClusterBill | None = None
    cluster_timeline: list[tuple[int, int, int]] = field(default_factory=list)


ProgressFn = Callable[[int, int, int], None]  # (sim time, finished jobs, total jobs)


class Simulator:
    """Replays one workload under one policy."""

    def __init__(
        self,
        workload: Sequence[WorkloadJob],
        policy: Policy,
        traces: Mapping[str, AppTrace],
        config: SimConfig | None = None,
        entry: PolicyEntry | None = None,
    ) -> None:
        """``entry``: the policy's registry entry, which says what it can do (default: the one
        its class is registered under, ``registry.entry_of``; pass it for a wrapped policy)."""
        self.config = config or SimConfig()
        self.policy = policy
        self.entry = entry or entry_of(policy)
        mode = self.entry.job_mode
        missing = sorted({w.application for w in workload} - set(traces))
        if missing:
            raise ValueError(f"no traces for applications: {', '.join(missing)}")
        truth = self._truth if self.config.oracle_info else None
        self._truths: dict[tuple[str, int], TrueSpeedup] = {}
        self.jobs = [
            SimJob(
                spec=w,
                app=traces[w.application],
                mode=mode,
                order=i,
                restart_delay_s=self.config.restart_delay_for(w.application),
                reported_restart_s=self.config.reported_restart_s,
                truth=truth,
            )
            for i, w in enumerate(workload)
        ]
        self.by_name = {j.name: j for j in self.jobs}
        c = self.config
        if c.node_types and c.profile_types and mode is JobMode.ADAPTIVE:
            for job in self.jobs:
                job.profile_types({t: c.speed_of(job.app.name, t) for t, _ in c.node_types})
        self.nodes = c.build_nodes()
        # issue 31 hook: an elastic cluster starts empty; its nodes change before each round
        self.elastic = ElasticCluster(c.elastic) if c.elastic is not None else None
        self._moved: set[str] = set()  # jobs that lost a node since the last round
        if self.elastic is not None:
            self.nodes = self.elastic.offered()
        self._capacity = {n.name: n.gpus for n in self.nodes}
        self._node_type = {n.name: n.gpu_type for n in self.nodes}
        self.type_history = TypeSpeedHistory()
        self.allocation: Allocation = {}
        self.decisions: list[tuple[int, Decision]] = []
        self.now = 0
        self.history = WorkHistory()
        self._recorded: set[str] = set()
        if self.entry.binds_oracle:
            oracle = SimulatorOracle(self.by_name, c.gpus_per_node, c)
            cast(OracleAware, policy).bind_oracle(oracle)

    def _truth(self, app: AppTrace, epoch: int) -> TrueSpeedup:
        """True speedups of ``app``, shared by its jobs; epochs in tenths of training (the
        gradient statistics drift slowly, and each new function rebuilds the policy's tables)."""
        bucket = epoch - epoch % max(app.max_epochs // 10, 1)
        key = (app.name, bucket)
        fn = self._truths.get(key)
        if fn is None:
            fixed = FIXED_ADAPTIVE_BATCH.get(app.name)
            fn = self._truths[key] = TrueSpeedup(TrueGoodput(app, bucket, fixed))
        return fn

    def active(self) -> list[SimJob]:
        return [j for j in self.jobs if j.spec.submit_time <= self.now and not j.done]

    def step(self) -> float | None:
        """Advance one round and reschedule; returns the policy's wall seconds (None if idle)."""
        self.now = self._advance_to_next_round()
        return self._schedule()

    def _schedule(self) -> float | None:
        """Ask the policy for an allocation now and apply it (None if nothing is active)."""
        if self.elastic is not None:
            self._elastic_begin_round()
        active = self.active()
        if not active:
            self.allocation = {}
            self._moved.clear()
            return None
        hide = self.config.hide_remaining
        infos = [j.job_info(self.now, hide_remaining=hide) for j in active]
        if hide and self.config.predict_remaining:
            infos = self._predicted(active, infos)
        if self.config.node_types and self.config.learn_type_speeds:
            infos = self._estimated_types(infos)
        previous = {
            j.name: list(self.allocation[j.name]) for j in active if j.name in self.allocation
        }
        if self.config.node_types and self.config.explore_types:
            infos = explore_types(infos, self.nodes, previous)
        t0 = time.perf_counter()
        proposed = self.policy.optimize(infos, self.nodes, previous)
        elapsed = time.perf_counter() - t0
        new = self._validated(proposed, {j.name for j in active})
        if self.config.explain:
            self._explain(infos, previous, new)
        for job in active:
            moved = job.name in self._moved  # lost a node: restarts even on the same others
            if moved or not same_allocation(new.get(job.name), self.allocation.get(job.name)):
                held = new.get(job.name, [])
                gpu_type, speed = self._pacing(job, held)
                job.reallocate(placement_of(held), self.now, gpu_type, speed)
        self._moved.clear()
        self.allocation = new
        if self.elastic is not None:
            self.elastic.after_round(self.now, infos, new)
        return elapsed

    def _elastic_begin_round(self) -> None:
        """Issue 31 hook: bring the elastic cluster to now (nodes joined, interrupted,
        consolidated). A job's replicas on a node that left are gone: it checkpointed within
        the notice, and restarts at this round wherever the policy puts it."""
        assert self.elastic is not None
        gone = self.elastic.begin_round(self.now, self.allocation)
        self.nodes = self.elastic.offered()
        self._capacity = {n.name: n.gpus for n in self.nodes}
        self._node_type = {n.name: n.gpu_type for n in self.nodes}
        for name, held in list(self.allocation.items()):
            kept = [n for n in held if n not in gone]
            if len(kept) < len(held):
                self._moved.add(name)
                self.allocation[name] = kept

    def _pacing(self, job: SimJob, held: Sequence[str]) -> tuple[str, float]:
        """The GPU type that paces ``job`` on the nodes ``held`` (the slowest of them for the
        job: a data-parallel step waits for its slowest replica) and the job's speed there."""
        types = sorted({self._node_type[n] for n in held})
        if not types:
            return "", 1.0
        app = job.app.name
        speed, gpu_type = min((self.config.speed_of(app, t), t) for t in types)
        return gpu_type, speed

    def _estimated_types(self, infos: list[JobInfo]) -> list[JobInfo]:
        """Each job's measured per-type speeds recorded by kind, and the types it has not
        measured filled from what jobs of its kind measured (:mod:`adl.sched.type_history`)."""
        types = [t for t, _ in self.config.node_types]
        return with_type_estimates(
            self.type_history,
            infos,
            types,
            eligible=lambda info: self.by_name[info.name].mode is JobMode.ADAPTIVE,
        )

    def _predicted(self, active: list[SimJob], infos: list[JobInfo]) -> list[JobInfo]:
        """Record the jobs finished since the last round in the history (their total work as
        they measured it), then fill each active job's predicted remaining work."""
        for job in self.jobs:
            if job.done and job.name not in self._recorded:
                self._recorded.add(job.name)
                total = job.done_work_s()
                if total is not None:
                    self.history.record(job.app.name, total)
        out = []
        for job, info in zip(active, infos, strict=True):
            done = job.done_work_s()
            guess = None if done is None else self.history.predict(info.kind, done)
            if guess is not None:
                info = replace(info, expected_remaining_s=guess[0], predicted_from=guess[1])
            out.append(info)
        return out

    def _explain(
        self, infos: list[JobInfo], previous: Mapping[str, list[str]], new: Allocation
    ) -> None:
        changed = {
            i.name: new.get(i.name, [])
            for i in infos
            if not same_allocation(new.get(i.name), previous.get(i.name))
        }
        held = sum(len(v) for v in previous.values())
        total = sum(self._capacity.values())
        free = max(total - held, 0)
        left = max(total - sum(len(v) for v in new.values()), 0)
        reported = {i.name: True for i in infos}
        infos_by = {i.name: i for i in infos}
        ranker = prediction_ranker(self.policy, self.entry)
        uses = ranker is not None and ranker.ranks_by_predicted_remaining()
        typed = bool(self.config.node_types)
        decided = explain(
            changed,
            previous,
            infos_by,
            free,
            reported,
            free_after=left,
            predictions_used=uses,
            # on a mixed cluster, the decisions name the types compared, as the operator's do
            node_types=self._node_type if typed else None,
            free_by_type=free_by_type(self.nodes, new, {}) if typed else None,
        )
        self.decisions += [(self.now, d) for d in decided.values()]

    def _advance_to_next_round(self) -> int:
        """Run every job up to the next round and return its time: the next multiple of
        ``round_s``, or with ``rounds_on_events`` the first submission or finish before it."""
        c = self.config
        end = (self.now // c.round_s + 1) * c.round_s
        if not c.rounds_on_events:
            for job in self.jobs:
                job.advance(self.now, end - self.now)
            return end
        end = min([end] + [j.spec.submit_time for j in self.jobs if j.spec.submit_time > self.now])
        t = self.now
        while t < end:
            dt = min(c.event_tick_s, end - t)
            running = [j for j in self.jobs if j.placement and not j.done]
            for job in running:
                job.advance(t, dt)
            t += dt
            if any(j.done for j in running):
                break
        return t

    def _validated(self, proposed: Mapping[str, list[str]], active: set[str]) -> Allocation:
        out: Allocation = {}
        used: Counter[str] = Counter()
        for name, nodes in proposed.items():
            if not nodes:
                continue
            if name not in active:
                raise ValueError(f"policy allocated GPUs to unknown or finished job {name!r}")
            unknown = [n for n in nodes if n not in self._capacity]
            if unknown:
                raise ValueError(f"policy used unknown nodes {unknown} for {name!r}")
            used.update(nodes)
            out[name] = list(nodes)
        over = {n: k for n, k in used.items() if k > self._capacity[n]}
        if over:
            raise ValueError(f"policy over-allocated nodes: {over}")
        return out

    def run(self, progress: ProgressFn | None = None) -> SimResult:
        """Run until every job has finished."""
        c = self.config
        result = SimResult(jobs=[], total_gpus=sum(self._capacity.values()))
        total = len(self.jobs)

        def record(elapsed: float | None) -> None:
            if elapsed is not None:
                result.round_s.append(elapsed)
            result.timeline.append(
                (self.now, {name: len(nodes) for name, nodes in self.allocation.items()})
            )

        if c.rounds_on_events and any(j.spec.submit_time <= self.now for j in self.jobs):
            record(self._schedule())  # jobs submitted at the very start need not wait
        while not all(j.done for j in self.jobs):
            if self.now >= c.max_time_s:
                raise RuntimeError(
                    f"workload not finished after {c.max_time_s} s of simulated time"
                )
            record(self.step())
            if progress is not None:
                progress(self.now, sum(j.done for j in self.jobs), total)
        result.jobs = [
            JobOutcome(
                name=j.name,
                application=j.app.name,
                submit_s=j.spec.submit_time,
                completion_s=j.completion_time,
                restarts=j.restarts or 0,
                gpu_seconds=j.attained_service,
                resume_times=tuple(j.resume_times),
                gpu_seconds_by_type=tuple(sorted(j.service_by_type.items())),
            )
            for j in self.jobs
        ]
        result.decisions = self.decisions
        if self.elastic is not None:
            end = max((j.completion_time or 0 for j in self.jobs), default=self.now)
            result.bill = self.elastic.bill(end)
            result.cluster_timeline = list(self.elastic.timeline)
        return result


def simulate(
    workload: Path | str | Sequence[WorkloadJob],
    policy: Policy,
    *,
    traces: Path | str | Mapping[str, AppTrace] | None = None,
    config: SimConfig | None = None,
    progress: ProgressFn | None = None,
    entry: PolicyEntry | None = None,
) -> SimResult:
    """Convenience wrapper: load what is needed and replay ``workload`` under ``policy``."""
    jobs = load_workload(workload) if isinstance(workload, Path | str) else list(workload)
    apps = traces if isinstance(traces, Mapping) else load_traces(traces)
    return Simulator(jobs, policy, apps, config, entry).run(progress)
