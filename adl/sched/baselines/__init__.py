"""Published baseline policies behind the same interface as adl.sched.policy."""

from adl.sched.baselines.fifo import FifoPolicy
from adl.sched.baselines.gavel import GavelPolicy, GavelSettings
from adl.sched.baselines.optimus import OptimusOraclePolicy
from adl.sched.baselines.pollux import PolluxObjectivePolicy
from adl.sched.baselines.pollux_ga import PolluxPolicy, PolluxSettings, PolluxTypeAgnosticPolicy
from adl.sched.baselines.sia import SiaPolicy, SiaSettings
from adl.sched.baselines.tiresias import TiresiasPolicy

__all__ = [
    "FifoPolicy",
    "GavelPolicy",
    "GavelSettings",
    "OptimusOraclePolicy",
    "PolluxObjectivePolicy",
    "PolluxPolicy",
    "PolluxSettings",
    "PolluxTypeAgnosticPolicy",
    "SiaPolicy",
    "SiaSettings",
    "TiresiasPolicy",
]
