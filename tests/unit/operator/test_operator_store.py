"""What a fake API server does not enforce: conflicts retried, selectors re-applied locally."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from adl.operator.store import Conflict, KubeStore


class FakeCustom:
    def __init__(self, status: int) -> None:
        self.status = status
        self.bodies: list[Any] = []

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> None:
        self.bodies.append(args[5])
        if self.status:
            raise ApiException(status=self.status)


def make_store(custom: Any = None, core: Any = None) -> KubeStore:
    store = KubeStore.__new__(KubeStore)
    store.api = type("A", (), {"sanitize_for_serialization": staticmethod(lambda o: o)})()
    store.custom = custom
    store.core = core
    return store


def test_status_patch_carries_the_resource_version_and_maps_409() -> None:
    ok = FakeCustom(0)
    make_store(custom=ok).patch_job_status("ns", "j", {"phase": "Running"}, "42")
    assert ok.bodies == [{"status": {"phase": "Running"}, "metadata": {"resourceVersion": "42"}}]
    with pytest.raises(Conflict):
        make_store(custom=FakeCustom(409)).patch_job_status("ns", "j", {}, "41")


class FakeCore:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        return type("L", (), {"items": self.pods})()  # ignores the selector, like kmock


def test_listed_pods_are_filtered_by_the_selector() -> None:
    pods: list[dict[str, Any]] = [
        {"metadata": {"name": "a", "labels": {"adl.dev/job": "a"}}},
        {"metadata": {"name": "ab", "labels": {"adl.dev/job": "ab"}}},
        {"metadata": {"name": "none"}},
    ]
    got = make_store(core=FakeCore(pods)).list_pods("ns", "adl.dev/job=a")
    assert [p["metadata"]["name"] for p in got] == ["a"]
