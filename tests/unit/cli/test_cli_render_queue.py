"""``ls``/``top`` and ``describe`` show what Kueue admits a queued job, beside its queue."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from rich.console import Console

from adl.cli.render import describe_text, jobs_table
from adl.jobs_api import JobView
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = AdaptiveJobSpec.model_validate(
    {
        "minReplicas": 1,
        "maxReplicas": 4,
        "template": {"spec": {"containers": [{"name": "t", "command": [sys.executable, "t.py"]}]}},
    }
)


def _view(name: str, queue: str | None, admitted: int | None) -> JobView:
    status = AdaptiveJobStatus(phase=Phase.RUNNING, replicas=1, admitted=admitted)
    return JobView(name, "default", SPEC, status, NOW, queue=queue)


def _rows(views: list[JobView]) -> dict[str, list[str]]:
    console = Console(width=200)
    with console.capture() as cap:
        console.print(jobs_table(views, NOW))
    rows = [line.split() for line in cap.get().splitlines()[1:] if line.strip()]
    return {row[0]: row for row in rows}


def test_the_queue_column_carries_the_admitted_replicas() -> None:
    rows = _rows(
        [
            _view("queued", "team-a", 2),
            _view("evicted", "team-a", 0),
            _view("unread", "team-a", None),
            _view("free", None, None),
        ]
    )
    assert rows["queued"][1:3] == ["team-a", "(2)"]
    assert rows["evicted"][1:3] == ["team-a", "(0)"]
    assert rows["unread"][1:3] == ["team-a", "Running"]  # not read yet: the queue alone
    assert rows["free"][1] == "-"


def test_describe_says_how_many_replicas_kueue_admits() -> None:
    assert "Queue:        team-a (Kueue), 2 replicas admitted" in describe_text(
        _view("queued", "team-a", 2)
    )
    assert "team-a (Kueue), 1 replica admitted" in describe_text(_view("one", "team-a", 1))
    assert "team-a (Kueue), no replica admitted" in describe_text(_view("evicted", "team-a", 0))
    assert "Queue:" not in describe_text(_view("free", None, None))
