"""The worker supervisor with real child processes (tiny Python programs, no torch)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from adl.supervisor import RankSpec, Supervisor
from tests.waiting import ROOT, wait_for

#: A rank: records that it started, and a SIGTERM (then exits 143, as a checkpointing worker
#: does); then does what its argument says: ``exit:N``, ``ready-exit:N`` (exit N once every rank
#: of the group has its SIGTERM handler in, so a peer's stop finds it ready: without that a busy
#: machine can deliver the stop first, and the peer dies of the signal instead of exiting 143),
#: ``wait`` (for a stop), ``ignore`` (the SIGTERM too, so only SIGKILL ends it), ``pause`` (1 s,
#: then exit 0). The test kit's wait is imported from the checkout.
RANK = (
    f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    + """
import os, signal, time
from pathlib import Path
from tests.waiting import wait_for
folder, action, rank = Path(sys.argv[1]), sys.argv[2], os.environ["R"]
def on_term(signum, frame):
    (folder / f"term{rank}").write_text("")
    sys.exit(143)
signal.signal(signal.SIGTERM, signal.SIG_IGN if action == "ignore" else on_term)
print(f"out of {rank}")
print(f"err of {rank}", file=sys.stderr)
(folder / f"ready{rank}").write_text("")
if action.startswith("ready-exit:"):
    wait_for(lambda: all((folder / f"ready{r}").exists() for r in range(int(os.environ["N"]))))
    sys.exit(int(action[11:]))
if action.startswith("exit:"):
    sys.exit(int(action[5:]))
if action == "pause":
    time.sleep(1.0)  # allowed: outlives its peer's exit, the time a wrong stop would come in
    sys.exit(0)
while True:
    signal.pause()  # until a stop (or SIGKILL)
"""
)


def ranks(folder: Path, *actions: str, log: bool = True) -> list[RankSpec]:
    return [
        RankSpec(
            rank=r,
            argv=[sys.executable, "-c", RANK, str(folder), action],
            env={**os.environ, "R": str(r), "N": str(len(actions))},
            log=str(folder / f"rank{r}.log") if log else None,
        )
        for r, action in enumerate(actions)
    ]


def quiet(specs: list[RankSpec], grace_s: float = 30.0) -> Supervisor:
    return Supervisor(specs, grace_s=grace_s, to_terminal=False)


def test_exit_codes_are_returned_and_output_goes_to_the_logs(tmp_path: Path) -> None:
    outcome = quiet(ranks(tmp_path, "exit:0", "exit:0", "exit:0")).run()
    assert outcome.returncodes == [0, 0, 0] and outcome.exit_code == 0
    assert outcome.failure == "" and not outcome.killed
    for r in range(3):
        text = (tmp_path / f"rank{r}.log").read_text()
        assert f"out of {r}" in text and f"err of {r}" in text


def test_a_failed_rank_stops_its_peers(tmp_path: Path) -> None:
    start = time.monotonic()
    outcome = quiet(ranks(tmp_path, "wait", "ready-exit:3", "wait")).run()
    assert time.monotonic() - start < 30  # SIGTERM, not the grace period, ended the peers
    assert outcome.returncodes == [143, 3, 143]
    assert (tmp_path / "term0").exists() and (tmp_path / "term2").exists()
    assert outcome.exit_code == 3 and outcome.first_failed == 1
    assert outcome.failure == "rank 1 exited with code 3" and not outcome.killed


def test_a_rank_that_stopped_on_its_own_stops_its_peers(tmp_path: Path) -> None:
    """Exit 143 without a stop from us (its watchdog expired, or it saw the stop file): the
    group cannot go on with a rank missing, so the others are stopped too; no failure."""
    outcome = quiet(ranks(tmp_path, "ready-exit:143", "wait")).run()
    assert outcome.returncodes == [143, 143] and (tmp_path / "term1").exists()
    assert outcome.exit_code == 143 and outcome.failure == "" and outcome.first_failed is None


def test_a_rank_that_finished_leaves_its_peers_running(tmp_path: Path) -> None:
    outcome = quiet(ranks(tmp_path, "exit:0", "pause")).run()
    assert outcome.returncodes == [0, 0] and not (tmp_path / "term1").exists()


def test_a_rank_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    start = time.monotonic()
    outcome = quiet(ranks(tmp_path, "exit:5", "ignore"), grace_s=0.5).run()
    assert time.monotonic() - start < 30
    assert outcome.returncodes == [5, -signal.SIGKILL] and outcome.killed
    # the group's code names the cause, not the peer killed because of it
    assert outcome.exit_code == 5 and outcome.codes == [5, 137]


def test_a_rank_that_cannot_start_is_the_shells_code_and_stops_the_started(
    tmp_path: Path,
) -> None:
    specs = ranks(tmp_path, "wait", "wait", "wait")
    specs[1] = RankSpec(1, [str(tmp_path / "missing")], {}, log=str(tmp_path / "rank1.log"))
    outcome = quiet(specs).run()
    # rank 0 got SIGTERM (maybe before its handler was in: -15); rank 2 was never started
    assert outcome.codes == [143, 127, 127] and not (tmp_path / "ready2").exists()
    assert outcome.exit_code == 127 and "No such file" in outcome.start_error
    assert "cannot start" in (tmp_path / "rank1.log").read_text()


DRIVER = """
import json, os, sys
from adl.supervisor import RankSpec, Supervisor
folder, rank = sys.argv[1], sys.argv[2]
specs = [RankSpec(r, [sys.executable, "-c", rank, folder, "wait"], {**os.environ, "R": str(r)})
         for r in range(2)]
