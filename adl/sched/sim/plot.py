"""Draw replays: a schedule (GPUs held by each job over time, stacked, one panel per replay) and
the distribution of job completion times (one line per policy, one panel per workload).

Uses matplotlib's Agg backend (no display needed) and imports it only when called, so the
simulator and the CLI stay importable without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from adl.sched.sim.simulator import SimResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: (policy, its replay) for each policy replayed on one workload
PolicyRuns = Sequence[tuple[str, SimResult]]


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


def check_plot_path(path: Path | str, option: str = "--plot") -> None:
    """Raise ``ValueError`` unless matplotlib can write this file type: checked before a long
    replay, not after it (``option`` names the path in the message)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ValueError(
            f"{option} {path}: cannot write {suffix or 'a file without an extension'}; "
            f"use one of .{', .'.join(sorted(formats))}"
        )


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, path: Path | str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(
        out, dpi=100, pil_kwargs={"optimize": True} if out.suffix.lower() == ".png" else None
    )
    _pyplot().close(fig)
    return out


def plot_schedules(
    results: Sequence[tuple[str, SimResult]], path: Path | str, *, title: str = ""
) -> Path:
    """Write a PNG with one stacked-area panel per (label, result), all on one time axis;
    returns the path."""
    plt = _pyplot()
    if not results:
        raise ValueError("nothing to plot")
    fig, axes = plt.subplots(
        len(results), 1, figsize=(10, 2.6 * len(results)), squeeze=False, sharex=False
    )
    cmap = plt.get_cmap("tab20")
    end_h = max((r.timeline[-1][0] / 3600.0 for _, r in results if r.timeline), default=0.0)
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
        ax.set_xlim(0, end_h or 1.0)
        ax.set_ylim(0, max(result.total_gpus, float(lower.max()) if len(lower) else 0) * 1.05 + 1)
    axes[-1, 0].set_xlabel("simulated time (hours)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def jct_cdf(result: SimResult) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(JCTs in seconds, fraction of the workload's jobs finished within each): the empirical
    distribution of job completion times, starting from 0 at the shortest JCT. Jobs that never
    finished count in the denominator, so the fraction ends below 1 when some did not."""
    jcts = np.sort(np.array([j.jct_s for j in result.jobs if j.jct_s is not None], np.float64))
    if not len(jcts):
        return np.zeros(0), np.zeros(0)
    done = np.arange(1, len(jcts) + 1, dtype=np.float64) / len(result.jobs)
    return np.concatenate([jcts[:1], jcts]), np.concatenate([[0.0], done])


def jct_cdf_figure(panels: Sequence[tuple[str, PolicyRuns]], *, title: str = "") -> Figure:
    """One panel per (workload, runs); in it one step line per (policy, replay): the fraction of
    the workload's jobs finished within x seconds of their submission (``jct_cdf``), x on a log
    scale. Each line's label is its policy with its mean and p99 JCT. The caller owns the figure
    (``plot_jct_cdf`` writes it and closes it)."""
    plt = _pyplot()
    if not panels or not all(runs for _, runs in panels):
        raise ValueError("nothing to plot")
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 4.2 * len(panels)), squeeze=False)
    for ax, (workload, runs) in zip(axes[:, 0], panels, strict=True):
        for policy, result in runs:
            x, y = jct_cdf(result)
            label = policy
            if len(x):
                jcts = x[1:]
                label += f": mean {jcts.mean():,.0f} s, p99 {np.percentile(jcts, 99):,.0f} s"
                if y[-1] < 1.0:
                    label += f", {len(jcts)} of {len(result.jobs)} jobs finished"
            else:
                label += ": no job finished"
            ax.step(np.maximum(x, 1.0), y, where="post", linewidth=1.5, label=label)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("job completion time (s, log scale)")
        ax.set_ylabel("fraction of jobs finished")
        ax.set_title(f"{workload}: {len(runs[0][1].jobs)} jobs", loc="left", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_jct_cdf(
    panels: Sequence[tuple[str, PolicyRuns]], path: Path | str, *, title: str = ""
) -> Path:
    """Write ``jct_cdf_figure`` as a PNG (or any type ``check_plot_path`` accepts); returns
    the path."""
    return _save(jct_cdf_figure(panels, title=title), path)
