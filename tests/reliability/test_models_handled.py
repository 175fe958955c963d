"""Anything the models accept is handled everywhere a job's data is used: the scheduling round
(with the real ``AdlPolicy``), the status rendering of ``ls``/``top``/``describe`` and
``/metrics``; with no exception, and with no job left out of the round for its data (the
bounds exist so that every accepted report gives a usable model).

The issue this guards: ``localBszBounds: [1, 1e20]`` was schema-valid and made every round,
every ``adl ls`` and every scrape raise, for every job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from adl.api.metrics import AdlMetrics
from adl.api.store import JobSnapshot
from adl.cli.render import describe_text, job_object, jobs_table
from adl.cli.submit import manifest
from adl.controller.job_record import JobRecord
from adl.controller.rounds import SpeedupCache, plan_round
from adl.controller.status_hints import current_goodput
from adl.jobs_api import JobView
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo
from tests.reliability.strategies import TEMPLATE, accepted, model_data

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NODES = [NodeInfo("n0", 8), NodeInfo("n1", 8)]
PLAIN = AdaptiveJobSpec(template=TEMPLATE, min_replicas=1, max_replicas=4)
#: a realistic report for the bystander job
GOOD = Hints.model_validate(
    {
        "initBatchSize": 32,
        "maxBatchSize": 1024,
        "localBszBounds": [8, 128],
        "gradientAccumulation": True,
        "perfParams": {
            "alphaC": 0.05,
            "betaC": 0.002,
            "alphaN": 0.2,
            "betaN": 0.01,
            "alphaR": 0.05,
            "betaR": 0.005,
            "gamma": 1.5,
        },
        "gradParams": {"sqr": 0.5, "var": 4.0},
        "maxProfiledReplicas": 2,
    }
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

phases = st.sampled_from([Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.STARTING])


def _status(
    phase: Phase, replicas: int, hints: Hints | None, gpus_per_replica: int = 1
) -> AdaptiveJobStatus:
    # only what could be held: replicas of gpus_per_replica GPUs that fit on n0 (a job whose
    # replica is larger than a node never ran)
    replicas = min(replicas, NODES[0].gpus // max(gpus_per_replica, 1))
    running = phase != Phase.PENDING and replicas > 0
    phase = phase if running or phase != Phase.RUNNING else Phase.PENDING
    alloc = ["n0"] * replicas if running else []
    st_ = AdaptiveJobStatus(
        phase=phase, group=1 if running else 0, replicas=len(alloc), allocation=alloc, hints=hints
    )
    # what the local store shows (its status_with_hints) and the lifecycle surfaces
    st_.batch_size = hints.batch_size if hints is not None else None
    st_.goodput = current_goodput(hints, len(alloc)) if alloc else None
    return st_


def _everything(spec: AdaptiveJobSpec, status: AdaptiveJobStatus) -> None:
    """One fuzzed job beside a bystander with a good model and one with none: the round, the
    renderings and the scrape all handle it, and the round leaves nobody out."""
    held = status.allocation or None
    jobs = [
        JobRecord("ns/fuzzed", spec, status, NOW - timedelta(seconds=30), held),
        JobRecord("ns/good", PLAIN, _status(Phase.PENDING, 0, GOOD), NOW),
        JobRecord("ns/new", PLAIN, _status(Phase.PENDING, 0, None), NOW + timedelta(seconds=1)),
    ]
    cache = SpeedupCache()
    for _ in range(2):  # a second round reuses the kept speedup tables
        result = plan_round(AdlPolicy(), jobs, NODES, NOW, cache)
        assert result.faults == {}, result.faults
        per_node = {n.name: 0 for n in NODES}
        for key, nodes in result.allocation.items():
            gpus = next(j.spec.gpus_per_replica for j in jobs if j.key == key)
            for n in nodes:
                per_node[n] += max(gpus, 1) if gpus else 0
        assert all(per_node[n.name] <= n.gpus for n in NODES), per_node
    views = [JobView(j.key.split("/")[1], "ns", j.spec, j.status, j.created) for j in jobs]
    console = Console(width=160, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(jobs_table(views, NOW))
    console.file.close()
    for v in views:
        assert v.name in describe_text(v)
        job_object(v)
    metrics = AdlMetrics()
    metrics.set_jobs(JobSnapshot(j.key, j.status, j.spec.gpus_per_replica) for j in jobs)
    families = {f.name for f in text_string_to_metric_families(metrics.render().decode())}
    assert "adl_job_replicas" in families


@SETTINGS
@given(hints=accepted(Hints), phase=phases, replicas=st.integers(1, 4))
def test_any_accepted_report_is_handled(hints: Hints, phase: Phase, replicas: int) -> None:
    _everything(PLAIN, _status(phase, replicas, hints))


@pytest.mark.slow
@SETTINGS
@given(spec=accepted(AdaptiveJobSpec), hints=st.none() | accepted(Hints), phase=phases)
def test_any_accepted_spec_with_any_report_is_handled(
    spec: AdaptiveJobSpec, hints: Hints | None, phase: Phase
) -> None:
    replicas = max(min(spec.min_replicas, 4), 1)
    _everything(spec, _status(phase, replicas, hints, spec.gpus_per_replica))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    spec=model_data(AdaptiveJobSpec),
    meta=st.fixed_dictionaries({}, optional={"name": st.text(max_size=10), "x": st.integers()}),
    data=st.data(),
)
def test_any_manifest_is_accepted_and_handled_or_refused_with_a_value_error(
    spec: dict, meta: dict, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    doc = {"apiVersion": "adl.dev/v1", "kind": "AdaptiveJob", "metadata": meta, "spec": spec}
    path = Path(tmp_path_factory.mktemp("m")) / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        _, _, parsed = manifest(path)
    except ValueError:
        return  # refused with a message the CLI shows as one line
    hints = data.draw(st.none() | accepted(Hints))
    replicas = max(min(parsed.min_replicas, 4), 1)
    _everything(parsed, _status(Phase.RUNNING, replicas, hints, parsed.gpus_per_replica))
