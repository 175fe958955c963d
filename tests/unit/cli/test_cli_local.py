"""``adl local up/status/down`` with a real daemon process, and the default backend choice
(local unless a kube context is configured)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from adl.cli.backends import BackendKind, get_backend, resolve_kind
from adl.cli.main import app
from adl.jobs_api import BackendError
from adl.local.client import LocalBackend, daemon_pid
from adl.local.shim import proc_start_ticks

runner = CliRunner()


def adl(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def test_local_up_status_down(adl_home: Path) -> None:
    code, out = adl("local", "status")
    assert code == 0 and "stopped" in out

    code, out = adl("local", "up", "--slots", "3", "--round-s", "1")
    assert code == 0 and "adl daemon started" in out and str(adl_home) in out
    pid = daemon_pid(adl_home)
    assert pid is not None and pid > 0 and proc_start_ticks(pid) is not None

    code, out = adl("local", "status")
    assert code == 0
    assert f"running (pid {pid})" in out
    assert "slots:   3" in out
    assert "api:     http://127.0.0.1:" in out

    code, out = adl("local", "up")
    assert code == 0 and "already running" in out and daemon_pid(adl_home) == pid

    code, out = adl("local", "down")
    assert code == 0 and "adl daemon stopped" in out
    assert daemon_pid(adl_home) is None
    code, out = adl("local", "down")
    assert code == 0 and "no adl daemon running" in out


def test_a_daemon_started_on_demand_keeps_the_settings_of_the_last_up(adl_home: Path) -> None:
    code, out = adl("local", "up", "--slots", "2", "--round-s", "0.7", "--no-prewarm")
    assert code == 0, out
    assert adl("local", "down")[0] == 0
    # the next submit starts a daemon like that one: it has 2 slots, so --min 3 never fits
    code, out = adl("submit", "big", "--min", "3", "--max", "4", "--", "python", "-c", "1")
    assert code == 1 and "needs 3 slots" in out and "has 2" in out, out
    pid = daemon_pid(adl_home)
    assert pid is not None and pid > 0
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--round-s" in argv and b"0.7" in argv and b"--no-prewarm" in argv
    code, out = adl("local", "status")
    assert "slots:   2" in out and "up with: --slots 2 --round-s 0.7 --no-prewarm" in out
    # an explicit up replaces them (here: with the defaults)
    assert adl("local", "down")[0] == 0
    assert adl("local", "up")[0] == 0
    code, out = adl("local", "status")
    assert "up with: defaults" in out
    assert adl("local", "down")[0] == 0
    assert adl("submit", "small", "--max", "1", "--", "python", "-c", "1")[0] == 0
    pid = daemon_pid(adl_home)
    assert pid is not None and pid > 0
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--slots" not in argv and b"--no-prewarm" not in argv


@pytest.mark.parametrize("under", [False, True])
@pytest.mark.parametrize(
    "command",
    [["ls"], ["submit", "x", "--", "python", "-c", "1"], ["describe", "x"], ["logs", "x"],
     ["delete", "x"], ["top", "--once"], ["local", "up"], ["local", "up", "--foreground"]],
)  # fmt: skip
def test_a_home_that_is_a_file_is_one_error_line(
    adl_home: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], under: bool
) -> None:
    adl_home.parent.mkdir(parents=True, exist_ok=True)
    adl_home.write_text("")
    home = adl_home / "sub" if under else adl_home
    monkeypatch.setenv("ADL_HOME", str(home))
    result = runner.invoke(app, command)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.exit_code == 1, out
    assert result.exception is None or isinstance(result.exception, SystemExit), out
    why = "a file is in its path" if under else "it is a file, not a directory"
    assert f"error: cannot use {home} as the adl state directory ($ADL_HOME, --home): {why}" in out


def test_a_corrupt_state_database_is_one_error_line_naming_it(adl_home: Path) -> None:
    adl_home.mkdir()
    db = adl_home / "state.db"
    db.write_bytes(b"not sqlite at all " * 512)

    def squeezed(text: str) -> str:
        return "".join(text.split())  # the console wraps long lines, even inside a word

    for command in (["ls"], ["local", "status"], ["local", "up"]):
        code, out = adl(*command)
        assert code == 1, (command, out)
        assert "Traceback" not in out and "see " not in out, (command, out)
        said = squeezed(out)
        assert squeezed(f"{db} is not a readable adl state database") in said, (command, out)
        assert squeezed(f"move it aside (mv {db} {db}.corrupt)") in said, (command, out)
    assert daemon_pid(adl_home) is None


def test_local_up_with_an_explicit_home(tmp_path: Path, adl_home: Path) -> None:
    other = tmp_path / "elsewhere"
    try:
        code, out = adl("local", "up", "--home", str(other), "--slots", "2")
        assert code == 0 and str(other) in out
        assert daemon_pid(other) is not None
        assert daemon_pid(adl_home) is None  # $ADL_HOME untouched
    finally:
        assert adl("local", "down", "--home", str(other))[0] == 0
    assert daemon_pid(other) is None


def _kubeconfig(tmp_path: Path, context: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(f"apiVersion: v1\nkind: Config\ncurrent-context: {context}\n")
    return path


def test_local_is_the_default_without_a_kube_context(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}  # no ~/.kube/config there
    assert resolve_kind(None, env) is BackendKind.LOCAL
    env["KUBECONFIG"] = str(_kubeconfig(tmp_path, '""'))
    assert resolve_kind(None, env) is BackendKind.LOCAL  # a kubeconfig without a context


def test_a_kube_context_or_the_flag_picks_the_backend(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "KUBECONFIG": str(_kubeconfig(tmp_path, "kind-adl"))}
    assert resolve_kind(None, env) is BackendKind.K8S
    assert resolve_kind("local", env) is BackendKind.LOCAL
    assert resolve_kind(None, {**env, "ADL_BACKEND": "local"}) is BackendKind.LOCAL
    assert resolve_kind(None, {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is (
        BackendKind.K8S
    )
    with pytest.raises(BackendError, match="unknown backend 'nomad'"):
        resolve_kind("nomad", env)


def test_get_backend_returns_the_local_backend_on_adl_home(adl_home: Path) -> None:
    backend = get_backend()
    assert isinstance(backend, LocalBackend)
    assert backend.home == adl_home


def test_local_up_no_prewarm_reaches_the_daemon(adl_home: Path) -> None:
    try:
        code, out = adl("local", "up", "--no-prewarm")
        assert code == 0, out
        pid = daemon_pid(adl_home)
        assert pid is not None and pid > 0
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"--no-prewarm" in argv
    finally:
        adl("local", "down")


def test_local_up_policy_knobs_reach_the_daemons_policy(adl_home: Path) -> None:
    try:
        code, out = adl("local", "up", "--policy-knob", "srpt_power=0.25,fairness=0")
        assert code == 0, out
        pid = daemon_pid(adl_home)
        assert pid is not None and pid > 0
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"--policy-knob=srpt_power=0.25" in argv and b"--policy-knob=fairness=0.0" in argv
        log = (adl_home / "daemon.log").read_text()
        assert "adl policy knobs: {'srpt_power': 0.25, 'fairness': 0.0}" in log
        code, out = adl("local", "up", "--policy-knob", "fairness=1")
        assert code == 0 and "apply from the next start" in out
    finally:
        adl("local", "down")


def test_local_up_runs_the_policy_it_names_from_the_registry(adl_home: Path) -> None:
    try:
        code, out = adl("local", "up", "--policy", "tiresias")
        assert code == 0, out
        pid = daemon_pid(adl_home)
        assert pid is not None and pid > 0
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"--policy=tiresias" in argv
        assert "scheduling policy: tiresias" in (adl_home / "daemon.log").read_text()
        code, out = adl("local", "status")
        assert "up with: --policy=tiresias" in out
    finally:
        adl("local", "down")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policy", "themis"], "unknown policy 'themis'"),
        (["--policy", "sia", "--policy-knob", "fairness=1"], "apply to the adl policy only"),
    ],
)
def test_local_up_refuses_a_bad_policy_before_starting(
    adl_home: Path, flags: list[str], message: str
) -> None:
    code, out = adl("local", "up", *flags)
    assert code == 2 and message in out, out
    assert daemon_pid(adl_home) is None


@pytest.mark.parametrize(
    ("knob", "message"),
    [("srpt_pwr=1", "unknown policy knob 'srpt_pwr'"), ("fairness=-1", "must be in [0, inf)")],
)
def test_local_up_refuses_a_bad_policy_knob_before_starting(
    adl_home: Path, knob: str, message: str
) -> None:
    code, out = adl("local", "up", "--policy-knob", knob)
    assert code == 2 and message in out  # a usage error, like any other bad flag
    assert daemon_pid(adl_home) is None
