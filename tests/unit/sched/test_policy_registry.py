"""The policy registry every backend builds its policy from: registered names with their
capabilities, and a policy of one's own named by ``module:Class``."""

from __future__ import annotations

import pytest

from adl.sched import registry
from adl.sched.policy import AdlPolicy
from tests.fakes import FixedPolicy


def test_a_registered_name_builds_a_fresh_instance_each_time() -> None:
    factory = registry.policy_factory("adl", knobs={"srpt_power": 0.25})
    first, second = factory(), factory()
    assert isinstance(first, AdlPolicy) and first is not second


def test_a_policy_of_ones_own_is_named_by_module_and_class() -> None:
    chosen = registry.entry("tests.fakes:FixedPolicy")
    assert chosen.custom and not chosen.takes_knobs and not chosen.rounds_on_events
    policy = chosen.build(seed=3)  # FixedPolicy takes no seed: built without one
    assert isinstance(policy, FixedPolicy)
    assert not registry.entry("adl").custom
    assert "tests.fakes:FixedPolicy" not in registry.names()  # not registered by being built


@pytest.mark.parametrize(
    ("name", "knobs", "message"),
    [
        ("nope", None, "unknown policy 'nope'; choose one of adl, "),
        (":Policy", None, "expected a registered name or module:Class"),
        ("sia", {"srpt_power": 0.25}, "policy knobs apply to the adl policy only"),
        ("tests.fakes:FixedPolicy", {"srpt_power": 0.25}, "apply to the adl policy only"),
    ],
)
def test_bad_names_and_knobs_are_refused_when_the_factory_is_made(
    name: str, knobs: dict[str, float] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        registry.policy_factory(name, knobs=knobs)
