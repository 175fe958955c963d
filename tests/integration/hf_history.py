"""Comparing Hugging Face Trainer logs between runs: the end-of-training timings differ."""

from __future__ import annotations

from typing import Any

#: what Trainer's last log entry and train_results.json hold that depends on timing
TIMING = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


def untimed(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log without the timings."""
    return [{k: v for k, v in entry.items() if k not in TIMING} for entry in history]
