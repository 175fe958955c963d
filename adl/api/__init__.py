"""HTTP service for workers: hints, rendezvous, health, metrics.

``create_app(store)`` over any ``ApiStore`` (local SQLite or Kubernetes CRD status)."""

from adl.api.app import create_app
from adl.api.auth import find_owner, generate_token
from adl.api.metrics import METRIC_NAMES, AdlMetrics
from adl.api.store import ApiStore, JobSnapshot, UnknownJob

__all__ = [
    "METRIC_NAMES",
    "AdlMetrics",
    "ApiStore",
    "JobSnapshot",
    "UnknownJob",
    "create_app",
    "find_owner",
    "generate_token",
]
