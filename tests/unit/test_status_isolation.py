"""Status rendering and ``/metrics`` with one job's data at its worst: ``ls``/``top``,
``describe`` and the scrape still show every job (the issue: one job's report made each of them
raise for everybody)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from adl.api.metrics import AdlMetrics
from adl.api.store import JobSnapshot
from adl.cli.render import describe_text, jobs_table
from adl.controller.status_hints import current_goodput
from adl.jobs_api import JobView
from adl.local.store import StoredJob
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase
from tests.unit.controller.test_round_isolation import hostile_hints

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": [sys.executable, "t.py"]}]}}
SPEC = AdaptiveJobSpec(template=TEMPLATE)


def running(hints: Hints | None = None) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(
        phase=Phase.RUNNING, group=1, replicas=2, allocation=["n", "n"], hints=hints
    )


def test_current_goodput_of_an_unusable_model_is_unknown_not_an_error() -> None:
    assert current_goodput(hostile_hints(), 2) is None
    rec = StoredJob("default/bad", "default", "bad", 1, 0.0, SPEC, running(), "t")
    rec.hints = hostile_hints()
    st = rec.status_with_hints()  # what ls, describe and /metrics read on the local backend
    assert st.goodput is None and st.hints is not None


def test_ls_and_describe_show_every_job_whatever_one_holds() -> None:
    # a spec stored by an earlier version with a command no longer accepted (a number)
    odd = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "command": 5, "image": "i"}]}}},
        context={"stored": True},
    )
    views = [
        JobView("bad", "default", odd, running(hostile_hints()), NOW),
        JobView("good", "default", SPEC, running(), NOW),
    ]
    console = Console(width=200)
    with console.capture() as cap:
        console.print(jobs_table(views, NOW))
    assert "bad" in cap.get() and "good" in cap.get()
    text = describe_text(views[0])
    assert "Name:         bad" in text and "Command:      5" in text


def test_metrics_scrape_every_job_whatever_one_holds() -> None:
    m = AdlMetrics()
    bad = running(hostile_hints()).model_copy(update={"goodput": float("nan")})
    m.set_jobs([JobSnapshot("default/bad", bad), JobSnapshot("default/good", running())])
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    names = {s.labels["name"] for s in families["adl_job_replicas"].samples}
    assert names == {"bad", "good"}
