"""``adl`` job commands against a real local daemon process (the default backend): submit from
a command and from YAML, ls, describe (with a failure's reason), logs and logs -f, delete, top
(once and live), and clean one-line errors for bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from local_kit import WORKER
from typer.testing import CliRunner

from adl.cli.main import app
from adl.local.client import LocalBackend, daemon_pid
from adl.local.store import Store
from adl.models import Phase
from tests.waiting import wait_for

runner = CliRunner()


def adl(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def phase(home: Path, name: str, ns: str = "default") -> Phase | None:
    b = LocalBackend(home, autostart=False)
    try:
        return next((v.status.phase for v in b.list(ns) if v.name == name), None)
    finally:
        b.close()


def purged(home: Path, key: str) -> bool:
    """The daemon removed the job's row (it does so last, after its workers and files)."""
    store = Store(home / "state.db")
    try:
        return key not in store.revisions()
    finally:
        store.close()


def counter(*args: str) -> list[str]:
    return ["--", sys.executable, str(WORKER), *args]


def test_submit_ls_describe_logs_delete(adl_home: Path, daemon: int) -> None:
    code, out, err = adl("submit", "counter", "--min", "1", "--max", "2",
                         *counter("--steps", "6"))  # fmt: skip
    assert code == 0, err
    assert "job default/counter submitted" in out
    wait_for(lambda: phase(adl_home, "counter") == Phase.SUCCEEDED, timeout=60)

    code, out, _ = adl("ls")
    assert code == 0
    row = next(line for line in out.splitlines() if "counter" in line)
    assert "Succeeded" in row and "(1-2)" in row
    assert row.split()[1] == "-"  # QUEUE: none (no Kueue on the local backend)
    # for scripts: the objects as Kubernetes shows them
    code, out, _ = adl("ls", "-o", "json")
    assert code == 0
    listed = json.loads(out)
    assert listed["kind"] == "List" and len(listed["items"]) == 1
    job = listed["items"][0]
    assert job["kind"] == "AdaptiveJob" and job["metadata"]["name"] == "counter"
    assert job["spec"]["maxReplicas"] == 2 and job["status"]["phase"] == "Succeeded"
    code, out, _ = adl("describe", "counter", "-o", "json")
    assert code == 0 and json.loads(out) == job

    code, out, _ = adl("describe", "counter")
    assert code == 0
    assert "Name:         counter" in out
    assert "Phase:        Succeeded" in out
    assert "Replicas:     min 1, max 2" in out
    assert "Submitted" in out and "Events:" in out
    # options after NAME are adl's; everything after -- is the command, verbatim
    assert f"Command:      {sys.executable} {WORKER} --steps 6" in out

    code, out, _ = adl("logs", "counter")
    assert code == 0
    # a new job starts on up to a node (bootstrap_replicas): both of its 2 replicas at once
    assert "start group=1 rank=0 world=2 step=0" in out
    assert "done group=1 rank=0 step=6" in out
    code, _, err = adl("logs", "counter", "-r", "5")
    assert code == 1 and "no log of rank 5 for default/counter (logs of ranks 0, 1)" in err

    code, out, _ = adl("delete", "counter")
    assert code == 0 and "deleted" in out
    wait_for(lambda: purged(adl_home, "default/counter"), timeout=30)
    code, out, _ = adl("ls")
    assert code == 0 and "no jobs" in out
    code, _, err = adl("describe", "counter")
    assert code == 1 and "not found" in err
    assert not (adl_home / "jobs" / "default" / "counter").exists()


LONG = "from-yaml-with-a-name-long-enough-to-be-cut-at-80-columns"


