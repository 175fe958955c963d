"""Every scheduling policy by name, with what it can do (like torch's rendezvous handler
registry): the simulator, the operator and the local daemon all build policies here, so a
policy is added in one place and nobody checks names to learn what a policy supports.

A ``PolicyEntry`` declares its capabilities instead: whether it takes adl's knobs
(``adl.sched.policy_knobs``), whether it is fast enough for a round on every arrival and
completion, and whether it reads jobs' true remaining work (an oracle baseline).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from adl.sched.types import Policy


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    target: str  # "module:Class", imported only when the policy is built
    takes_knobs: bool = False
    #: cheap enough for a round whenever a job arrives or ends (adl: milliseconds); baselines
    #: replay as their figures were published, a round per interval only
    rounds_on_events: bool = False
    uses_oracle: bool = False  # reads true remaining work from the traces by definition

    def build(self, seed: int = 0, knobs: Mapping[str, float] | None = None) -> Policy:
        """A fresh instance (policies keep per-run state: never share one across runs)."""
        if knobs and not self.takes_knobs:
            raise ValueError(f"policy knobs apply to the adl policy only, not {self.name!r}")
        module, _, attr = self.target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        extra = dict(knobs or {}) if self.takes_knobs else {}
        if self.custom and "seed" not in inspect.signature(cls).parameters:
            own: Policy = cls()  # a policy of one's own need not take a seed
            return own
        policy: Policy = cls(seed=seed, **extra)
        return policy

    @property
    def custom(self) -> bool:
        """A policy named by its ``module:Class`` rather than registered under a name."""
        return self.name == self.target


_REGISTRY: dict[str, PolicyEntry] = {}


def register(entry: PolicyEntry) -> None:
    if entry.name in _REGISTRY:
        raise ValueError(f"policy {entry.name!r} is registered already")
    _REGISTRY[entry.name] = entry


def entry(name: str) -> PolicyEntry:
    """The registered policy called ``name``, or a policy of one's own named by its
    ``module:Class`` (it declares no capabilities: no knobs, a round per interval only)."""
    if ":" in name:
        module, _, attr = name.partition(":")
        if not module or not attr:
            raise ValueError(f"policy {name!r}: expected a registered name or module:Class")
        return PolicyEntry(name, name)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r}; choose one of {', '.join(names())}, or module:Class"
        ) from None


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def make_policy(name: str, seed: int = 0, knobs: Mapping[str, float] | None = None) -> Policy:
    """A fresh instance of the policy called ``name``."""
    return entry(name).build(seed, knobs)


def policy_factory(
    name: str = "adl", seed: int = 0, knobs: Mapping[str, float] | None = None
) -> Callable[[], Policy]:
    """A factory of fresh instances (one per operator or daemon run), checked now."""
    chosen = entry(name)
    if knobs and not chosen.takes_knobs:
        raise ValueError(f"policy knobs apply to the adl policy only, not {name!r}")
    return partial(chosen.build, seed, dict(knobs or {}))


register(PolicyEntry("adl", "adl.sched.policy:AdlPolicy", takes_knobs=True, rounds_on_events=True))
register(PolicyEntry("sia", "adl.sched.baselines:SiaPolicy"))
register(PolicyEntry("pollux", "adl.sched.baselines:PolluxPolicy"))
register(PolicyEntry("pollux-objective", "adl.sched.baselines:PolluxObjectivePolicy"))
register(PolicyEntry("tiresias", "adl.sched.baselines:TiresiasPolicy"))
register(PolicyEntry("optimus", "adl.sched.baselines:OptimusOraclePolicy", uses_oracle=True))
register(PolicyEntry("fifo", "adl.sched.baselines:FifoPolicy"))
# peers on mixed GPU-type clusters (issue 33): Gavel's max-min fairness over types, and Pollux
# as published, blind to types
register(PolicyEntry("gavel", "adl.sched.baselines:GavelPolicy"))
register(PolicyEntry("pollux-agnostic", "adl.sched.baselines:PolluxTypeAgnosticPolicy"))
