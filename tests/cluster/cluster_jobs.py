"""AdaptiveJob manifests and parameters the cluster tests share."""

from __future__ import annotations

from typing import Any

from adl.operator.crd import GROUP, VERSION

#: the two ways the chart installs the operator (``installed_chart``'s indirect parameters)
SCOPES = ["cluster", "namespaced"]


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A minimal job (its image is never pulled: no kubelet runs it) with a claim made from a
    storage class, plus ``spec``'s fields."""
    container = {"name": "trainer", "image": "registry.example/t:1", "command": ["python", "t.py"]}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AdaptiveJob",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"containers": [container]}},
            "checkpoint": {"storageClass": "standard"},
            **spec,
        },
    }