def test_submit_from_yaml_takes_name_and_namespace_from_the_manifest(
    adl_home: Path, daemon: int, tmp_path: Path
) -> None:
    manifest = {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": LONG, "namespace": "team-a"},
        "spec": {
            "minReplicas": 1,
            "maxReplicas": 3,
            "maxRestarts": 2,
            "template": {"spec": {"containers": [
                {"name": "trainer", "command": [sys.executable, str(WORKER), "--steps", "4"]}
            ]}},
        },
    }  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = adl("submit", "-f", str(path))
    assert code == 0, err
    assert f"job team-a/{LONG} submitted" in out
    wait_for(lambda: phase(adl_home, LONG, "team-a") == Phase.SUCCEEDED, timeout=60)
    code, out, _ = adl("describe", LONG, "-n", "team-a")
    assert code == 0
    assert "Namespace:    team-a" in out and "MaxRestarts:  2" in out
    code, out, _ = adl("ls", "-n", "team-a")
    assert f"team-a/{LONG}" in out  # whole, though a pipe is 80 columns wide


def test_a_namespace_flag_that_contradicts_the_manifest_is_an_error(
    adl_home: Path, daemon: int, tmp_path: Path
) -> None:
    def write(name: str, ns: str | None) -> str:
        meta = {"name": name, **({"namespace": ns} if ns else {})}
        body = {"maxReplicas": 1, "template": {"spec": {"containers": [
            {"name": "t", "command": [sys.executable, str(WORKER), "--steps", "1"]}
        ]}}}  # fmt: skip
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"kind": "AdaptiveJob", "metadata": meta, "spec": body}))
        return str(path)

    with_ns = write("nsjob", "team-a")
    for flag in ("default", "team-b"):  # -n default too: it used to be taken for "not given"
        code, _, err = adl("submit", "-f", with_ns, "-n", flag)
        assert code == 2, err
        assert (
            f"the namespace from the provided object 'team-a' does not match the namespace "
            f"'{flag}' given with -n" in " ".join(err.split())
        )
    assert phase(adl_home, "nsjob", "team-a") is None and phase(adl_home, "nsjob", flag) is None
    code, out, err = adl("submit", "-f", with_ns, "-n", "team-a")
    assert code == 0 and "job team-a/nsjob submitted" in out, err
    code, out, err = adl("submit", "-f", write("plain", None), "-n", "team-b")
    assert code == 0 and "job team-b/plain submitted" in out, err
    code, out, err = adl("submit", "-f", write("plain2", None))
    assert code == 0 and "job default/plain2 submitted" in out, err


def test_logs_follow_streams_until_the_job_ends(adl_home: Path, daemon: int) -> None:
    code, _, err = adl("submit", "follow", *counter("--steps", "30", "--step-s", "0.05"))
    assert code == 0, err
    wait_for(lambda: phase(adl_home, "follow") in (Phase.RUNNING, Phase.SUCCEEDED), timeout=60)
    t0 = time.monotonic()
    code, out, _ = adl("logs", "follow", "-f")
    assert code == 0
    assert time.monotonic() - t0 < 60
    # -f returned by itself: the job had finished and the whole log was printed
    assert phase(adl_home, "follow") == Phase.SUCCEEDED
    assert out.rstrip().endswith("done group=1 rank=0 step=30")


def test_with_the_daemon_down_logs_f_ends_with_the_workers_and_ls_says_so(
    adl_home: Path, daemon: int
) -> None:
    from adl.local.client import stop_daemon

    code, _, err = adl("submit", "orphan", *counter("--steps", "40", "--step-s", "0.05"))
    assert code == 0, err
    wait_for(lambda: phase(adl_home, "orphan") == Phase.RUNNING, timeout=60)
    assert stop_daemon(adl_home)  # the worker keeps running; nobody updates its phase
    proc = subprocess.run(
        [sys.executable, "-m", "adl.cli.main", "logs", "-f", "orphan"],
        capture_output=True,
        text=True,
        timeout=60,  # before the fix it followed forever
    )
    assert proc.returncode == 0, proc.stderr
    assert "done group=1 rank=0 step=40" in proc.stdout
    assert "daemon is not running" in proc.stderr
    assert phase(adl_home, "orphan") == Phase.RUNNING  # stale, and said to be
    for command in (("ls",), ("describe", "orphan"), ("top", "--once")):
        code, out, err = adl(*command)
        assert code == 0 and "Running" in out, command
        assert "daemon is not running, so phases may be stale" in " ".join(err.split()), command


