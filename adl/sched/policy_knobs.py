"""The adl policy's constants (:class:`Knobs`), their valid ranges, and ``NAME=VALUE`` parsing.

Platform teams set knobs where the policy runs (``python -m adl.operator --policy-knob``, the
Helm value ``scheduler.policyKnobs``, ``adl local up --policy-knob``, ``adl simulate
--policy-knob``); a bad name or value must fail there, at start-up, with the valid choices in
the message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Knobs:
    """Policy constants. Defaults are chosen from first principles, not fitted to a trace,
    except the start, ramp and hysteresis (``bootstrap_replicas``, ``ramp_factor``,
    ``change_margin``): issue 22's *node-first* values, screened on two workloads and then
    replayed on eight, where together they cut restarts per job from about 5 to under 3 and
    lowered the mean JCT (docs/results.md, "Fewer restarts").

    ``srpt_power`` and ``fairness`` set the trade-off between the mean JCT and the tail
    (p99 JCT, makespan); docs/results.md, "Policy knobs", has the measured figures.
    """

    #: a job may use at most ``ramp_factor`` x the largest replica count it has profiled (>= 1):
    #: from a node, x 4 reaches 16 and 64 GPUs in one restart each, where x 2 takes two
    ramp_factor: float = 4.0
    #: exponent on remaining work: 1 = shortest-remaining-first, 0 = maximize total speedup
    srpt_power: float = 0.5
    #: fairness/aging: a job's priority grows by ``(1 + age / R)^fairness`` (0 = no aging)
    fairness: float = 1.0
    #: floor on remaining work, seconds (a nearly finished job is not infinitely urgent)
    min_remaining_s: float = 60.0
    #: LAS fallback when the remaining work is unknown: R = attained service + this many seconds
    unknown_remaining_s: float = 3600.0
    #: a new configuration must pay back its restart within this many seconds
    restart_horizon_s: float = 1800.0
    #: largest restart penalty (fraction of the new configuration's value)
    max_restart_penalty: float = 0.9
    #: restarts a running job's growth must pay for (the growth now, the give-back later; 1
    #: with ``victim_charge``, which charges the give-back to whoever takes the GPUs back)
    grow_restarts: float = 2.0
    #: beyond the largest profiled replica count, assume gradient sync does not get slower
    #: (no "retrogression" the job has not measured): optimism that makes jobs explore
    optimistic: bool = True
    #: local search: re-solve with each of up to this many moved big jobs kept whole ...
    local_search: float = 2.0
    #: ... while at most this many jobs are active (each re-solve costs one greedy round)
    local_search_max_jobs: float = 256.0
    #: exact replica counts: a knapsack over every job's counts (packed value), kept when its
    #: placed objective beats the greedy's ...
    dp: bool = True
    #: ... while jobs x (free GPUs + 1) is at most this (the knapsack's table size): 1000 jobs
    #: on 2048 free GPUs fit (+70 ms a round there); at 512 nodes the knapsack cut the mean
    #: JCT 8% and restarts from 4.0 to 1.6 per job (docs/results.md, "Robustness what-ifs")
    dp_max_cells: float = 5_000_000.0
    #: use the driver's prediction of remaining work (from completed jobs of the same kind)
    #: for a job that did not declare its length (off: least-attained-service only)
    use_predicted_remaining: bool = True
    #: hysteresis: a running job's new configuration must be worth ``1 + change_margin`` times
    #: what its restart penalty leaves, so gains within the model's error restart nothing
    #: (0.25 against 0.1 and 0.18 in the screening with a node start: fewer restarts overall)
    change_margin: float = 0.25
    #: replicas a job that has profiled nothing may start on (>= 1), never more than one node
    #: holds: there the optimistic prior can only be wrong about compute, not about cross-node
    #: sync, and a newcomer's 1, 2, 4 steps do not each shrink another job (4: a whole node of
    #: 4 GPUs, as in the traces; 1 restores the 1, 2, 4, ... start)
    bootstrap_replicas: float = 4.0
    #: exponent on (horizon / a job's average configuration lifetime) in its restart cost:
    #: 1 = the cost spread over the lifetime; > 1 also resists moving jobs that churn
    churn_power: float = 1.0
    #: power on each job's speedup normalised by its equal-share speedup (1 = linear; < 1 a
    #: power mean that favours the tail, combined with the shortest-first weights)
    speedup_power: float = 1.0
    #: 0 = weights from remaining work (``srpt_power``); in (0, 0.95]: heSRPT's rank weights
    #: for speedups ``k^p`` with this ``p`` (:mod:`adl.sched.policy_weights`; measured, lost)
    rank_power: float = 0.0
    #: on: age counts against the job's remaining time at its cap, not its remaining one-GPU
    #: seconds (:mod:`adl.sched.policy_weights`; measured, lost)
    aging_best: bool = False
    #: in (0, 1): a job's replicas beyond the most at which its speedup per replica is at
    #: least this are worth a hundredth of their speedup, so they go to it only when no other
    #: job can use them (:mod:`adl.sched.policy_efficiency`; fewer GPU-hours held, a longer
    #: mean JCT: measured, not the default)
    efficiency_floor: float = 0.0
    #: a job resumed (given GPUs again after a preemption) less than this many seconds ago
    #: keeps them (it may still grow): no leftover GPU given for one round and taken back the
    #: next (issue 34's flapping; 0 = off: measured, costs today's mean 2%)
    min_tenure_s: float = 0.0
    #: taking all of a running job's GPUs costs the objective this many times the job's
    #: restart penalty at its current speed (issue 34; 0 = off)
    victim_charge: float = 0.0
    #: on: the minimum tenure also follows a first start or a resize, not only a resume
    tenure_all: bool = False
    #: a job that has measured at least this many whole nodes (its model has fitted the
    #: cross-node sync) may grow to its fitted model's optimum in one step, valued without
    #: the optimistic prior, instead of ``ramp_factor`` x what it measured (0 = off)
    confident_nodes: float = 0.0
    #: at most this many resumes of a job within any hour (0 = no bound): the resume that
    #: reaches the bound keeps its GPUs (it may still grow) until the oldest of them is an hour
    #: old, so a job that keeps being preempted and resumed waits for one long tenure instead
    #: of flapping; other resumes stay preemptible by shorter jobs (issue 34)
    resumes_per_hour: float = 0.0  # a whole number: a fraction is rounded down
    #: on: in a *quiet* round (every job of the tier already holds GPUs, and the youngest is
    #: older than ``restart_horizon_s``), a running job's growth pays its restart over its
    #: time left at the new size, up to the youngest job's age (the time since the last
    #: arrival still running, the Lindy estimate of the time until the next one), and the
    #: change margin shrinks in proportion, so GPUs no one waits for do not stay idle for
    #: hours behind the hysteresis (issue 34's drain phase; measured: a shorter mean and a
    #: longer makespan, so off)
    quiet_growth: bool = False
    #: a bound on starvation, seconds (0 = off): a job's *deficit* is its age less the time
    #: an equal share of the cluster (its GPUs over the jobs of the tier) would have taken
    #: to give it the GPU-seconds it has had; past this many seconds of deficit, its first
    #: GPUs, up to that equal share, are weighed as if its weight were ``deficit / bound``
    #: times its own, at most the tier's largest weight (:mod:`adl.sched.policy_starvation`;
    #: 600 measured: a 3-4% shorter makespan, today's mean 2.5% longer, so off)
    starve_bound_s: float = 0.0
    #: in (0, 1): a job does not use a GPU type that runs it at less than this fraction of
    #: its fastest type's speed, so a long job pushed off its fast GPUs waits for them
    #: instead of moving to slow ones and back (:mod:`adl.sched.policy_type_floor`; 0 = off;
    #: no effect on a cluster of one type)
    min_type_speed: float = 0.0
    #: on a mixed cluster, re-solve the replica-count knapsack up to this many times with a
    #: price per GPU on the types it asked for more than they have, keeping the allocation
    #: worth most unpriced (:mod:`adl.sched.policy_type_prices`; 0 = off; a whole number;
    #: only while at most ``local_search_max_jobs`` jobs are active; no effect on a cluster
    #: of one type; measured: mean JCT 2-5% shorter on the mixed clusters)
    type_prices: float = 4.0
    #: on a mixed cluster, after the round's allocation is chosen, try up to this many moves
    #: of a running job whole onto a GPU type left with idle GPUs, each kept only if it (with
    #: the GPUs it leaves handed to others) raises the objective, restart and change margin
    #: paid (:mod:`adl.sched.policy_type_fill`; 0 = off; a whole number; no effect on a
    #: cluster of one type; measured: two types' mean 1.7% and p99 7% shorter, three types'
    #: mean and p99 0.3% shorter and makespan 2.3% longer; on, as the tail is where the mixed
    #: clusters miss issue 33's goal)
    type_fill: float = 2.0
    #: long jobs (0 = off; else at least 1): a job whose remaining one-GPU work is at least the
    #: longest's over this and more than this many times the median of the tier's jobs outside
    #: that class is *long*, and
    #: gets the steady efficient share below
    #: (:mod:`adl.sched.policy_longshare`; issue 34's tail)
    long_job_mult: float = 0.0
    #: a long job's first GPUs, up to its efficient scale, weigh this many times the tier's
    #: largest weight (1: they outbid others' low-value GPUs; 100: a constraint whenever the
    #: GPUs exist; 0: no floor)
    long_floor_weight: float = 1.0
    #: ... the efficient scale: the most replicas reached by a step still adding at least this
    #: much speedup per replica
    long_floor_gain: float = 0.5
    #: ... the long jobs' floors together take at most this fraction of the cluster
    long_floor_share: float = 0.5
    #: on: the floor applies only while the long job has had fewer GPU-seconds than its floor
    #: would have given it since it arrived (a catch-up, not a steady share)
    long_floor_catchup: bool = False
    #: ... with the catch-up, a long job that holds GPUs keeps its floor until it is this many
    #: seconds of its floor ahead (0: the catch-up alone, which turns the floor off the round
    #: a job is even and back on the round it falls behind: one preemption and resume each)
    long_floor_hold_s: float = 0.0
    #: the end phase (0 = off; else at least 1): while every job of the tier holds GPUs, none
    #: arrived within ``restart_horizon_s`` and each one's size (GPU-seconds so far plus
    #: remaining one-GPU work) is at least the largest's over this, the jobs share one weight
    #: and are softly capped at the counts that even out their predicted JCTs
    #: (:mod:`adl.sched.policy_endphase`; issue 34's makespan)
    end_phase_mult: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SWITCHES:
                if (
                    not isinstance(value, bool)
                    and isinstance(value, int | float)
                    and value in (0, 1)
                ):
                    object.__setattr__(self, f.name, bool(value))  # 0/1, as knobs are written
                elif not isinstance(value, bool):
                    raise ValueError(f"policy knob {f.name} is on or off (1/0), got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"policy knob {f.name} must be a number, got {value!r}")
            lo, hi, closed = _RANGES.get(f.name, _ANY_NONNEGATIVE)
            ok = math.isfinite(value) and lo <= value and (value <= hi if closed else value < hi)
            if not ok:
                where = _describe(f.name)
                raise ValueError(f"policy knob {f.name} must be in {where}, got {value}")


#: the knobs that are on or off (``bool``); written ``NAME=1``/``NAME=0`` (or true/false, on/off)
SWITCHES = frozenset(f.name for f in fields(Knobs) if f.type in ("bool", bool))

#: knob -> (lowest, highest, highest included); knobs not listed take any finite value >= 0
_ANY_NONNEGATIVE = (0.0, math.inf, True)
_RANGES: dict[str, tuple[float, float, bool]] = {
    "ramp_factor": (1.0, math.inf, True),
    "bootstrap_replicas": (1.0, math.inf, True),
    "speedup_power": (0.05, 1.0, True),
    "rank_power": (0.0, 0.95, True),
    "efficiency_floor": (0.0, 1.0, False),
    "min_type_speed": (0.0, 1.0, False),
    "type_prices": (0.0, 8.0, True),
    "type_fill": (0.0, 64.0, True),
    "min_remaining_s": (1e-3, math.inf, True),
    "unknown_remaining_s": (1e-3, math.inf, True),
    "restart_horizon_s": (1e-3, math.inf, True),
    "max_restart_penalty": (0.0, 1.0, False),
    "resumes_per_hour": (0.0, 60.0, True),
    "long_job_mult": (0.0, 1000.0, True),
    "long_floor_gain": (0.01, 1.0, True),
    "long_floor_share": (0.01, 1.0, True),
    "long_floor_weight": (0.0, 1000.0, True),
    "end_phase_mult": (0.0, 1000.0, True),
}


def _describe(name: str) -> str:
    lo, hi, closed = _RANGES.get(name, _ANY_NONNEGATIVE)
    if math.isinf(hi):
        return f"[{lo:g}, inf)"
    return f"[{lo:g}, {hi:g}{']' if closed else ')'}"


def _switch(name: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in ("1", "1.0", "true", "on", "yes"):
        return True
    if word in ("0", "0.0", "false", "off", "no"):
        return False
    raise ValueError(
        f"policy knob {name} is on or off: 1/0, true/false, on/off; got {raw.strip()!r}"
    )


def knob_names() -> list[str]:
    """Every knob's name, in declaration order."""
    return [f.name for f in fields(Knobs)]


def parse_knobs(items: Iterable[str]) -> dict[str, float | bool]:
    """``["srpt_power=0.25", "fairness=0,dp=0"]`` -> knobs, validated against :class:`Knobs`.

    Each item is ``NAME=VALUE`` or a comma-separated list of them; a later value wins. Raises
    ``ValueError`` with the valid names (or range) for an unknown name or a bad value.
    """
    names = knob_names()
    out: dict[str, float | bool] = {}
    for item in items:
        for pair in (p.strip() for p in item.split(",")):
            if not pair:
                continue
            name, sep, raw = pair.partition("=")
            name = name.strip()
            if not sep or not name:
                raise ValueError(f"policy knob {pair!r}: expected NAME=VALUE")
            if name not in names:
                raise ValueError(f"unknown policy knob {name!r}; choose from {', '.join(names)}")
            if name in SWITCHES:
                out[name] = _switch(name, raw)
                continue
            try:
                out[name] = float(raw)
            except ValueError:
                raise ValueError(f"policy knob {name}: {raw.strip()!r} is not a number") from None
    Knobs(**out)  # type: ignore[arg-type]  # ranges; a switch's type checked there too
    return out
