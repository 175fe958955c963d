"""The test kit's event sink for the Kubernetes backend (``adl.operator.backend.EventSink``):
it keeps what the operator would post as Kubernetes Events, so a test needs no kopf context
and can check what was said. Pass it as ``Runtime(..., events=recorder)`` or
``KubeWorkerBackend(..., events=recorder)``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SaidEvent:
    """One Event: the name of the object it is about, its type, reason and message."""

    name: str
    type: str
    reason: str
    message: str


class EventRecorder:
    """Records every Event in ``said``, in order."""

    def __init__(self) -> None:
        self.said: list[SaidEvent] = []

    def __call__(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        name = str((body.get("metadata") or {}).get("name", ""))
        self.said.append(SaidEvent(name, type_, reason, message))

    def reasons(self) -> list[str]:
        return [e.reason for e in self.said]
