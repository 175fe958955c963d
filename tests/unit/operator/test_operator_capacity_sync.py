"""The operator's capacity step (``adl.operator.capacity_sync.CapacityAsker``): it makes and
deletes the placeholder pods a round's asks call for, tells each job of its ask once per change,
and one placeholder's refused create does not stop the others."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from adl.contract import LABEL_CAPACITY_FOR
from adl.operator.capacity_pods import PlaceholderSettings
from adl.operator.capacity_sync import REQUESTED, WITHDRAWN, CapacityAsker
from adl.sched.capacity import CapacityAsk

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}


class PodStore:
    """Pods by (namespace, name); creates named in ``refuse`` fail with 403."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.refuse = refuse

    def create(self, obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        if meta["name"] in self.refuse:
            raise ApiException(status=403, reason="Forbidden")
        self.pods[(meta["namespace"], meta["name"])] = obj
        return True

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        self.pods.pop((namespace, name), None)


def _body(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
        "spec": {"template": TEMPLATE},
    }


def test_asks_become_placeholders_and_each_change_is_said_once() -> None:
    store, said = PodStore(), []
    asker = CapacityAsker(
        store,
        PlaceholderSettings("nvidia.com/gpu"),
        lambda b, *e: said.append((b["metadata"]["name"], *e)),
    )  # type: ignore[arg-type]
    bodies = {"ns/a": _body("a")}
    ask = CapacityAsk("ns/a", 2, 1, "2 replicas would run it faster")
    asker.apply([ask], bodies, [])
    assert sorted(store.pods) == [("ns", "a-capacity-0"), ("ns", "a-capacity-1")]
    asker.apply([ask], bodies, list(store.pods.values()))  # the same ask again: nothing new
    assert len(store.pods) == 2
    assert said == [("a", "Normal", REQUESTED, "2 replicas would run it faster")]
    # one placeholder bound: its node exists, it goes; the ask is now for one
    bound = store.pods[("ns", "a-capacity-1")]
    bound["spec"]["nodeName"] = "n1"
    asker.apply([CapacityAsk("ns/a", 1, 1, "1 more")], bodies, list(store.pods.values()))
    assert sorted(store.pods) == [("ns", "a-capacity-0")]
    # nothing asked: the rest go, and the job is told once
    asker.apply([], bodies, list(store.pods.values()))
    asker.apply([], bodies, [])
    assert store.pods == {}
    assert [s[2] for s in said] == [REQUESTED, REQUESTED, WITHDRAWN]
    assert all(LABEL_CAPACITY_FOR in p["metadata"]["labels"] for p in [bound])


def test_a_refused_placeholder_does_not_stop_the_others() -> None:
    store = PodStore(refuse=("a-capacity-0",))
    asker = CapacityAsker(store, PlaceholderSettings("nvidia.com/gpu"), lambda *_: None)  # type: ignore[arg-type]
    asker.apply(
        [CapacityAsk("ns/a", 1, 1, "w"), CapacityAsk("ns/b", 1, 1, "w")],
        {"ns/a": _body("a"), "ns/b": _body("b")},
        [],
    )
    assert sorted(store.pods) == [("ns", "b-capacity-0")]
