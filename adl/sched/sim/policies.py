"""Policies the simulator can replay by name (CLI and benchmarks share this one table)."""

from __future__ import annotations

from collections.abc import Mapping

from adl.sched.types import Policy

#: names accepted by ``adl simulate --policy`` and ``benchmarks/sched_replay.py --policies``
POLICY_NAMES: tuple[str, ...] = ("adl", "pollux", "tiresias", "optimus", "fifo")


def make_policy(name: str, seed: int = 0, knobs: Mapping[str, float] | None = None) -> Policy:
    """A fresh policy instance (policies keep per-run state, so never share one across runs).

    ``knobs`` set the adl policy's constants (:mod:`adl.sched.policy_knobs`); the baselines
    have none, and giving them knobs is an error rather than silently ignored."""
    if knobs and name != "adl":
        raise ValueError(f"policy knobs apply to the adl policy only, not {name!r}")
    if name == "adl":
        from adl.sched.policy import AdlPolicy

        return AdlPolicy(seed=seed, **dict(knobs or {}))
    if name == "pollux":
        from adl.sched.baselines import PolluxObjectivePolicy

        return PolluxObjectivePolicy(seed=seed)
    if name == "tiresias":
        from adl.sched.baselines import TiresiasPolicy

        return TiresiasPolicy(seed=seed)
    if name == "optimus":
        from adl.sched.baselines import OptimusOraclePolicy

        return OptimusOraclePolicy(seed=seed)
    if name == "fifo":
        from adl.sched.baselines import FifoPolicy

        return FifoPolicy(seed=seed)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


def rounds_on_events(name: str) -> bool:
    """Whether the policy's driver also runs a round when a job is submitted or finishes.

    adl's operator and local daemon do (its round takes milliseconds, so a new job need not
    wait for the next one); the baselines are replayed as their published figures were
    produced, a round every 60 s only."""
    return name == "adl"


def uses_oracle(name: str) -> bool:
    """Optimus+Oracle reads remaining work from the traces by definition (``--hide-remaining``
    does not apply to it)."""
    return name == "optimus"
