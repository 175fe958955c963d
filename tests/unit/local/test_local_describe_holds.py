"""``adl describe`` says why a job with free slots beside it was not grown (the user saw a job
stay at 1 replica for its last minutes with 2 slots free, and nothing said why)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from adl.cli.render import describe_text
from adl.controller.driver import GROWTH_HELD
from adl.local.client import LocalBackend
from adl.local.daemon import NODE, Daemon, Settings
from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    PerfParamsModel,
    Phase,
)
from adl.sched.hints import remaining_seconds

TEMPLATE = {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}


def hints(remaining_s: float, restart_cost_s: float) -> Hints:
    """A job that measured 1 and 2 replicas (2 is 1.9x as fast), with ``remaining_s`` of work
    left on one replica and a measured restart cost."""
    base = Hints(
        init_batch_size=32,
        max_batch_size=512,
        local_bsz_bounds=(16, 128),
        perf_params=PerfParamsModel(
            alpha_c=0.01,
            beta_c=0.001,
            alpha_n=0.05,
            beta_n=0.01,
            alpha_r=0.01,
            beta_r=0.001,
            gamma=1.5,
        ),
        grad_params=GradParamsModel(sqr=1.0, var=10.0),
        max_profiled_replicas=2,
        progress=0.0,
        total_progress=1.0,
        restart_cost_s=restart_cost_s,
    )
    per_step = remaining_seconds(base)
    assert per_step is not None
    steps = remaining_s / per_step
    return base.model_copy(update={"progress": 1000.0, "total_progress": 1000.0 + steps})


def test_describe_says_why_a_job_with_free_slots_beside_it_was_not_grown(tmp_path: Path) -> None:
    home = tmp_path / "home"
    daemon = Daemon(Settings(home=home, api=False, slots=3))  # the default policy, adl's
    try:
        key = "default/short"
        daemon.store.add_job(
            "default", "short", AdaptiveJobSpec(template=TEMPLATE, min_replicas=1, max_replicas=3)
        )
        daemon.store.set_status(
            key,
            AdaptiveJobStatus(phase=Phase.RUNNING, group=1, replicas=1, allocation=[NODE]),
        )
        daemon.store.set_hints(key, hints(remaining_s=80.0, restart_cost_s=20.0))
        daemon.reload()
        result = daemon.driver.run_round(datetime.now(UTC))
        assert result.allocation[key] == [NODE]  # kept at 1 replica, 2 slots left free
        backend = LocalBackend(home, autostart=False)
        try:
            text = describe_text(backend.get("short", "default"))
        finally:
            backend.close()
    finally:
        daemon.store.close()
    said = re.search(r"not grown: the remaining (\d+) s do not repay a (\d+) s restart", text)
    assert said is not None, text
    assert said.groups() == ("80", "20")
    assert "slots back later" in text  # the growth pays for two restarts, in slots
    # shown twice: the condition, while it lasts, and the event of when it began
    assert re.search(rf"{GROWTH_HELD}\s+True\s+RestartNotRepaid not grown", text), text
    assert "NotGrown" in text and "Events:" in text
