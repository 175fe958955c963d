"""Placeholder pods (``adl.operator.capacity_pods``): the shape and node requirements of one
replica of the job, the capacity type it may use, and the reconcile of asks against the pods
that exist."""

from __future__ import annotations

from typing import Any

from adl.contract import LABEL_CAPACITY_FOR
from adl.models import AdaptiveJobSpec
from adl.operator.capacity_pods import (
    CAPACITY_TYPE_LABEL,
    PlaceholderSettings,
    placeholder_name,
    placeholder_pod,
    plan_placeholders,
)
from adl.operator.scheduling import gpus_used_by_others
from adl.sched.capacity import CapacityAsk

SETTINGS = PlaceholderSettings("nvidia.com/gpu")
TOLERATE_POOL = {"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def body(name: str = "j", preemptible: bool = True, gpus: int = 2) -> dict[str, Any]:
    template = {
        "spec": {
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [TOLERATE_POOL],
            "containers": [
                {
                    "name": "t",
                    "image": "trainer",
                    "command": ["train"],
                    "resources": {
                        "requests": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "1Gi"}
                    },
                }
            ],
        }
    }
    spec = {
        "template": template,
        "gpusPerReplica": gpus,
        "preemptible": preemptible,
        "maxReplicas": 8,
    }
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec}


def spec_of(b: dict[str, Any]) -> AdaptiveJobSpec:
    return AdaptiveJobSpec.model_validate(b["spec"])


def test_a_placeholder_asks_for_one_replica_where_the_job_may_run():
    b = body()
    pod = placeholder_pod(b, spec_of(b), 0, SETTINGS)
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["image"] == "registry.k8s.io/pause:3.10" and "command" not in c
    assert c["resources"]["requests"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert TOLERATE_POOL in spec["tolerations"]
    assert any(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"])
    # preemptible: spot preferred, not required (the autoscaler falls back to on-demand)
    na = spec["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in na
    (pref,) = na["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["preference"]["matchExpressions"] == [
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]}
    ]
    meta = pod["metadata"]
    assert meta["labels"][LABEL_CAPACITY_FOR] == "j" and meta["name"] == "j-capacity-0"
    assert meta["ownerReferences"][0]["uid"] == "uid-j"  # garbage-collected with the job


def test_a_job_that_must_not_be_preempted_asks_for_on_demand_only():
    b = body(preemptible=False)
    b["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    pod = placeholder_pod(b, spec_of(b), 0, SETTINGS)
    (term,) = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # the template's own requirement is kept, on-demand is added to it
    assert term["matchExpressions"] == [
        {"key": "zone", "operator": "In", "values": ["a"]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
    ]


def test_long_job_names_give_valid_distinct_placeholder_names():
    long = "x" * 63
    names = {placeholder_name(long, i) for i in range(12)}
    assert len(names) == 12 and all(len(n) <= 63 for n in names)


def _existing(name: str, job: str, node: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "labels": {LABEL_CAPACITY_FOR: job}},
        "spec": {},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def test_the_plan_makes_what_is_missing_and_deletes_what_is_bound_or_no_longer_asked():
    a, b = body("a"), body("b")
    bodies = {"ns/a": a, "ns/b": b}
    specs = {k: spec_of(v) for k, v in bodies.items()}
    existing = [
        _existing("a-capacity-0", "a"),  # pending, still asked
        _existing("a-capacity-1", "a", node="n7"),  # bound: its node exists
        _existing("b-capacity-0", "b"),  # b asks nothing any more
        _existing("gone-capacity-0", "gone"),  # its job is gone
    ]
    asks = [CapacityAsk("ns/a", 3, 2, "why")]
    plan = plan_placeholders(asks, bodies, specs, existing, SETTINGS)
    assert plan.bound == [("ns", "a-capacity-1")]
    assert sorted(plan.delete) == [("ns", "b-capacity-0"), ("ns", "gone-capacity-0")]
    # a has one pending placeholder; two more, with the lowest free indices
    assert [p["metadata"]["name"] for p in plan.create] == ["a-capacity-1", "a-capacity-2"]


def test_fewer_asked_deletes_the_highest_placeholders_first():
    a = body("a")
    existing = [_existing(f"a-capacity-{i}", "a") for i in (2, 0, 1)]
    plan = plan_placeholders(
        [CapacityAsk("ns/a", 1, 2, "why")], {"ns/a": a}, {"ns/a": spec_of(a)}, existing, SETTINGS
    )
    assert plan.create == [] and sorted(plan.delete) == [
        ("ns", "a-capacity-1"),
        ("ns", "a-capacity-2"),
    ]


def test_a_bound_placeholder_leaves_its_node_free_for_the_round():
    bound = _existing("a-capacity-0", "a", node="n1")
    bound["spec"]["containers"] = [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    bound["status"] = {"phase": "Running"}
    other = {
        "metadata": {"name": "other", "namespace": "ns", "labels": {}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    assert gpus_used_by_others([bound, other]) == {"n1": 1}
