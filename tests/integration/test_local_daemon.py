"""The daemon with real worker processes (the torch-free counter): start, resize, crash and
restart from the checkpoint, maxRestarts, deletion, and the slot gate between jobs."""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from local_kit import FixedPolicy, counter_spec

from adl.cli.render import describe_text
from adl.local.client import LocalBackend, daemon_pid
from adl.models import Phase, RestartCause
from tests.waiting import wait_for


def _log(home, name: str, rank: int = 0) -> str:  # type: ignore[no-untyped-def]
    path = home / "jobs" / "default" / name / "logs" / f"r{rank}.log"
    return path.read_text() if path.exists() else ""


def _phase(b: LocalBackend, name: str) -> Phase:
    return b.get(name, "default").status.phase


def test_describe_says_why_the_allocation_changed(daemon_factory, backend, home) -> None:
    """The decision log: every allocation change carries its reason, shown by describe."""
    policy = FixedPolicy()
    policy.replicas["a"] = 1
    d = daemon_factory(policy, slots=4)
    backend.submit("a", "default", counter_spec("--steps", "200", "--step-s", "0.05", hi=2))
    wait_for(lambda: _phase(backend, "a") == Phase.RUNNING)
    text = describe_text(backend.get("a", "default"))
    # before any report the speedups are the linear prior, and it says so
    assert "started with 1 replica" in text and "waiting for its first report" in text
    policy.replicas["a"] = 2
    d._round_due = True
    wait_for(lambda: "grew 1 -> 2" in describe_text(backend.get("a", "default")))
    line = next(e for e in backend.get("a", "default").events if "grew 1 -> 2" in e)
    # CPU slots: the events count slots, not GPUs
    assert "Rescheduled" in line and "speedup 1.00 -> 2.00" in line and "3 slots free" in line
    backend.delete("a", "default")


def test_job_runs_to_success_with_the_worker_env(daemon_factory, backend, home) -> None:
    policy = FixedPolicy()
    policy.replicas["a"] = 2
    daemon_factory(policy)
    backend.submit("a", "default", counter_spec("--steps", "10"))
    wait_for(lambda: _phase(backend, "a") == Phase.SUCCEEDED)
    v = backend.get("a", "default")
    # ran as one group of two; finished, it holds nothing
    assert v.status.group == 1 and v.status.replicas == 0 and v.status.allocation == []
    assert "start group=1 rank=0 world=2 step=0" in _log(home, "a", 0)
    assert "start group=1 rank=1 world=2" in _log(home, "a", 1)
    assert json.loads((home / "jobs/default/a/checkpoint/state.json").read_text())["step"] == 10
    assert any("Succeeded" in e for e in v.events)


def test_resize_stops_the_group_and_resumes_at_the_new_size(daemon_factory, backend, home) -> None:
    policy = FixedPolicy()
    policy.replicas["a"] = 1
    d = daemon_factory(policy)
    backend.submit("a", "default", counter_spec("--steps", "60", "--step-s", "0.05", hi=3))
    wait_for(lambda: "step=" in _log(home, "a") and _phase(backend, "a") == Phase.RUNNING)
    wait_for(lambda: (home / "jobs/default/a/checkpoint/state.json").exists())
    policy.replicas["a"] = 3
    d._round_due = True
    wait_for(lambda: _phase(backend, "a") == Phase.SUCCEEDED, timeout=60)
    st = backend.get("a", "default").status
    assert st.restart_count(RestartCause.RESIZE) == 1
    assert st.restart_count(RestartCause.FAILURE) == 0
    assert st.group == 2 and st.replicas == 0  # group 2 ran on 3 (below); finished, holds none
    log = _log(home, "a")
    stopped = int(re.search(r"stopped group=1 rank=0 step=(\d+)", log).group(1))  # type: ignore[union-attr]
    resumed = int(re.search(r"start group=2 rank=0 world=3 step=(\d+)", log).group(1))  # type: ignore[union-attr]
    assert resumed == stopped > 0  # nothing lost, nothing repeated
    groups = d.store.groups("default/a")
    assert [g.replicas for g in groups] == [1, 3]
    assert groups[0].ended is not None and groups[0].ended <= groups[1].started + 0.5
    # group 2 was forked from the warm shim started while group 1 stopped (torch preloaded);
    # its ranks ran only after group 1 had exited
    for rank in range(3):
        assert re.search(r"start group=2 rank=\d .* warm=1", _log(home, "a", rank)), rank
    assert "warm=0" in _log(home, "a", 0).split("=== group 2")[0]
    result = json.loads((home / "jobs/default/a/groups/g2.result.json").read_text())
    assert result["started"] >= groups[0].ended - 0.05
    # a standing warm shim is dropped once the job has finished
    wait_for(lambda: not list((home / "jobs/default/a/groups").glob("warm-*")), timeout=10)


