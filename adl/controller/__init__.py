"""Backend-agnostic job lifecycle and scheduling rounds (pure decisions).

- ``lifecycle.step``: (spec, status, observed workers, desired allocation, now) -> actions
- ``actions``: SetStatus, CreateGroup, DeleteGroup, EmitEvent (what backends execute)
- ``env.worker_env``: the ADL_* environment of one replica, identical on every backend
- ``rounds.plan_round``: job records + nodes -> the policy's new allocation
"""

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, SetStatus
from adl.controller.env import WorkerSite, group_env, node_slots, worker_env
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import (
    EXIT_STOPPED,
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    Timing,
    step,
    teardown,
)
from adl.controller.rounds import RoundResult, job_info, plan_round, timed_plan_round

__all__ = [
    "EXIT_STOPPED",
    "Action",
    "CreateGroup",
    "DeleteGroup",
    "EmitEvent",
    "JobRecord",
    "ObservedWorkers",
    "ReplicaPhase",
    "ReplicaState",
    "RoundResult",
    "SetStatus",
    "Timing",
    "WorkerSite",
    "group_env",
    "job_info",
    "node_slots",
    "plan_round",
    "step",
    "teardown",
    "timed_plan_round",
    "worker_env",
]
