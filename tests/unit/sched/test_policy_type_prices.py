"""``type_prices`` (issue 33, on by default): the replica-count knapsack values every count
on the type where it is worth most as if that type had room, so on a mixed cluster two jobs
that both prefer the fast GPUs are sized for them, and the one placed first takes them.
Prices on the over-asked type let the job that loses least on the slow type turn to it."""

import pytest
from policy_kit import job

from adl.sched.policy import AdlPolicy
from adl.sched.policy_knobs import Knobs
from adl.sched.policy_type_prices import PRICE_STEP, over_asked, raised_prices
from adl.sched.types import NodeInfo

FAST, SLOW = "Tesla-V100", "Tesla-K80"
NODES = [NodeInfo("v0", 4, gpu_type=FAST), NodeInfo("k0", 4, gpu_type=SLOW)]


def _jobs():  # type: ignore[no-untyped-def]
    # "even" runs nearly as fast on the slow type, "picky" at a tenth of its fast speed there;
    # "even" came first, so the placement after the knapsack serves it first
    even = job("even", 0, max_replicas=4, remaining_s=50_000.0, type_speed={FAST: 1.0, SLOW: 0.9})
    picky = job("picky", 1, max_replicas=4, remaining_s=50_000.0, type_speed={FAST: 1.0, SLOW: 0.1})
    return [even, picky]


def test_with_prices_the_fast_gpus_go_to_the_job_that_gains_most_from_them() -> None:
    jobs = _jobs()
    plain = AdlPolicy(type_prices=0)
    priced = AdlPolicy()  # on by default
    before = plain.optimize(jobs, NODES, {})
    after = priced.optimize(jobs, NODES, {})
    assert set(before["picky"]) == {"k0"}  # the defaults: sized for V100s, placed on K80s
    assert set(after["picky"]) == {"v0"} and set(after["even"]) == {"k0"}
    # worth more by the policy's own (unpriced) objective: prices only add candidates
    assert plain.objective(jobs, NODES, {}, after) > 1.5 * plain.objective(jobs, NODES, {}, before)


def test_one_type_no_re_solve_changes_anything() -> None:
    nodes = [NodeInfo("n0", 4), NodeInfo("n1", 4)]
    jobs = [job(n, i, max_replicas=8, remaining_s=50_000.0 * (i + 1)) for i, n in enumerate("abc")]
    assert AdlPolicy().optimize(jobs, nodes, {}) == AdlPolicy(type_prices=0).optimize(
        jobs, nodes, {}
    )


def test_prices_rise_on_the_over_asked_types_only() -> None:
    assert over_asked({FAST: 8, SLOW: 2}, {FAST: 4, SLOW: 4}) == {FAST: 4}
    assert over_asked({FAST: 4}, {FAST: 4}) == {}
    prices = raised_prices({}, {FAST: 4}, unit=2.0)
    assert prices == {FAST: PRICE_STEP * 2.0}
    assert raised_prices(prices, {FAST: 1}, unit=2.0) == {FAST: 2 * PRICE_STEP * 2.0}


@pytest.mark.parametrize("bad", [-1.0, 9.0])
def test_the_re_solves_are_bounded(bad: float) -> None:
    with pytest.raises(ValueError, match="type_prices"):
        Knobs(type_prices=bad)
