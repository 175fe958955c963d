"""Admin-set ceilings on what a job's spec may ask of the scheduler, per namespace.

``spec.priority`` is a strict tier (a higher one gets GPUs first, and may take them from lower
ones) and ``preemptible: false`` keeps a job's GPUs against higher tiers. Both are written by
whoever may create an AdaptiveJob, so on a shared cluster any tenant could put all its jobs
above everyone else's. The cluster admin sets a ceiling (chart values ``scheduler.maxPriority``,
``scheduler.allowNonPreemptible`` and per namespace ``scheduler.namespacePolicies``; operator
flags ``--max-priority``, ``--deny-non-preemptible``, ``--namespace-policy``), and the round
schedules a job above it as if it asked for the ceiling: capped, not refused, so a job written
for another cluster still runs, and it is said in a ``NamespacePolicy`` Event.

The policies come from the operator's flags, not from namespace labels: reading labels would
need RBAC on namespaces, and whoever may label a namespace could lift its own ceiling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from adl.models import AdaptiveJobSpec

#: what the CRD allows for spec.priority (``AdaptiveJobSpec.priority``)
PRIORITY_RANGE = (-1000, 1000)
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_KEYS = {"maxPriority", "allowNonPreemptible"}


@dataclass(frozen=True)
class NamespacePolicy:
    """What jobs of one namespace may ask for. The defaults allow anything (no ceiling)."""

    max_priority: int | None = None
    allow_non_preemptible: bool = True


@dataclass(frozen=True)
class Ceilings:
    """The cluster-wide default and the namespaces that differ from it."""

    default: NamespacePolicy = field(default_factory=NamespacePolicy)
    namespaces: Mapping[str, NamespacePolicy] = field(default_factory=dict)

    def of(self, namespace: str) -> NamespacePolicy:
        return self.namespaces.get(namespace, self.default)


def check_priority(value: object) -> int | None:
    """A ceiling: None (none) or an integer within what the CRD allows."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"maxPriority must be an integer or null, got {value!r}")
    low, high = PRIORITY_RANGE
    if not low <= value <= high:
        raise ValueError(f"maxPriority must be within [{low}, {high}], got {value}")
    return value


def parse_namespace_policy(
    text: str, default: NamespacePolicy | None = None
) -> tuple[str, NamespacePolicy]:
    """``NAMESPACE={"maxPriority": 10, "allowNonPreemptible": false}``; a key left out keeps
    ``default``'s value. Unknown keys are refused: a misspelt one would silently cap nothing."""
    base = default or NamespacePolicy()
    namespace, sep, raw = text.partition("=")
    if not sep or not _NAMESPACE.match(namespace):
        raise ValueError(f"expected NAMESPACE=JSON with a namespace name, got {text!r}")
    try:
        values = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{namespace}: the policy is not JSON: {err}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{namespace}: the policy must be a JSON object, got {raw!r}")
    unknown = set(values) - _KEYS
    if unknown:
        raise ValueError(f"{namespace}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
    allow = values.get("allowNonPreemptible", base.allow_non_preemptible)
    if not isinstance(allow, bool):
        raise ValueError(f"{namespace}: allowNonPreemptible must be true or false, got {allow!r}")
    ceiling = base.max_priority
    if "maxPriority" in values:
        ceiling = check_priority(values["maxPriority"])
    return namespace, NamespacePolicy(ceiling, allow)


def enforce(
    spec: AdaptiveJobSpec, policy: NamespacePolicy, namespace: str
) -> tuple[AdaptiveJobSpec, list[str]]:
    """The spec as the scheduler may see it under ``policy``, and what was capped (empty: the
    spec as it is)."""
    said: list[str] = []
    changes: dict[str, object] = {}
    ceiling = policy.max_priority
    if ceiling is not None and spec.priority > ceiling:
        changes["priority"] = ceiling
        said.append(
            f"spec.priority {spec.priority} is above the ceiling {ceiling} of namespace "
            f"{namespace}: run at {ceiling}"
        )
    if not spec.preemptible and not policy.allow_non_preemptible:
        changes["preemptible"] = True
        said.append(
            f"spec.preemptible=false is not allowed in namespace {namespace}: run as preemptible"
        )
    if not changes:
        return spec, said
    return spec.model_copy(update=changes), said


__all__ = [
    "Ceilings",
    "NamespacePolicy",
    "check_priority",
    "enforce",
    "parse_namespace_policy",
]
