"""Nodes about to go away, read from Node objects (``adl.operator.disruption``): each well-known
mark is recognised whatever its value and a job's tolerations, a soft hint is not, and the
round offers none of these nodes."""

from __future__ import annotations

from typing import Any

import pytest

from adl.operator.disruption import (
    CORDONED,
    DELETED,
    LEAVING_TAINTS,
    describe,
    leaving_nodes,
    leaving_reason,
)
from adl.operator.scheduling import nodes_from_objects


def node(name: str = "n1", *, taints: Any = (), **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if "deletion" in spec:
        meta["deletionTimestamp"] = spec.pop("deletion")
    return {
        "metadata": meta,
        "spec": {"taints": list(taints), **spec},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.mark.parametrize("key", sorted(LEAVING_TAINTS))
def test_every_well_known_taint_marks_the_node_leaving(key: str) -> None:
    for effect in ("NoSchedule", "NoExecute"):
        assert leaving_reason(node(taints=[{"key": key, "effect": effect}])) == key
    # whatever the value: Karpenter before v1 set "disrupting", AWS's handler an event id
    tainted = node(taints=[{"key": key, "value": "disrupting", "effect": "NoSchedule"}])
    assert leaving_reason(tainted) == key


def test_karpenter_v1_cluster_autoscaler_and_gke_marks_are_among_them() -> None:
    assert {
        "karpenter.sh/disrupted",
        "ToBeDeletedByClusterAutoscaler",
        "cloud.google.com/impending-node-termination",
    } <= set(LEAVING_TAINTS)


def test_a_cordon_and_a_deletion_mark_the_node_leaving() -> None:
    assert leaving_reason(node(unschedulable=True)) == CORDONED
    assert leaving_reason(node(deletion="2026-01-01T00:00:00Z")) == DELETED


def test_a_taint_says_who_acts_before_the_cordon_or_deletion_that_comes_with_it() -> None:
    both = node(
        taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
        unschedulable=True,
        deletion="2026-01-01T00:00:00Z",
    )
    assert leaving_reason(both) == "karpenter.sh/disrupted"


def test_soft_hints_and_other_taints_are_not_leaving() -> None:
    assert leaving_reason(node()) is None
    # cluster-autoscaler's candidate mark only steers (PreferNoSchedule); it may never act
    soft = {"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}
    assert leaving_reason(node(taints=[soft])) is None
    preferred = {"key": "karpenter.sh/disrupted", "effect": "PreferNoSchedule"}
    assert leaving_reason(node(taints=[preferred])) is None
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert leaving_reason(node(taints=[gpu])) is None
    assert leaving_reason({"metadata": {"name": "bare"}}) is None


def test_leaving_nodes_names_each_marked_node() -> None:
    nodes = [
        node("a"),
        node("b", unschedulable=True),
        node("c", taints=[{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]),
    ]
    assert leaving_nodes(nodes) == {"b": CORDONED, "c": "ToBeDeletedByClusterAutoscaler"}


def test_describe_says_what_a_taint_means() -> None:
    said = describe("karpenter.sh/disrupted")
    assert said == "karpenter.sh/disrupted: Karpenter is disrupting it"
    assert describe(CORDONED) == CORDONED


def test_the_round_offers_no_leaving_node_even_to_a_job_that_tolerates_everything() -> None:
    """A template tolerating every taint (``operator: Exists`` with no key) may schedule on a
    node whatever its taints, but a node being disrupted goes away all the same: the round
    must not place the job there."""
    everything = [{"operator": "Exists"}]
    nodes = [
        node("keep"),
        node("karpenter", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]),
        node("gke", taints=[{"key": "cloud.google.com/impending-node-termination"}]),
        node("cordoned", unschedulable=True),
        node("deleted", deletion="2026-01-01T00:00:00Z"),
    ]
    offered = nodes_from_objects(nodes, [], tolerations=[everything])
    assert [n.name for n in offered] == ["keep"]
