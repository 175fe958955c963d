"""Synthetic workloads drawn the same way as the four published ones, for tests on unseen jobs.

Assumptions (all measured on ``workloads/workload-1..4.csv``, 640 jobs pooled; see
:func:`profile_from_workloads`, which recomputes them and a test checks they still agree):

- **Arrivals** are a non-homogeneous Poisson process over ``hours`` whose rate is piecewise
  constant per eighth of the window, proportional to the pooled per-hour submission counts of
  the published workloads (they share a clear shape: a lull in hour 3, a peak in hour 6,
  inherited from the production trace the published generator sampled). Conditioned on the
  number of jobs, arrival times are i.i.d. from that density, which is how we draw them.
- **Applications** are i.i.d. with the pooled frequencies (about 41% ncf, 38% cifar10,
  9% deepspeech2, 6% bert, 5% yolov3, 2% imagenet), independent of the arrival time (the
  per-hour mix of the published files shows no trend beyond sampling noise at this size).
- **Static configurations** (``num_replicas``, ``batch_size``), used only by the non-adaptive
  baselines, are drawn jointly per application from the empirical pairs of the published files
  with their frequencies (so every pair is one a person actually hand-tuned).
- ``load`` scales the number of jobs (``round(jobs * load)``) over the same window, as the
  published 0.5x/1.5x/2x variants do.
- Names are ``<application>-<index>`` in submission order, like the published files.

Everything comes from one ``numpy.random.default_rng(seed)``: the same seed gives the same
workload on every machine.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adl.sched.sim.workload import WorkloadJob, load_workload


@dataclass(frozen=True)
class WorkloadProfile:
    """Empirical distributions a workload is drawn from (counts, normalized when sampling)."""

    #: application -> number of jobs seen
    applications: tuple[tuple[str, int], ...]
    #: submissions per equal slice of the window, in time order
    arrival_bins: tuple[int, ...]
    #: application -> ((num_replicas, batch_size), count) pairs
    configs: tuple[tuple[str, tuple[tuple[tuple[int, int], int], ...]], ...]


#: the four published workloads, pooled (regenerate with :func:`profile_from_workloads`)
DEFAULT_PROFILE = WorkloadProfile(
    applications=(
        ("bert", 36),
        ("cifar10", 242),
        ("deepspeech2", 58),
        ("imagenet", 11),
        ("ncf", 263),
        ("yolov3", 30),
    ),
    arrival_bins=(73, 72, 32, 84, 95, 138, 77, 69),
    configs=(
        ("bert", (((6, 384), 11), ((8, 384), 6), ((12, 384), 11), ((16, 384), 8))),
        ("cifar10", (((6, 2048), 67), ((8, 2048), 53), ((12, 4096), 73), ((16, 4096), 49))),
        ("deepspeech2", (((6, 320), 15), ((8, 320), 17), ((12, 640), 26))),
        ("imagenet", (((24, 3200), 4), ((32, 6400), 5), ((48, 6400), 2))),
        ("ncf", (((1, 32768), 263),)),
        ("yolov3", (((4, 64), 30),)),
    ),
)

WINDOW_S = 8 * 3600  # the published workloads' submission window


def profile_from_workloads(
    workloads: Iterable[Sequence[WorkloadJob]], *, bins: int = 8, window_s: int = WINDOW_S
) -> WorkloadProfile:
    """Pool workloads into the empirical distributions :func:`generate_workload` samples."""
    jobs = [j for w in workloads for j in w]
    apps = Counter(j.application for j in jobs)
    slots = Counter(min(int(j.submit_time * bins // window_s), bins - 1) for j in jobs)
    pairs: dict[str, Counter[tuple[int, int]]] = {}
    for j in jobs:
        pairs.setdefault(j.application, Counter())[(j.num_replicas, j.batch_size)] += 1
    return WorkloadProfile(
        applications=tuple(sorted(apps.items())),
        arrival_bins=tuple(slots.get(i, 0) for i in range(bins)),
        configs=tuple(
            (app, tuple(sorted(counter.items()))) for app, counter in sorted(pairs.items())
        ),
    )


def generate_workload(
    seed: int,
    load: float = 1.0,
    jobs: int = 160,
    hours: float = 8,
    *,
    profile: WorkloadProfile = DEFAULT_PROFILE,
) -> list[WorkloadJob]:
    """A workload of ``round(jobs * load)`` jobs over ``hours``, sorted by submission time."""
    if load <= 0 or jobs < 1 or hours <= 0:
        raise ValueError("need load > 0, jobs >= 1 and hours > 0")
    rng = np.random.default_rng(seed)
    count = max(1, round(jobs * load))
    bins = np.asarray(profile.arrival_bins, dtype=np.float64)
    width = hours * 3600.0 / len(bins)
    slot = rng.choice(len(bins), size=count, p=bins / bins.sum())
    times = np.floor((slot + rng.random(count)) * width).astype(np.int64)
    names = [a for a, _ in profile.applications]
    weights = np.array([c for _, c in profile.applications], dtype=np.float64)
    apps = rng.choice(len(names), size=count, p=weights / weights.sum())
    configs = dict(profile.configs)
    order = np.argsort(times, kind="stable")
    out: list[WorkloadJob] = []
    for index, i in enumerate(order):
        app = names[int(apps[i])]
        pairs = configs[app]
        freq = np.array([c for _, c in pairs], dtype=np.float64)
        (replicas, batch), _ = pairs[int(rng.choice(len(pairs), p=freq / freq.sum()))]
        out.append(
            WorkloadJob(
                name=f"{app}-{index}",
                submit_time=int(times[i]),
                application=app,
                num_replicas=replicas,
                batch_size=batch,
            )
        )
    return out


def write_workload(jobs: Sequence[WorkloadJob], path: Path | str) -> Path:
    """Write the published CSV format (``name,time,application,num_replicas,batch_size``)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["name", "time", "application", "num_replicas", "batch_size"])
        for j in jobs:
            writer.writerow([j.name, j.submit_time, j.application, j.num_replicas, j.batch_size])
    return out


def published_profile(workloads_dir: Path | str) -> WorkloadProfile:
    """The profile of ``workload-1..4.csv`` in a directory (what DEFAULT_PROFILE was made from)."""
    base = Path(workloads_dir)
    return profile_from_workloads(load_workload(base / f"workload-{i}.csv") for i in range(1, 5))
