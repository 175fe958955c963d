"""The test kit's one table of Helm chart values a user may set (``charts/adl``), by name.

``tests/unit/charts`` renders and lints every variant offline; ``tests/cluster`` installs the
``INSTALLED`` ones on the real API server, whose validation and admission each must pass."""

from __future__ import annotations

from typing import Any

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaced": {"namespaced": True, "watchNamespaces": ["team-a", "team-b"]},
    "servicemonitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"r": "p"}}}},
    "custom-image": {
        "image": {"repository": "registry.example/adl-op", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
    },
    "no-peering": {"peering": {"enabled": False}},
    "kueue": {"kueue": {"enabled": True}},
    "kueue-namespaced": {
        "kueue": {"enabled": True},
        "namespaced": True,
        "watchNamespaces": ["team-a"],
    },
    "disruption-budgets": {"scheduler": {"disruptionBudgets": True}},
    "disruption-budgets-namespaced": {
        "scheduler": {"disruptionBudgets": True},
        "namespaced": True,
        "watchNamespaces": ["team-a"],
    },
    "standby": {"replicaCount": 2},  # PodDisruptionBudget, soft anti-affinity
    "policy-knobs": {"scheduler": {"policyKnobs": {"srpt_power": 0.25, "fairness": 0}}},
    "ceilings": {
        "scheduler": {
            "maxPriority": 0,
            "allowNonPreemptible": False,
            "namespacePolicies": {"team-a": {"maxPriority": 10}},
        }
    },
    "metrics-from": {"networkPolicy": {"metricsFrom": [{"namespaceSelector": {}}]}},
    # OpenShift's restricted SCC assigns the UID: null drops a default key
    "arbitrary-uid": {
        "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None}
    },
    "digest": {"image": {"digest": "sha256:" + "0123456789abcdef" * 4}},
    "networkpolicy": {
        "networkPolicy": {"enabled": True, "extraFrom": [{"namespaceSelector": {}}]},
        "namespaced": True,
    },
    "names": {"fullnameOverride": "adl-custom", "nameOverride": "adl-x"},
    "autoscaling": {
        "autoscaling": {"enabled": True, "emptyNodesPerRound": 2, "emptyLowValueNodes": True}
    },
}

#: the variants ``tests/cluster`` installs (seconds each on the real API server). The scopes
#: (cluster-wide, namespaced) and Kueue are installed by tests of their own there; a
#: ServiceMonitor needs the Prometheus operator's CRD, which the test cluster has not; an image
#: is not something the API server checks.
INSTALLED = (
    "standby",
    "no-peering",
    "policy-knobs",
    "ceilings",
    "metrics-from",
    "arbitrary-uid",
    "digest",
    "networkpolicy",
    "names",
)