def test_a_failed_job_shows_its_reason_in_describe(adl_home: Path, daemon: int) -> None:
    code, _, err = adl("submit", "crashy", "--max-restarts", "1", *counter("--crash-always"))
    assert code == 0, err
    wait_for(lambda: phase(adl_home, "crashy") == Phase.FAILED, timeout=60)
    code, out, _ = adl("describe", "crashy")
    assert code == 0
    assert "Phase:        Failed" in out
    reason = next(line for line in out.splitlines() if line.startswith("Reason:"))
    assert "maxRestarts=1" in reason and "exited with code 3" in reason
    assert "crashing on purpose" in reason  # the worker's last words
    assert "failure:2" in out  # restarts by cause


def test_top_once_and_live(adl_home: Path, daemon: int) -> None:
    code, _, err = adl("submit", "watched", *counter("--steps", "2000", "--step-s", "0.05"))
    assert code == 0, err
    wait_for(lambda: phase(adl_home, "watched") == Phase.RUNNING, timeout=60)
    code, out, _ = adl("top", "--once")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["JOB", "QUEUE", "PHASE", "REPLICAS", "BATCH", "GOODPUT", "RESTARTS", "AGE"]
    assert "watched" in out and "Running" in out
    row = next(line.split() for line in out.splitlines() if "watched" in line)
    assert row[:3] == ["watched", "-", "Running"]  # the local backend has no Kueue queue

    # live: a separate process refreshing until interrupted
    # TTY_COMPATIBLE: rich draws the live table into the pipe as on a terminal (else only once,
    # at the end), so the test sees the table up before it interrupts
    proc = subprocess.Popen(
        [sys.executable, "-m", "adl.cli.main", "top", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "120", "TTY_COMPATIBLE": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    shown: list[str] = []
    reader = threading.Thread(target=lambda: shown.extend(iter(proc.stdout.readline, "")))
    reader.start()
    try:
        wait_for(lambda: "Running" in "".join(shown), 60, "the live table")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=20)
    assert proc.returncode == 0, proc.stderr.read()
    out = "".join(shown)
    assert "watched" in out and "Running" in out
    assert adl("delete", "watched")[0] == 0
    wait_for(lambda: purged(adl_home, "default/watched"), timeout=30)


def test_submit_starts_the_daemon_on_demand(adl_home: Path) -> None:
    assert daemon_pid(adl_home) is None
    code, _, err = adl("submit", "auto", *counter("--steps", "3"))
    assert code == 0, err
    pid = daemon_pid(adl_home)
    assert pid is not None and pid > 0
    wait_for(lambda: phase(adl_home, "auto") == Phase.SUCCEEDED, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("submit", "bad", "--min", "3", "--max", "2", "--", "python", "x.py"), "maxReplicas"),
        (("submit", "nothing"), "nothing to run"),
        (("submit", "Bad_Name", "--", "python", "x.py"), "invalid job name"),
        (("submit", "ok", "-n", "Bad_NS", "--", "python", "x.py"), "invalid namespace"),
        (("submit", "ok", "--backend", "nomad", "--", "python", "x.py"), "unknown backend"),
        (("submit", "both", "-f", "job.yaml", "--", "python"), "either -f FILE or a command"),
        (("submit", "-f", "/nonexistent/job.yaml"), "cannot read"),
        (("submit", "e", "--env", "NOVALUE", "--", "python"), "NAME=VALUE"),
    ],
)
def test_bad_input_is_one_clear_line(adl_home: Path, args: tuple[str, ...], message: str) -> None:
    code, out, err = adl(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err + out
    assert len(err.strip().splitlines()) <= 3  # one message (rich may wrap it)
    assert daemon_pid(adl_home) is None  # nothing was submitted, no daemon started


def test_manifest_mistakes_are_one_line_as_written(adl_home: Path, tmp_path: Path) -> None:
    good = {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": "m"},
        "spec": {"template": {"spec": {"containers": [{"command": ["python", "x.py"]}]}}},
    }
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(good))
    code, _, err = adl("submit", "-f", str(ok), "--min", "2", "--max", "3")
    assert code == 2 and "--min, --max: set these in the manifest" in err
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({**good, "apiVersion": "foo/v9"}))
    code, _, err = adl("submit", "-f", str(wrong))
    assert code == 2 and "apiVersion must be adl.dev/v1, got 'foo/v9'" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n  : :\n")
    code, _, err = adl("submit", "-f", str(broken))
    flat = " ".join(err.split())
    assert code == 2 and "expected ',' or ']'" in flat and 'broken.yaml", line 2' in flat
    # spec mistakes name the field as written, with a suggestion for a typo
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({**good, "spec": {**good["spec"], "minReplica": 2}}))
    code, _, err = adl("submit", "-f", str(typo))
    assert code == 2 and "spec.minReplica: unknown field (did you mean minReplicas?)" in err
    # a command string (not a list) is refused, not split into letters
    containers = [{"command": "python x.py"}]
    text = tmp_path / "text.yaml"
    text.write_text(
        yaml.safe_dump({**good, "spec": {"template": {"spec": {"containers": containers}}}})
    )
    code, _, err = adl("submit", "-f", str(text))
    assert code == 2 and "command must be a list of strings" in " ".join(err.split())
    # messages are text: brackets in them are not eaten as console markup
    code, _, err = adl("submit", "-f", str(tmp_path / "[bold]job.yaml"))
    assert code == 2 and "[bold]job.yaml" in err
    assert daemon_pid(adl_home) is None


