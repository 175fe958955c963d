"""A sharded job reports the fewest replicas it fits in memory: the policy never runs it on fewer,
neither when it starts nor when a more urgent job would like its GPUs (a shrink)."""

from policy_kit import amdahl, counts, job, nodes_of

from adl.models import Hints
from adl.sched.hints import min_replicas_from_hints
from adl.sched.policy import AdlPolicy


def test_the_hint_raises_the_declared_minimum_and_never_lowers_it() -> None:
    hints = Hints(init_batch_size=32, min_replicas=3)
    assert min_replicas_from_hints(0, hints) == 3
    assert min_replicas_from_hints(5, hints) == 5  # the spec's own minimum is larger
    assert min_replicas_from_hints(2, Hints(init_batch_size=32)) == 2  # no memory need reported
    assert min_replicas_from_hints(1, None) == 1  # no report yet


def _replicas_under_pressure(min_replicas: int) -> list[int]:
    """The sharded job's replicas as waves of urgent, perfectly scaling jobs arrive."""
    nodes = nodes_of(1, gpus=4)
    sharded = job("sharded", 0, min_replicas=min_replicas, max_replicas=4, remaining_s=1e5)
    # the waves come within seconds (ages stay 0): no minimum tenure, which would keep it whole
    policy = AdlPolicy(min_tenure_s=0)
    previous = policy.optimize([sharded], nodes, {})
    seen = [counts(previous)["sharded"]]
    for wave in range(1, 6):
        urgent = [
            job(f"u{wave}-{i}", wave * 10 + i, speedup=amdahl(0.0), remaining_s=50.0, weight=4.0)
            for i in range(2)
        ]
        previous = policy.optimize([sharded, *urgent], nodes, previous)
        seen.append(counts(previous)["sharded"])
    return seen


def test_a_sharded_job_is_never_shrunk_below_the_replicas_it_fits_in() -> None:
    # Without a memory minimum the urgent jobs take GPUs from it: the pressure is real.
    free = _replicas_under_pressure(0)
    assert free[0] == 4 and any(0 < k < 3 for k in free), free
    # With the minimum the hints report, it keeps at least that many, or gives all up (a
    # suspension, not a shrink into a size that runs out of memory).
    need = min_replicas_from_hints(0, Hints(init_batch_size=32, min_replicas=3))
    held = _replicas_under_pressure(need)
    assert held[0] == 4
    assert all(k == 0 or k >= need for k in held), held
