"""The operator's side of asking for capacity against the API server: keep the placeholder
pods (``adl.operator.capacity_pods``) equal to the round's asks, and tell each job about its
ask, once per change (an Event, which ``adl describe`` shows)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from adl.contract import LABEL_CAPACITY_FOR
from adl.models import AdaptiveJobSpec
from adl.operator.capacity_pods import PlaceholderSettings, plan_placeholders
from adl.operator.store import KubeStore
from adl.sched.capacity import CapacityAsk

log = logging.getLogger(__name__)

#: (job body, type, reason, message): how an Event reaches a job
EventSink = Callable[[Mapping[str, Any], str, str, str], None]
REQUESTED, WITHDRAWN = "CapacityRequested", "CapacityWithdrawn"


class CapacityAsker:
    """Placeholder pods for the asks of each round; remembers what it last said per job."""

    def __init__(self, store: KubeStore, settings: PlaceholderSettings, events: EventSink) -> None:
        self.store = store
        self.settings = settings
        self.events = events
        #: job key -> the ask last said (each change said once, not every round)
        self.said: dict[str, str] = {}

    def apply(
        self,
        asks: Sequence[CapacityAsk],
        bodies: Mapping[str, Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
    ) -> None:
        """Make the placeholders match ``asks``: ``bodies`` are the round's job objects by key,
        ``pods`` the round's pod listing (the placeholders are picked out of it)."""
        existing = [
            p for p in pods if LABEL_CAPACITY_FOR in ((p.get("metadata") or {}).get("labels") or {})
        ]
        specs: dict[str, AdaptiveJobSpec] = {}
        for ask in asks:
            body = bodies.get(ask.job)
            if body is not None:
                specs[ask.job] = AdaptiveJobSpec.model_validate(body.get("spec") or {})
        plan = plan_placeholders(
            asks, {k: bodies[k] for k in specs}, specs, existing, self.settings
        )
        for ns, name in [*plan.bound, *plan.delete]:
            self._quietly(self.store.delete_pod, ns, name, 0)
        for manifest in plan.create:
            self._quietly(self.store.create, manifest)
        if plan.bound:
            log.info(
                "capacity: %d placeholder pod(s) bound, their nodes exist: deleted", len(plan.bound)
            )
        self._say(asks, bodies)

    def _say(self, asks: Sequence[CapacityAsk], bodies: Mapping[str, Mapping[str, Any]]) -> None:
        now = {a.job: a.why for a in asks if a.job in bodies}
        for key, why in now.items():
            if self.said.get(key) != why:
                self.said[key] = why
                log.info("%s: %s", key, why)
                self.events(bodies[key], "Normal", REQUESTED, why)
        for key in [k for k in self.said if k not in now]:
            del self.said[key]
            if key in bodies:
                msg = (
                    "no more GPUs asked of the autoscaler: the job's gain from more is gone or met"
                )
                self.events(bodies[key], "Normal", WITHDRAWN, msg)

    @staticmethod
    def _quietly(call: Callable[..., Any], *args: Any) -> None:
        """One placeholder's create or delete failing must not fail the round: the next round
        tries again from what it then lists."""
        try:
            call(*args)
        except ApiException as exc:
            log.warning(
                "capacity: %s%s failed: %s %s", call.__name__, args[:2], exc.status, exc.reason
            )
