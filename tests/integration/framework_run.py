"""Runs a framework example under the local daemon through a resize and a suspend/resume, and
compares what the framework logged with an uninterrupted run (HF Trainer and Lightning tests).

The job starts on 1 replica. At its first gate (1:S1) the test grows it to 2; at its second
(2:S2) the test suspends it, and resumes it on 1 replica. Each stop is a real SIGTERM to real
processes (gloo between them); each start resumes from adl's checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from local_kit import FixedPolicy

from adl.local.client import LocalBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from tests.waiting import wait_for

#: Relative tolerance of a logged float against the uninterrupted run. The runs differ only in
#: where float32 sums are split: at 2 replicas each rank averages half the batch and the
#: all-reduce adds the halves, at 1 the whole batch is averaged at once. Rounding then differs
#: in the last bits (about 1e-7 relative per step, measured at most 2e-7 over a whole run); a
#: bug (a sample skipped or repeated, a lost optimizer state, a scheduler step too many) moves
#: the loss or the LR by 1e-3 or more.
RTOL = 1e-5


def reference(command: list[str], out: Path, timeout_s: float = 300) -> list[dict[str, Any]]:
    """The uninterrupted run: one process, standalone (no ADL_* variables)."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("ADL_")}
    done = subprocess.run(
        [*command, "--out", str(out)], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def log_text(home: Path, name: str) -> str:
    path = home / f"jobs/default/{name}/logs/r0.log"
    return path.read_text() if path.exists() else ""


def gate_seen(home: Path, name: str, step: int, world: int) -> bool:
    line = json.dumps({"gate": step, "world": world})
    return line in log_text(home, name)


def run_elastic(
    daemon_factory: Any,
    backend: LocalBackend,
    home: Path,
    name: str,
    command: list[str],
    gates: tuple[int, int],
    out: Path,
    on_poll: Callable[[AdaptiveJobStatus], None] | None = None,
) -> list[dict[str, Any]]:
    """The job through 1 -> 2 replicas (at step ``gates[0]``), a suspend at step ``gates[1]``
    and a resume on 1 replica; what it logged. ``on_poll`` sees the job's status at every poll
    (to check what a user would see at any moment)."""
    policy = FixedPolicy()
    policy.replicas[name] = 1
    d = daemon_factory(policy, slots=2, api=on_poll is not None)
    first, second = gates
    # watched: the first hints report within a second of each start, not after 30 s (a short
    # run could finish first); the worker API must be up for it
    env = [{"name": "ADL_REPORT_INTERVAL", "value": "1"}] if on_poll is not None else []
    spec = AdaptiveJobSpec.model_validate(
        {
            "template": {"spec": {"containers": [{"name": "t", "env": env, "command": [
                *command[:2], "--gates", f"1:{first},2:{second}", "--", *command[2:],
                "--out", str(out),
            ]}]}},
            "minReplicas": 1,
            "maxReplicas": 2,
            "maxRestarts": 0,  # any failure fails the test: only stops the test asked for
            "terminationGracePeriodSeconds": 60,
        }
    )  # fmt: skip
    backend.submit(name, "default", spec)

    def phase() -> Phase:
        status = backend.get(name, "default").status
        if on_poll is not None:
            on_poll(status)
        return status.phase

    def failed() -> str:
        return f"{phase()}\n{log_text(home, name)[-4000:]}"

    def reached(step: int, world: int) -> bool:
        assert not phase().finished, failed()
        return gate_seen(home, name, step, world)

    wait_for(lambda: reached(first, 1), timeout=180, every=0.2)
    policy.replicas[name] = 2  # grow: the workers checkpoint, 2 start from the checkpoint
    d._round_due = True
    wait_for(lambda: reached(second, 2), timeout=180, every=0.2)
    assert backend.set_suspend(name, "default", True)
    wait_for(lambda: phase() == Phase.SUSPENDED, timeout=120, every=0.2)
    policy.replicas[name] = 1
    assert backend.set_suspend(name, "default", False)
    wait_for(lambda: phase().finished, timeout=240, every=0.2)
    assert phase() == Phase.SUCCEEDED, failed()
    text = log_text(home, name)
    # two stops, each checkpointed by the workers, and three starts (1, 2, then 1 replica)
    assert text.count("stopped for preemption after checkpointing") == 2, text[-4000:]
    assert "=== group 3 rank 0 ===" in text, text[-4000:]
    return json.loads(out.read_text())


def assert_same_history(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Every entry with the same keys; integers and strings equal, floats within RTOL."""
    assert len(got) == len(want), (len(got), len(want), got[-3:], want[-3:])
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w), (g, w)
        for key, value in w.items():
            if isinstance(value, float):
                scale = max(abs(value), 1e-12)
                assert abs(g[key] - value) <= RTOL * scale, (key, g, w)
            else:
                assert g[key] == value, (key, g, w)


def python(*args: str) -> list[str]:
    return [sys.executable, *args]
