"""Kubernetes timestamps, which arrive as RFC 3339 strings from the API server (or kmock) and as
``datetime`` objects from the kubernetes client's typed models."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def parse_time(value: Any) -> datetime | None:
    """``value`` as a datetime; None when it is unset or empty."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
