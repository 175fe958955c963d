"""``min_type_speed`` (issue 33, opt-in): a job does not use a GPU type that runs it at less
than that fraction of its fastest type, so it waits for its fast GPUs instead of a round trip
through slow ones; a job that loses less on the slow type still uses it."""

import pytest
from policy_kit import job

from adl.sched.policy import AdlPolicy
from adl.sched.policy_knobs import Knobs
from adl.sched.policy_type_floor import fast_enough
from adl.sched.types import NodeInfo

FAST, SLOW = "Tesla-V100", "Tesla-K80"


def _cluster() -> list[NodeInfo]:
    return [NodeInfo("v0", 4, gpu_type=FAST), NodeInfo("k0", 4, gpu_type=SLOW)]


def _placed(alloc, name: str) -> set[str]:
    return set(alloc.get(name) or [])


@pytest.mark.parametrize(("slow_speed", "uses_slow"), [(1 / 6, False), (0.3, True)])
def test_a_job_pushed_off_its_fast_gpus_takes_the_slow_ones_only_where_they_are_fast_enough(
    slow_speed: float, uses_slow: bool
) -> None:
    nodes = _cluster()
    # the fast node is held by a job that may not be preempted; "long" waits for GPUs
    holder = job("holder", 0, max_replicas=4, preemptible=False)
    long = job(
        "long",
        1,
        max_replicas=4,
        remaining_s=300_000.0,
        type_speed={FAST: 1.0, SLOW: slow_speed},
    )
    previous = {"holder": ["v0"] * 4}
    default = AdlPolicy().optimize([holder, long], nodes, previous)
    floored = AdlPolicy(min_type_speed=0.2).optimize([holder, long], nodes, previous)
    assert _placed(default, "long") == {"k0"}  # without the floor, anything beats waiting
    assert _placed(floored, "long") == ({"k0"} if uses_slow else set())


def test_the_floor_never_leaves_a_job_without_its_fastest_type() -> None:
    assert fast_enough({FAST: 1.0, SLOW: 0.1}, 0.2) == {FAST: 1.0}
    assert fast_enough({FAST: 1.0, SLOW: 0.1}, 0.0) == {FAST: 1.0, SLOW: 0.1}
    assert fast_enough({"": 1.0}, 0.9) == {"": 1.0}  # one type: nothing left out
    assert fast_enough({SLOW: 0.1}, 0.5) == {SLOW: 0.1}  # would leave none: all kept


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2.0])
def test_the_floor_is_a_fraction_below_one(bad: float) -> None:
    with pytest.raises(ValueError, match="min_type_speed"):
        Knobs(min_type_speed=bad)
