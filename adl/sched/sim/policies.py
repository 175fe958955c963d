"""Policies the simulator can replay by name: a view of ``adl.sched.registry`` (the one table
the CLI, the benchmarks, the operator and the local daemon share)."""

from __future__ import annotations

from adl.sched.registry import entry, make_policy, names

__all__ = ["POLICY_NAMES", "make_policy", "rounds_on_events", "uses_oracle"]

#: names accepted by ``adl simulate --policy`` and ``benchmarks/sched_replay.py --policies``
POLICY_NAMES: tuple[str, ...] = names()


def rounds_on_events(name: str) -> bool:
    """Whether the policy's driver also runs a round when a job is submitted or finishes."""
    return entry(name).rounds_on_events


def uses_oracle(name: str) -> bool:
    """Optimus+Oracle reads remaining work from the traces by definition (``--hide-remaining``
    does not apply to it)."""
    return entry(name).uses_oracle
