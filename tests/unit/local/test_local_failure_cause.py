"""Which rank a failed job's reason names when several ranks of its group ended badly.

A rank that fails takes its group down: the shim's supervisor SIGTERMs the others, and a rank
without a handler for it dies of the signal. That death is the teardown's doing, so the job's
reason must name the rank that failed first, whatever its rank number."""

from __future__ import annotations

import sys

from local_kit import FixedPolicy, counter_spec

from adl.local.client import LocalBackend
from adl.models import Phase
from tests.waiting import ROOT, wait_for

#: rank 0 waits (default SIGTERM action: it dies of the signal); rank 1 fails once rank 0 is up
SCRIPT = (
    f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    + """\
import os, pathlib, signal
from tests.waiting import wait_for
flag = pathlib.Path(os.environ["ADL_CHECKPOINT_DIR"]) / "rank0-up"
if os.environ["ADL_RANK"] == "0":
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()
    signal.pause()  # until the teardown's SIGTERM
wait_for(flag.exists, 60)
print("rank 1 gives up", flush=True)
sys.exit(3)
"""
)


def test_the_reason_names_the_rank_that_failed_not_a_peer_stopped_because_of_it(
    daemon_factory, backend: LocalBackend
) -> None:
    policy = FixedPolicy()
    policy.replicas["two"] = 2
    daemon_factory(policy)
    spec = counter_spec(lo=2, hi=2, max_restarts=0)
    spec.template["spec"]["containers"][0]["command"] = [sys.executable, "-c", SCRIPT]
    backend.submit("two", "default", spec)
    wait_for(lambda: backend.get("two", "default").status.phase == Phase.FAILED, timeout=60)
    st = backend.get("two", "default").status
    assert st.reason == "WorkerFailed", (st.reason, st.message)
    assert "rank 1 exited with code 3: rank 1 gives up" in st.message, st.message
    assert "signal" not in st.message
