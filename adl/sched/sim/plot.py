"""Draw a replay's schedule: GPUs held by each job over time, stacked, one panel per workload.

Uses matplotlib's Agg backend (no display needed) and imports it only when called, so the
simulator and the CLI stay importable without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from adl.sched.sim.simulator import SimResult


def gpu_matrix(result: SimResult) -> tuple[NDArray[np.float64], list[str], NDArray[np.float64]]:
    """(times in seconds, job names in order of first allocation, GPUs [job, time]).

    Each timeline entry holds the allocation decided at that time, in force until the next."""
    times = np.array([t for t, _ in result.timeline], dtype=np.float64)
    order: dict[str, int] = {}
    for _, alloc in result.timeline:
        for name, gpus in alloc.items():
            if gpus and name not in order:
                order[name] = len(order)
    mat = np.zeros((len(order), len(times)), dtype=np.float64)
    for col, (_, alloc) in enumerate(result.timeline):
        for name, gpus in alloc.items():
            if gpus:
                mat[order[name], col] = gpus
    return times, list(order), mat


def check_plot_path(path: Path | str) -> None:
    """Raise ``ValueError`` unless matplotlib can write this file type: checked before a long
    replay, not after it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ValueError(
            f"--plot {path}: cannot write {suffix or 'a file without an extension'}; "
            f"use one of .{', .'.join(sorted(formats))}"
        )


def plot_schedules(
    results: Sequence[tuple[str, SimResult]], path: Path | str, *, title: str = ""
) -> Path:
    """Write a PNG with one stacked-area panel per (label, result); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not results:
        raise ValueError("nothing to plot")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(
        len(results), 1, figsize=(12, 3.2 * len(results)), squeeze=False, sharex=False
    )
    cmap = plt.get_cmap("tab20")
    for ax, (label, result) in zip(axes[:, 0], results, strict=True):
        times, names, mat = gpu_matrix(result)
        hours = times / 3600.0
        lower = np.zeros(len(times))
        for i in range(len(names)):
            upper = lower + mat[i]
            ax.fill_between(hours, lower, upper, step="post", color=cmap(i % 20), linewidth=0)
            lower = upper
        if result.total_gpus:
            ax.axhline(result.total_gpus, color="black", linestyle="--", linewidth=0.8)
        ax.set_ylabel("GPUs")
        ax.set_title(f"{label}: {len(names)} jobs", loc="left", fontsize=10)
        ax.set_xlim(0, float(hours[-1]) if len(hours) else 1.0)
        ax.set_ylim(0, max(result.total_gpus, float(lower.max()) if len(lower) else 0) * 1.05 + 1)
    axes[-1, 0].set_xlabel("simulated time (hours)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