def test_crash_restarts_from_the_last_checkpoint(daemon_factory, backend, home) -> None:
    daemon_factory(FixedPolicy())
    backend.submit("c", "default", counter_spec("--steps", "20", "--crash-at", "8"))
    wait_for(lambda: _phase(backend, "c") == Phase.SUCCEEDED, timeout=60)
    st = backend.get("c", "default").status
    assert st.restart_count(RestartCause.FAILURE) == 1
    log = _log(home, "c")
    assert "crash group=1 step=8" in log
    assert "start group=2 rank=0 world=1 step=7" in log  # the checkpoint before the crash


def test_past_max_restarts_the_job_fails_with_the_reason(daemon_factory, backend) -> None:
    daemon_factory(FixedPolicy())
    backend.submit("f", "default", counter_spec("--crash-always", max_restarts=1))
    wait_for(lambda: _phase(backend, "f") == Phase.FAILED, timeout=60)
    v = backend.get("f", "default")
    assert v.status.restart_count(RestartCause.FAILURE) == 2
    text = describe_text(v)
    assert "Phase:        Failed" in text
    assert "exited with code 3" in text and "maxRestarts=1" in text


def test_delete_stops_workers_and_forgets_the_job(daemon_factory, backend, home) -> None:
    d = daemon_factory(FixedPolicy())
    backend.submit("x", "default", counter_spec("--steps", "1000"))
    wait_for(lambda: _phase(backend, "x") == Phase.RUNNING and "start" in _log(home, "x"))
    pid = d.store.groups("default/x")[0].pid
    backend.delete("x", "default")
    assert not [v for v in backend.list() if v.name == "x"]  # hidden at once
    # the row goes last, after the workers stopped and the files were removed
    wait_for(lambda: "default/x" not in d.store.revisions(), timeout=30)
    from adl.local.shim import proc_start_ticks

    assert pid is not None
    assert proc_start_ticks(pid) is None
    assert not (home / "jobs/default/x").exists()


def test_a_job_waits_until_another_jobs_group_gave_its_slots_back(
    daemon_factory, backend, home
) -> None:
    policy = FixedPolicy()
    policy.replicas.update(a=2, b=0)
    d = daemon_factory(policy, slots=2)
    backend.submit("a", "default", counter_spec("--steps", "400", "--step-s", "0.05"))
    wait_for(lambda: _phase(backend, "a") == Phase.RUNNING and "start" in _log(home, "a"))
    policy.replicas.update(a=1, b=1)
    backend.submit("b", "default", counter_spec("--steps", "5"))
    wait_for(lambda: _phase(backend, "b") == Phase.SUCCEEDED, timeout=60)
    ga = d.store.groups("default/a")
    gb = d.store.groups("default/b")
    # b's group started only after a's 2-replica group had exited
    assert ga[0].replicas == 2 and ga[0].ended is not None
    assert gb[0].started >= ga[0].ended - 0.2


def test_a_command_that_cannot_start_fails_with_that_reason(daemon_factory, backend) -> None:
    daemon_factory(FixedPolicy())
    spec = counter_spec(max_restarts=0)
    spec.template["spec"]["containers"][0]["command"] = ["/nonexistent/trainer", "--x"]
    backend.submit("n", "default", spec)
    wait_for(lambda: _phase(backend, "n") == Phase.FAILED, timeout=30)
    text = describe_text(backend.get("n", "default"))
    assert "exited with code 127" in text
    assert "cannot start '/nonexistent/trainer'" in text


