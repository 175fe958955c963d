"""Policy knobs: NAME=VALUE parsing, ranges, and who may take them."""

from __future__ import annotations

import pytest

from adl.sched.policy import AdlPolicy
from adl.sched.policy_knobs import Knobs, knob_names, parse_knobs
from adl.sched.sim.policies import make_policy


def test_parse_pairs_and_comma_lists_later_values_win() -> None:
    knobs = parse_knobs(["srpt_power=0.25", "fairness=0, dp=0", "srpt_power=1"])
    assert knobs == {"srpt_power": 1.0, "fairness": 0.0, "dp": False}
    assert knobs["dp"] is False  # a switch is a bool, not 0.0
    assert parse_knobs([]) == {} and parse_knobs([""]) == {}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("srpt_pwr=1", "unknown policy knob 'srpt_pwr'; choose from ramp_factor, srpt_power"),
        ("srpt_power", "expected NAME=VALUE"),
        ("=1", "expected NAME=VALUE"),
        ("srpt_power=high", "'high' is not a number"),
        ("fairness=-0.5", "fairness must be in [0, inf), got -0.5"),
        ("ramp_factor=0.5", "ramp_factor must be in [1, inf)"),
        ("max_restart_penalty=1", "max_restart_penalty must be in [0, 1), got 1.0"),
        ("restart_horizon_s=0", "restart_horizon_s must be in [0.001, inf)"),
        ("srpt_power=inf", "srpt_power must be in [0, inf), got inf"),
        ("srpt_power=nan", "srpt_power must be in [0, inf), got nan"),
    ],
)
def test_bad_knobs_fail_with_the_valid_choices(item: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_knobs([item])
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("raw", "want"), [("1", True), ("true", True), ("On", True), ("0", False), ("off", False)]
)
def test_switches_are_on_or_off(raw: str, want: bool) -> None:
    got = parse_knobs([f"dp={raw}", f"tenure_all={raw}"])
    assert got == {"dp": want, "tenure_all": want}
    knobs = Knobs(**got)  # type: ignore[arg-type]
    assert knobs.dp is want and knobs.tenure_all is want


def test_a_switch_takes_one_or_zero_only() -> None:
    assert Knobs(dp=0).dp is False and Knobs(optimistic=1.0).optimistic is True  # 0/1 as written
    with pytest.raises(ValueError, match="policy knob dp is on or off"):
        Knobs(dp=0.5)
    with pytest.raises(ValueError, match="policy knob aging_best is on or off: 1/0, true/false"):
        parse_knobs(["aging_best=2"])
    assert {n for n in knob_names() if isinstance(getattr(Knobs(), n), bool)} == {
        "optimistic",
        "dp",
        "use_predicted_remaining",
        "aging_best",
        "tenure_all",
        "quiet_growth",
        "long_floor_catchup",
    }


def test_defaults_are_valid_and_every_knob_is_named() -> None:
    assert knob_names()[:3] == ["ramp_factor", "srpt_power", "fairness"]
    assert set(knob_names()) == set(vars(Knobs()))
    with pytest.raises(ValueError, match="must be a number"):
        Knobs(srpt_power="0.5")  # type: ignore[arg-type]


def test_only_the_adl_policy_takes_knobs() -> None:
    policy = make_policy("adl", knobs={"srpt_power": 0.0})
    assert isinstance(policy, AdlPolicy) and policy.knobs.srpt_power == 0.0
    with pytest.raises(ValueError, match="adl policy only"):
        make_policy("tiresias", knobs={"srpt_power": 0.0})
    assert make_policy("tiresias", knobs={}) is not None
