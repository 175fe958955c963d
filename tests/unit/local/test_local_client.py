"""The local backend as the CLI sees it: what it accepts at submit."""

from __future__ import annotations

import pytest
from local_kit import counter_spec

from adl.jobs_api import BackendError


def test_a_job_that_can_never_fit_is_refused_at_submit(daemon_factory, backend) -> None:
    daemon_factory(slots=2)
    with pytest.raises(BackendError) as err:
        backend.submit("big", "default", counter_spec(lo=3, hi=3))
    assert str(err.value) == (
        "job default/big needs 3 slots (minReplicas 3 x 1 per replica) but the local daemon"
        " has 2: lower minReplicas or give the daemon more slots"
    )
    assert backend.list() == []
    backend.submit("fits", "default", counter_spec("--steps", "1", lo=2, hi=3))