def test_a_silent_crash_is_reported_by_its_exit_code_alone(daemon_factory, backend) -> None:
    # the first group says why it fails; the restarted one dies without a word: its reason is
    # its exit code, not the shim's "=== group 2 rank 0 ===" header nor group 1's last line
    daemon_factory(FixedPolicy())
    spec = counter_spec(max_restarts=1)
    script = (
        "import os, pathlib, sys\n"
        "m = pathlib.Path(os.environ['ADL_CHECKPOINT_DIR']) / 'said'\n"
        "if not m.exists():\n"
        "    m.parent.mkdir(parents=True, exist_ok=True); m.touch(); print('loud crash')\n"
        "sys.exit(3)\n"
    )
    spec.template["spec"]["containers"][0]["command"] = [sys.executable, "-c", script]
    backend.submit("quiet", "default", spec)
    wait_for(lambda: _phase(backend, "quiet") == Phase.FAILED, timeout=60)
    st = backend.get("quiet", "default").status
    assert st.restart_count(RestartCause.FAILURE) == 2
    assert "rank 0 exited with code 3" in st.message
    assert "===" not in st.message and "loud crash" not in st.message


def test_the_failure_line_is_the_groups_own(tmp_path: Path) -> None:
    from adl.local.processes import group_last_line

    log = tmp_path / "r0.log"
    log.write_text("=== group 1 rank 0 ===\nfirst words\n\n=== group 2 rank 0 ===\n")
    assert group_last_line(log, 1, 0) == "first words"
    assert group_last_line(log, 2, 0) == ""
    with open(log, "a") as fh:
        fh.write("second words\nlast words  \n\n")
    assert group_last_line(log, 2, 0) == "last words"
    assert group_last_line(tmp_path / "missing.log", 1, 0) == ""