outcome = Supervisor(specs, grace_s=30, to_terminal=False).run()
print(json.dumps(outcome.returncodes))
"""


def test_sigterm_to_the_supervisor_is_forwarded_to_every_rank(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), RANK],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        ready = [tmp_path / "ready0", tmp_path / "ready1"]
        wait_for(lambda: all(p.exists() for p in ready), 60, "both ranks ready")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert json.loads(out.splitlines()[-1]) == [143, 143]
    assert (tmp_path / "term0").exists() and (tmp_path / "term1").exists()


def test_terminal_output_is_prefixed_by_rank(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    specs = ranks(tmp_path, "exit:0", "exit:0", log=False)
    outcome = Supervisor(specs, to_terminal=True, prefix=True, out=out, err=err).run()
    assert outcome.returncodes == [0, 0]
    assert sorted(out.getvalue().splitlines()) == ["[rank0]: out of 0", "[rank1]: out of 1"]
    assert sorted(err.getvalue().splitlines()) == ["[rank0]: err of 0", "[rank1]: err of 1"]


def test_tee_writes_plain_lines_to_the_log_and_prefixed_ones_to_the_terminal(
    tmp_path: Path,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    sup = Supervisor(ranks(tmp_path, "exit:0"), to_terminal=True, prefix=True, out=out, err=err)
    outcome = sup.run()
    assert outcome.returncodes == [0]
    assert out.getvalue() == "[rank0]: out of 0\n"
    assert sorted((tmp_path / "rank0.log").read_text().splitlines()) == ["err of 0", "out of 0"]


def test_a_spawner_may_start_a_rank_its_own_way(tmp_path: Path) -> None:
    used: list[int] = []

    def spawn(spec: RankSpec) -> subprocess.Popen[bytes] | None:
        if spec.rank != 1:
            return None  # the usual way
        used.append(spec.rank)
        ready = tmp_path / "ready0"  # rank 0's stop handler is in: see ready-exit in RANK
        code = f"import pathlib, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        code += "from tests.waiting import wait_for\n"
        code += f"wait_for(pathlib.Path({str(ready)!r}).exists)\nraise SystemExit(7)"
        return subprocess.Popen([sys.executable, "-c", code])

    outcome = Supervisor(ranks(tmp_path, "wait", "x"), to_terminal=False, spawn=spawn).run()
    assert used == [1] and outcome.returncodes == [143, 7]
