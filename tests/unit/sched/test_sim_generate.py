"""The workload generator: deterministic per seed, and drawn like the published workloads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sim_kit import WORKLOADS

from adl.sched.sim.generate import (
    DEFAULT_PROFILE,
    generate_workload,
    profile_from_workloads,
    published_profile,
    write_workload,
)
from adl.sched.sim.workload import load_workload


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    assert generate_workload(7) == generate_workload(7)
    assert generate_workload(7) != generate_workload(8)


def test_shape_of_one_workload() -> None:
    jobs = generate_workload(3)
    assert len(jobs) == 160
    times = [j.submit_time for j in jobs]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 8 * 3600
    assert [j.name for j in jobs] == [f"{j.application}-{i}" for i, j in enumerate(jobs)]
    configs = dict(DEFAULT_PROFILE.configs)
    for j in jobs:  # every static configuration is one the published files use for that app
        assert (j.num_replicas, j.batch_size) in {pair for pair, _ in configs[j.application]}


@pytest.mark.parametrize("load", [0.5, 1.5, 2.0])
def test_load_scales_the_number_of_jobs_over_the_same_window(load: float) -> None:
    jobs = generate_workload(1, load=load)
    assert len(jobs) == round(160 * load)
    assert max(j.submit_time for j in jobs) < 8 * 3600
    assert len(generate_workload(1, jobs=40, hours=2)) == 40
    assert max(j.submit_time for j in generate_workload(1, jobs=40, hours=2)) < 2 * 3600


def test_default_profile_is_the_published_workloads_pooled() -> None:
    assert published_profile(WORKLOADS) == DEFAULT_PROFILE


def test_application_mix_and_arrivals_match_the_published_workloads() -> None:
    published = [load_workload(WORKLOADS / f"workload-{i}.csv") for i in range(1, 5)]
    target = Counter(j.application for w in published for j in w)
    generated = [generate_workload(seed) for seed in range(1, 21)]  # 3200 jobs
    got = Counter(j.application for w in generated for j in w)
    n_target, n_got = sum(target.values()), sum(got.values())
    assert set(got) == set(target)
    for app in target:
        assert got[app] / n_got == pytest.approx(target[app] / n_target, abs=0.03)
    # the diurnal shape: the quietest and the busiest hour are the published ones
    pub_bins = np.array(profile_from_workloads(published).arrival_bins)
    gen_bins = np.array(profile_from_workloads(generated).arrival_bins)
    assert int(np.argmin(gen_bins)) == int(np.argmin(pub_bins))
    assert int(np.argmax(gen_bins)) == int(np.argmax(pub_bins))
    assert np.corrcoef(pub_bins, gen_bins)[0, 1] > 0.9


def test_written_workload_round_trips(tmp_path: Path) -> None:
    jobs = generate_workload(5, jobs=20)
    assert load_workload(write_workload(jobs, tmp_path / "w.csv")) == jobs
