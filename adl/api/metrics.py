"""Prometheus metrics of the control plane, in a registry owned by one app (never the global
one, so several apps and tests coexist in one process).

Job metrics are computed at scrape time from the store's job list; the round-latency histogram
and the hints counter are fed by the backend and the service as events happen."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adl.api.store import JobSnapshot
from adl.models import Phase, RestartCause

log = logging.getLogger("adl.api")

#: Every family this module exports (name as exposed; counters get ``_total``). The Grafana
#: dashboard may only query these.
METRIC_NAMES = (
    "adl_jobs",
    "adl_job_replicas",
    "adl_job_gpus",
    "adl_job_restarts_total",
    "adl_job_goodput",
    "adl_job_batch_size",
    "adl_job_attained_service_seconds",
    "adl_round_latency_seconds",
    "adl_rounds_total",
    "adl_hints_reports_total",
)

#: Policy rounds take milliseconds to seconds.
ROUND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _split(key: str) -> tuple[str, str]:
    ns, sep, name = key.partition("/")
    return (ns, name) if sep else ("", key)


class _JobCollector(Collector):
    """Job families built from the last snapshot handed to ``AdlMetrics.set_jobs``."""

    def __init__(self, named: bool = True, source: _JobCollector | None = None) -> None:
        self.jobs: Sequence[JobSnapshot] = ()
        #: per-job families (labels namespace, name); False: the phase counts only
        self.named = named
        #: read the snapshot of another collector (the anonymous view of the same jobs)
        self._source = source

    def collect(self) -> Iterator[Metric]:
        if self._source is not None:
            self.jobs = self._source.jobs
        labels = ["namespace", "name"]
        by_phase = GaugeMetricFamily("adl_jobs", "Jobs by phase", labels=["phase"])
        replicas = GaugeMetricFamily("adl_job_replicas", "Replicas allocated", labels=labels)
        gpus = GaugeMetricFamily("adl_job_gpus", "GPUs (or CPU slots) allocated", labels=labels)
        restarts = CounterMetricFamily(
            "adl_job_restarts", "Restarts by cause", labels=[*labels, "cause"]
        )
        goodput = GaugeMetricFamily("adl_job_goodput", "Last reported goodput", labels=labels)
        batch = GaugeMetricFamily("adl_job_batch_size", "Current global batch", labels=labels)
        service = GaugeMetricFamily(
            "adl_job_attained_service_seconds", "GPU-seconds received", labels=labels
        )
        counts = dict.fromkeys(Phase, 0)
        for job in self.jobs:
            st = job.status
            counts[st.phase] += 1
            ids = list(_split(job.key))
            hints = st.hints
            good = st.goodput if st.goodput is not None else (hints.goodput if hints else None)
            bsz = (
                st.batch_size
                if st.batch_size is not None
                else (hints.batch_size if hints else None)
            )
            try:  # one job's odd figure (not a number) must not fail the scrape of all
                sample = (
                    float(len(st.allocation)),
                    float(len(st.allocation) * job.gpus_per_replica),
                    [float(st.restart_count(cause)) for cause in RestartCause],
                    None if good is None else float(good),
                    None if bsz is None else float(bsz),
                    float(st.attained_service_s),
                )
            except (TypeError, ValueError, OverflowError) as err:
                log.warning("metrics: %s left out: %s", job.key, err)
                continue
            n, g, causes, good_v, bsz_v, served = sample
            replicas.add_metric(ids, n)
            gpus.add_metric(ids, g)
            for cause, count in zip(RestartCause, causes, strict=True):
                restarts.add_metric([*ids, cause.value], count)
            if good_v is not None:
                goodput.add_metric(ids, good_v)
            if bsz_v is not None:
                batch.add_metric(ids, bsz_v)
            service.add_metric(ids, served)
        for phase, n in counts.items():
            by_phase.add_metric([phase.value], n)
        yield by_phase
        if self.named:
            yield from (replicas, gpus, restarts, goodput, batch, service)


class AdlMetrics:
    """One app's metrics. Backends call ``observe_round`` after each scheduling round."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._jobs = _JobCollector()
        self.registry.register(self._jobs)
        self.round_latency = Histogram(
            "adl_round_latency_seconds",
            "Time the policy took for one scheduling round",
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        self.rounds = Counter("adl_rounds", "Scheduling rounds run", registry=self.registry)
        self.hints_reports = Counter(
            "adl_hints_reports",
            "Hints reports received, by HTTP status code",
            labelnames=["code"],
            registry=self.registry,
        )
        #: what a scrape without the metrics token gets where one is required (the local
        #: daemon): the same figures without job names (jobs by phase, rounds, reports)
        self.anonymous = CollectorRegistry()
        self.anonymous.register(_JobCollector(named=False, source=self._jobs))
        for shared in (self.round_latency, self.rounds, self.hints_reports):
            self.anonymous.register(shared)

    def observe_round(self, seconds: float) -> None:
        self.rounds.inc()
        self.round_latency.observe(max(seconds, 0.0))

    def set_jobs(self, jobs: Iterable[JobSnapshot]) -> None:
        self._jobs.jobs = tuple(jobs)

    def render(self, named: bool = True) -> bytes:
        """The exposition; ``named=False`` leaves out every family that names a job."""
        return generate_latest(self.registry if named else self.anonymous)
