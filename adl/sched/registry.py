"""Every scheduling policy by name, with what it can do (like torch's rendezvous handler
registry): the simulator, the operator and the local daemon all build policies here, so a
policy is added in one place and nobody checks names to learn what a policy supports.

A ``PolicyEntry`` declares its capabilities, and the registry is the one place they are
declared: the callers (the round, the simulator, ``adl simulate``) ask the entry of a policy
(``entry_of``) and call a capability's method only on a policy whose entry declares it. Nobody
probes a policy for a method or an attribute; a policy of one's own (``module:Class``) declares
none, whatever methods it has.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import cast

from adl.sched.decisions import ExplainsHolds
from adl.sched.types import JobMode, Policy, RanksByPredictedRemaining


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    #: "module:Class", imported only when the policy is built; the module that defines the
    #: class, so that ``entry_of`` knows a policy by its class without importing anything
    target: str
    takes_knobs: bool = False
    #: cheap enough for a round whenever a job arrives or ends (adl: milliseconds); baselines
    #: replay as their figures were published, a round per interval only
    rounds_on_events: bool = False
    uses_oracle: bool = False  # reads true remaining work from the traces by definition
    #: is handed the simulator's trace knowledge before a replay (``bind_oracle(oracle)``:
    #: Optimus+Oracle its jobs' step times, Gavel their per-type throughputs)
    binds_oracle: bool = False
    #: how the simulator replays its jobs (``adl.sched.types.JobMode``)
    job_mode: JobMode = JobMode.ADAPTIVE
    #: may rank jobs of undeclared length by the driver's prediction of their remaining work
    #: (``RanksByPredictedRemaining``: the instance says whether it does, after its knobs)
    ranks_by_prediction: bool = False
    #: can say why it kept a job at its size beside free GPUs (``ExplainsHolds``)
    explains_holds: bool = False

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


def entry_of(policy: object) -> PolicyEntry:
    """The entry a policy instance was registered under: its class's, or that of the nearest
    registered class it derives from (a subclass of ``AdlPolicy`` is an adl policy); for any
    other class, an entry of its own that declares no capability."""
    by_target = {e.target: e for e in _REGISTRY.values()}
    for cls in type(policy).__mro__:
        found = by_target.get(f"{cls.__module__}:{cls.__qualname__}")
        if found is not None:
            return found
    path = f"{type(policy).__module__}:{type(policy).__qualname__}"
    return PolicyEntry(path, path)


def prediction_ranker(
    policy: Policy, entry: PolicyEntry | None = None
) -> RanksByPredictedRemaining | None:
    """The policy as one that may rank by predicted remaining work, if its entry (``entry``,
    else ``entry_of(policy)``) says it can; None otherwise."""
    if not (entry or entry_of(policy)).ranks_by_prediction:
        return None
    return cast(RanksByPredictedRemaining, policy)


def holds_explainer(policy: Policy, entry: PolicyEntry | None = None) -> ExplainsHolds | None:
    """The policy as one that explains its holds, if its entry says it can; None otherwise."""
    if not (entry or entry_of(policy)).explains_holds:
        return None
    return cast(ExplainsHolds, policy)


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


register(
    PolicyEntry(
        "adl",
        "adl.sched.policy:AdlPolicy",
        takes_knobs=True,
        rounds_on_events=True,
        ranks_by_prediction=True,
        explains_holds=True,
    )
)
register(PolicyEntry("sia", "adl.sched.baselines.sia:SiaPolicy"))
register(PolicyEntry("pollux", "adl.sched.baselines.pollux_ga:PolluxPolicy"))
# Pollux's objective inside adl's optimizer: adl's machinery, its explanations included
register(
    PolicyEntry(
        "pollux-objective",
        "adl.sched.baselines.pollux:PolluxObjectivePolicy",
        ranks_by_prediction=True,
        explains_holds=True,
    )
)
register(
    PolicyEntry("tiresias", "adl.sched.baselines.tiresias:TiresiasPolicy", job_mode=JobMode.FIXED)
)
register(
    PolicyEntry(
        "optimus",
        "adl.sched.baselines.optimus:OptimusOraclePolicy",
        uses_oracle=True,
        binds_oracle=True,
        job_mode=JobMode.FIXED_BATCH,
    )
)
register(PolicyEntry("fifo", "adl.sched.baselines.fifo:FifoPolicy", job_mode=JobMode.FIXED))
# peers on mixed GPU-type clusters (issue 33): Gavel's max-min fairness over types, and Pollux
# as published, blind to types
register(
    PolicyEntry(
        "gavel", "adl.sched.baselines.gavel:GavelPolicy", binds_oracle=True, job_mode=JobMode.FIXED
    )
)
register(PolicyEntry("pollux-agnostic", "adl.sched.baselines.pollux_ga:PolluxTypeAgnosticPolicy"))
