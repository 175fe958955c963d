"""Admin-set ceilings on what a tenant's spec may ask of the scheduler: ``spec.priority`` (strict
tiers: a higher one takes GPUs first) and ``preemptible: false`` (a job that keeps its GPUs
against higher tiers). Without them any tenant could put every job above everyone else's."""

from __future__ import annotations

from typing import Any

import pytest

from adl.models import AdaptiveJobSpec
from adl.operator.backend import KubeWorkerBackend, OperatorConfig
from adl.operator.main import parse_args
from adl.operator.tenancy import Ceilings, NamespacePolicy, enforce, parse_namespace_policy
from tests.event_sink import EventRecorder

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}


def spec(**fields: Any) -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate({"template": TEMPLATE, **fields})


def test_a_priority_above_the_ceiling_is_capped_and_said() -> None:
    capped, said = enforce(spec(priority=100), NamespacePolicy(max_priority=10), "team-a")
    assert capped.priority == 10
    assert said == ["spec.priority 100 is above the ceiling 10 of namespace team-a: run at 10"]
    same, said = enforce(spec(priority=5), NamespacePolicy(max_priority=10), "team-a")
    assert same.priority == 5 and said == []
    # no ceiling: anything the CRD accepts
    assert enforce(spec(priority=1000), NamespacePolicy(), "team-a")[0].priority == 1000


def test_non_preemptible_is_made_preemptible_where_not_allowed() -> None:
    policy = NamespacePolicy(allow_non_preemptible=False)
    capped, said = enforce(spec(preemptible=False), policy, "team-a")
    assert capped.preemptible is True
    assert said == ["spec.preemptible=false is not allowed in namespace team-a: run as preemptible"]
    assert enforce(spec(preemptible=False), NamespacePolicy(), "team-a")[0].preemptible is False


def test_namespace_entries_override_the_cluster_default_key_by_key() -> None:
    default = NamespacePolicy(max_priority=0, allow_non_preemptible=False)
    ns, team_a = parse_namespace_policy('team-a={"maxPriority": 50}', default)
    assert ns == "team-a"
    assert team_a == NamespacePolicy(max_priority=50, allow_non_preemptible=False)
    ceilings = Ceilings(default, {"team-a": team_a})
    assert ceilings.of("team-a").max_priority == 50
    assert ceilings.of("team-b") == default
    _, lifted = parse_namespace_policy('ops={"maxPriority": null, "allowNonPreemptible": true}')
    assert lifted == NamespacePolicy()


@pytest.mark.parametrize(
    "text",
    [
        "team-a",  # no policy
        "team-a=not json",
        'team-a={"maxPriorty": 1}',  # a typo must not silently lift nothing
        'team-a={"maxPriority": "high"}',
        'team-a={"maxPriority": 5000}',  # outside what the CRD allows
        'team-a={"allowNonPreemptible": "no"}',
        'Team_A={"maxPriority": 1}',  # not a namespace name
        "team-a=[1]",
    ],
)
def test_bad_namespace_policies_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_namespace_policy(text)


def test_operator_flags_build_the_ceilings() -> None:
    o = parse_args(
        [
            "-A",
            "--max-priority=0",
            "--deny-non-preemptible",
            '--namespace-policy=ops={"maxPriority": 100, "allowNonPreemptible": true}',
        ]
    )
    assert o.ceilings.of("team-a") == NamespacePolicy(0, False)
    assert o.ceilings.of("ops") == NamespacePolicy(100, True)
    assert parse_args(["-A"]).ceilings == Ceilings()  # no flags: no ceilings (as before)
    for bad in (["-A", "--namespace-policy=x"], ["-A", "--max-priority=5000"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


class Store:
    """Jobs in two namespaces, for the round's view of them."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        return [b for b in self.bodies if namespace in (None, b["metadata"]["namespace"])]

    def list_nodes(self) -> list[dict[str, Any]]:
        return []  # the round reads them with the jobs (to confine each to its nodes)


def body(ns: str, name: str, **fields: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, "uid": f"{ns}-{name}"}
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"template": TEMPLATE, **fields}, "status": {}}


def test_the_round_sees_capped_specs_and_each_cap_is_said_once() -> None:
    recorder = EventRecorder()
    ceilings = Ceilings(namespaces={"team-a": NamespacePolicy(10, False)})
    bodies = [
        body("team-a", "greedy", priority=999, preemptible=False),
        body("team-a", "modest", priority=3),
        body("team-b", "other", priority=999, preemptible=False),  # no entry: no ceiling
    ]
    config = OperatorConfig(ceilings=ceilings)
    backend = KubeWorkerBackend(Store(bodies), config, recorder)  # type: ignore[arg-type]
    events = recorder.said
    jobs = {r.key: r.spec for r in backend.round_jobs()}
    assert (jobs["team-a/greedy"].priority, jobs["team-a/greedy"].preemptible) == (10, True)
    assert jobs["team-a/modest"].priority == 3
    assert (jobs["team-b/other"].priority, jobs["team-b/other"].preemptible) == (999, False)
    assert [(e.name, e.reason) for e in events] == [("greedy", "NamespacePolicy")]
    assert "ceiling 10 of namespace team-a" in events[0].message
    assert "not allowed in namespace team-a" in events[0].message
    backend.round_jobs()  # the next round: nothing new to say
    assert len(events) == 1
    bodies[0]["spec"]["priority"] = 50  # edited: still capped, said again with the new figure
    backend.round_jobs()
    assert len(events) == 2 and "spec.priority 50" in events[1].message


def test_a_capped_job_does_not_take_gpus_from_a_higher_tier() -> None:
    # the end of it: the policy places team-b's priority-20 job first, not team-a's 999
    from datetime import UTC, datetime

    from adl.controller.rounds import job_info
    from adl.sched.policy import AdlPolicy
    from adl.sched.types import NodeInfo

    ceilings = Ceilings(namespaces={"team-a": NamespacePolicy(10, False)})
    bodies = [
        body("team-a", "greedy", priority=999, maxReplicas=1),
        body("team-b", "tier20", priority=20, maxReplicas=1),
    ]
    config = OperatorConfig(ceilings=ceilings)
    backend = KubeWorkerBackend(Store(bodies), config, EventRecorder())  # type: ignore[arg-type]
    now = datetime(2026, 1, 1, 1, tzinfo=UTC)
    infos = [job_info(r, now, i) for i, r in enumerate(backend.round_jobs())]
    alloc = AdlPolicy().optimize(infos, [NodeInfo("n1", 1)], {})
    assert alloc.get("team-b/tier20") == ["n1"]
    assert not alloc.get("team-a/greedy")
