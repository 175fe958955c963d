"""The policy's exact replica counts against brute force over every combination of counts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adl.sched.knapsack import best_counts

job_values = st.lists(
    st.one_of(st.floats(0.0, 10.0), st.just(-np.inf)), min_size=1, max_size=5
).map(lambda v: np.array([0.0, *v]))


@settings(max_examples=200, deadline=None)
@given(
    jobs=st.lists(st.tuples(job_values, st.integers(1, 3)), min_size=1, max_size=4),
    free=st.integers(0, 12),
)
def test_best_counts_reach_the_brute_force_optimum(
    jobs: list[tuple[np.ndarray, int]], free: int
) -> None:
    values = [v for v, _ in jobs]
    gpr = [g for _, g in jobs]
    counts = best_counts(values, gpr, free)
    assert sum(c * g for c, g in zip(counts, gpr, strict=True)) <= free
    got = sum(float(v[c]) for v, c in zip(values, counts, strict=True))
    best = max(
        sum(float(v[c]) for v, c in zip(values, combo, strict=True))
        for combo in itertools.product(*(range(len(v)) for v in values))
        if sum(c * g for c, g in zip(combo, gpr, strict=True)) <= free
    )
    assert got == pytest.approx(best)


def test_a_count_worth_no_more_than_a_smaller_one_is_never_chosen() -> None:
    # job 0 is worth as much on 1 replica as on 3: the spare GPUs go to job 1
    counts = best_counts([np.array([0.0, 5.0, 5.0, 5.0]), np.array([0.0, 1.0, 2.0])], [1, 1], 3)
    assert counts == [1, 2]


def test_no_free_gpus_gives_every_job_nothing() -> None:
    assert best_counts([np.array([0.0, 3.0])], [1], 0) == [0]
    with pytest.raises(ValueError):
        best_counts([np.array([0.0, 3.0])], [1], -1)