def test_python_in_a_job_is_the_interpreter_adl_runs_under(
    daemon_factory, backend, home, monkeypatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # adl's environment not activated
    daemon_factory(FixedPolicy())
    spec = counter_spec(max_restarts=0)
    code = "import sys, adl; print('python is', sys.executable)"
    spec.template["spec"]["containers"][0]["command"] = ["python", "-c", code]
    backend.submit("py", "default", spec)
    wait_for(lambda: _phase(backend, "py") == Phase.SUCCEEDED, timeout=30)
    assert f"python is {sys.executable}" in _log(home, "py")


@pytest.mark.parametrize(
    "argv",
    [
        ["--policy-knob=srpt_power=high"],
        ["--policy-knob=srpt_power=0", "--policy=mod:factory"],
        ["--policy-knob=srpt_power=0", "--policy=sia"],
        ["--policy=no-such-policy"],
    ],
)
def test_the_daemon_refuses_bad_policies_and_knobs(tmp_path, argv) -> None:
    from adl.local.client import DB_NAME
    from adl.local.daemon_main import main

    with pytest.raises(SystemExit) as err:
        main(["--home", str(tmp_path), *argv])
    assert err.value.code == 2
    assert not (tmp_path / DB_NAME).exists()


def test_gpu_slots_are_the_daemons_own_visible_devices(
    daemon_factory, backend, home, monkeypatch
) -> None:
    from adl.local.gpus import detect_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,MIG-4f1c")  # this user's share of the box
    assert detect_gpus() == 2
    daemon_factory(FixedPolicy(), slots=2, gpus=2)
    for name in ("a", "b"):
        backend.submit(name, "default", counter_spec("--steps", "400", "--step-s", "0.05"))
    plans = [home / f"jobs/default/{name}/groups/g1.plan.json" for name in ("a", "b")]
    wait_for(lambda: all(p.exists() for p in plans))
    given = {json.loads(p.read_text())["ranks"][0]["env"]["CUDA_VISIBLE_DEVICES"] for p in plans}
    assert given == {"2", "MIG-4f1c"}


def _devices(home, name: str) -> set[str]:  # type: ignore[no-untyped-def]
    plan = json.loads((home / f"jobs/default/{name}/groups/g1.plan.json").read_text())
    return set(plan["ranks"][0]["env"]["CUDA_VISIBLE_DEVICES"].split(","))


def test_on_a_machine_of_two_gpu_types_no_job_mixes_them(daemon_factory, backend, home) -> None:
    """Issue 33 on one machine: two A100s and a T4 (slots 0 and 2, and 1). The default
    policy places each job on GPUs of one type, and a job restricted to the T4 gets it."""
    a100, t4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
    daemon_factory(None, slots=3, gpus=3, gpu_types=(a100, t4, a100))
    steps = ("--steps", "400", "--step-s", "0.05")
    backend.submit("wide", "default", counter_spec(*steps, hi=3))  # could take all three
    wait_for(lambda: (home / "jobs/default/wide/groups/g1.plan.json").exists())
    assert _devices(home, "wide") in ({"0"}, {"2"}, {"0", "2"}, {"1"})  # never an A100 and the T4
    backend.delete("wide", "default")
    only_t4 = counter_spec(*steps, hi=1).model_copy(update={"gpu_types": [t4]})
    backend.submit("t4", "default", only_t4)
    wait_for(lambda: (home / "jobs/default/t4/groups/g1.plan.json").exists())
    assert _devices(home, "t4") == {"1"}
    assert "local-Tesla-T4" in backend.get("t4", "default").status.allocation


def test_the_daemon_refuses_more_gpus_than_it_may_see(tmp_path, monkeypatch) -> None:
    from adl.local.daemon_main import main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr("adl.local.daemon.Daemon.run", lambda self: pytest.fail("it started"))
    with pytest.raises(SystemExit) as err:
        main(["--home", str(tmp_path), "--gpus", "4"])
    assert err.value.code == 2


def _report_hints(url: str, token: str) -> int:
    """A worker's hints report to ``url``: the HTTP status, -1 when nothing answers."""
    req = urllib.request.Request(
        f"{url}/v1/jobs/default/a/hints",
        method="PUT",
        data=json.dumps({"initBatchSize": 32}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:  # refused, or reset by a server going away (URLError is one too)
        return -1


def test_adopted_workers_still_reach_the_api_after_a_daemon_restart(
    daemon_factory, backend, home
) -> None:
    d1 = daemon_factory(FixedPolicy(), api=True)
    backend.submit("a", "default", counter_spec("--steps", "600", "--step-s", "0.05"))
    wait_for(lambda: _phase(backend, "a") == Phase.RUNNING and "start" in _log(home, "a"))
    env = json.loads((home / "jobs/default/a/groups/g1.plan.json").read_text())["ranks"][0]["env"]
    url, token = env["ADL_API_URL"], Path(env["ADL_TOKEN_FILE"]).read_text().strip()
    assert _report_hints(url, token) == 204
    d1.stop()
    wait_for(lambda: _report_hints(url, token) == -1, timeout=10)
    wait_for(lambda: daemon_pid(home) is None, timeout=10)  # its API first, then its lock
    d2 = daemon_factory(FixedPolicy(), api=True)
    wait_for(lambda: d2.store.get_meta("api_url") == d2.api_url != "")
    assert _phase(backend, "a") == Phase.RUNNING and backend.get("a", "default").status.group == 1
    assert d2.api_url == url  # the adopted group's ADL_API_URL
    assert _report_hints(url, token) == 204


def test_the_api_moves_to_a_free_port_when_the_previous_one_is_taken(
    daemon_factory, caplog
) -> None:
    d1 = daemon_factory(FixedPolicy(), api=True)
    wait_for(lambda: d1.store.get_meta("api_url") == d1.api_url != "")
    old_port = int(d1.api_url.rsplit(":", 1)[1])
    d1.stop()
    with socket.socket() as squatter, caplog.at_level(logging.WARNING, "adl.local"):

        def squat() -> bool:
            try:
                squatter.bind(("127.0.0.1", old_port))
            except OSError:
                return False
            return True

        wait_for(squat, timeout=10)  # once d1 let go of it
        wait_for(lambda: daemon_pid(d1.home) is None, timeout=10)  # and of its lock, after
        squatter.listen()
        d2 = daemon_factory(FixedPolicy(), api=True)
        wait_for(lambda: d2.store.get_meta("api_url") == d2.api_url != "")
        assert d2.api_url != f"http://127.0.0.1:{old_port}"
    assert f"API port {old_port} of the previous daemon is taken" in caplog.text


class _Killed(BaseException):
    """Stands for the daemon's SIGKILL at that point (its thread ends there)."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_group_launched_by_a_daemon_killed_before_recording_it_keeps_its_slots(
    daemon_factory, backend, home
) -> None:
    policy = FixedPolicy()
    policy.replicas.update(a=2, b=0)
    d1 = daemon_factory(policy, slots=2)

    def killed(rec: object) -> None:
        raise _Killed

    d1.store.add_group = killed  # type: ignore[method-assign]
    spec = counter_spec("--steps", "400", "--step-s", "0.05", "--stop-s", "2.0")
    backend.submit("a", "default", spec)
    wait_for(lambda: "start group=1" in _log(home, "a"))
    d2 = daemon_factory(policy, slots=2)  # adopts group 1 and records it
    wait_for(lambda: _phase(backend, "a") == Phase.RUNNING)
    (row,) = d2.store.groups("default/a")
    pid = int((home / "jobs/default/a/groups/g1.pid").read_text().split()[0])
    assert (row.group, row.replicas, row.pid, row.ended) == (1, 2, pid, None)
    policy.replicas.update(a=1, b=1)
    backend.submit("b", "default", counter_spec("--steps", "5"))
    wait_for(lambda: _phase(backend, "b") == Phase.SUCCEEDED, timeout=60)
    a_ended = d2.store.groups("default/a")[0].ended
    assert a_ended is not None and d2.store.groups("default/b")[0].started >= a_ended - 0.2


def test_a_pending_job_that_can_no_longer_fit_is_told_why(daemon_factory, backend) -> None:
    d = daemon_factory(slots=2)
    # submitted to an earlier daemon with more slots (this one would refuse it at submit)
    d.store.add_job("default", "big", counter_spec(lo=3, hi=3))
    wait_for(lambda: any("Unschedulable" in e for e in backend.get("big", "default").events))
    v = backend.get("big", "default")
    assert v.status.phase == Phase.PENDING
    (said,) = [e for e in v.events if "Unschedulable" in e]
    assert said.endswith(
        "Warning Unschedulable: needs 3 slots (minReplicas 3 x 1 per replica) but the local"
        " daemon has 2: it cannot start until it has more"
    )


def test_a_job_that_cannot_be_launched_fails_alone(daemon_factory, backend, home) -> None:
    daemon_factory(FixedPolicy())
    # after the daemon started: at its start it moves aside a job directory no job owns
    blocked = home / "jobs/default/bad/groups"  # a file where its directory must go
    blocked.parent.mkdir(parents=True)
    blocked.write_text("")
    backend.submit("bad", "default", counter_spec("--steps", "5", max_restarts=1))
    backend.submit("good", "default", counter_spec("--steps", "5"))
    wait_for(lambda: _phase(backend, "good") == Phase.SUCCEEDED, timeout=30)
    wait_for(lambda: _phase(backend, "bad") == Phase.FAILED, timeout=30)
    v = backend.get("bad", "default")
    assert v.status.restart_count(RestartCause.FAILURE) == 2
    assert "could not start" in describe_text(v) and str(blocked) in describe_text(v)


def test_one_jobs_error_does_not_stop_the_others(daemon_factory, backend) -> None:
    d = daemon_factory(FixedPolicy())
    observe = d.backend.observe

    def broken_for_bad(rec):  # type: ignore[no-untyped-def]
        if rec.key == "default/bad":
            raise RuntimeError("a bug that only this job hits")
        return observe(rec)

    d.backend.observe = broken_for_bad  # type: ignore[method-assign]
    backend.submit("bad", "default", counter_spec("--steps", "5"))
    backend.submit("good", "default", counter_spec("--steps", "5"))
    wait_for(lambda: _phase(backend, "good") == Phase.SUCCEEDED, timeout=30)