def test_flags_the_local_backend_does_not_use_are_named(adl_home: Path, daemon: int) -> None:
    code, out, err = adl("submit", "img", "--image", "reg.example/x:1", *counter("--steps", "1"))
    assert code == 0 and "submitted" in out
    assert "note: the local backend does not use --image" in err


def test_unknown_job_commands_fail_cleanly(adl_home: Path, daemon: int) -> None:
    for cmd in (("describe", "ghost"), ("logs", "ghost"), ("delete", "ghost")):
        code, _, err = adl(*cmd)
        assert code == 1 and "default/ghost not found" in err, cmd


def text_of(path: Path) -> str:
    """The file's text, or "" while it does not exist yet (for waits on a worker's log)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_suspend_stops_the_workers_and_resume_goes_on_from_the_checkpoint(
    adl_home: Path, daemon: int
) -> None:
    code, _, err = adl(
        "submit", "long", "--max", "1", *counter("--steps", "400", "--step-s", "0.02")
    )
    assert code == 0, err
    log = adl_home / "jobs/default/long/logs/r0.log"
    # The job says Running before its worker has opened the log, so wait for the file's content
    # (a missing file reads as empty); deadlines are generous for a loaded machine.
    wait_for(
        lambda: phase(adl_home, "long") == Phase.RUNNING and "step=" in text_of(log), timeout=120
    )
    code, out, _ = adl("suspend", "long")
    assert code == 0 and "suspended" in out
    wait_for(lambda: phase(adl_home, "long") == Phase.SUSPENDED, timeout=60)
    wait_for(lambda: "stopped group=1" in text_of(log), timeout=60)
    code, out, _ = adl("suspend", "long")
    assert code == 0 and "already suspended" in out
    code, out, _ = adl("describe", "long")
    assert "Suspended" in out and "Restarts:     0" in out  # a suspension is not a restart
    code, out, _ = adl("resume", "long")
    assert code == 0 and "resumed" in out
    wait_for(lambda: "start group=2" in text_of(log), timeout=120)
    text = log.read_text()
    stopped = int(re.search(r"stopped group=1 rank=0 step=(\d+)", text).group(1))  # type: ignore[union-attr]
    resumed = int(re.search(r"start group=2 rank=0 world=\d+ step=(\d+)", text).group(1))  # type: ignore[union-attr]
    assert resumed == stopped > 0  # from its checkpoint: nothing lost, nothing repeated
    code, _, err = adl("suspend", "nobody")
    assert code == 1 and "not found" in err
    adl("delete", "long")
