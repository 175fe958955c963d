"""One job cannot hurt the others, end to end on the local backend: a real daemon (real policy,
real API on 127.0.0.1) receives a hostile hints report from one job's token; a job submitted
afterwards is still scheduled, and ``ls``, ``describe`` and ``/metrics`` keep working."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from local_kit import counter_spec
from rich.console import Console

from adl.cli.render import describe_text, jobs_table
from adl.local.client import LocalBackend
from adl.models import Phase
from tests.waiting import wait_for

#: schema-valid before the fix: integers of any size were accepted, and numpy cannot build a
#: micro-batch grid up to 1e20 (every round, ``ls`` and ``/metrics`` raised)
HOSTILE = {
    "initBatchSize": 32,
    "batchSize": 32,
    "localBszBounds": [1, 100000000000000000000],
    "perfParams": {
        "alphaC": 0.1,
        "betaC": 0.01,
        "alphaN": 0.0,
        "betaN": 0.0,
        "alphaR": 0.0,
        "betaR": 0.0,
        "gamma": 1.0,
    },
    "gradParams": {"sqr": 1.0, "var": 1.0},
}


def _http(url: str, body: dict[str, Any] | None = None, token: str = "") -> tuple[int, bytes]:
    req = urllib.request.Request(
        url,
        method="PUT" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _phase(b: LocalBackend, name: str) -> Phase:
    return b.get(name, "default").status.phase


def test_a_hostile_report_does_not_stop_scheduling_for_the_others(
    daemon_factory, backend, home: Path
) -> None:
    d = daemon_factory(api=True, slots=4)  # the real default policy
    backend.submit("a", "default", counter_spec("--steps", "2000", "--step-s", "0.05"))
    wait_for(lambda: _phase(backend, "a") == Phase.RUNNING, timeout=60)
    env = json.loads((home / "jobs/default/a/groups/g1.plan.json").read_text())["ranks"][0]["env"]
    url, token = env["ADL_API_URL"], Path(env["ADL_TOKEN_FILE"]).read_text().strip()
    code, body = _http(f"{url}/v1/jobs/default/a/hints", HOSTILE, token)
    # the bound is part of the schema: refused with the field named, never stored
    assert code == 422, body
    assert b"localBszBounds" in body
    d._round_due = True
    backend.submit("b", "default", counter_spec("--steps", "2000", "--step-s", "0.05"))
    wait_for(lambda: _phase(backend, "b") == Phase.RUNNING, timeout=60)
    views = backend.list()
    console = Console(width=200)
    with console.capture() as cap:
        console.print(jobs_table(views))
    assert "Running" in cap.get()
    assert "Phase:        Running" in describe_text(backend.get("a", "default"))
    metrics_token = (home / "metrics-token").read_text().strip()
    assert (home / "metrics-token").stat().st_mode & 0o777 == 0o600
    code, body = _http(f"{url}/metrics", token=metrics_token)
    assert code == 200 and b'adl_job_replicas{name="b",namespace="default"}' in body
    # another local user reaches the loopback port too: without the token, no job names
    code, body = _http(f"{url}/metrics", token=token)  # a job's token is not the metrics one
    assert code == 200 and b"adl_jobs{" in body and b'name="b"' not in body
    backend.delete("a", "default")
    backend.delete("b", "default")
