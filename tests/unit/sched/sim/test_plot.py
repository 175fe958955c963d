"""The simulator's plots: the JCT distribution per policy (``jct_cdf``, ``jct_cdf_figure``),
checked through the figure's artists, not its pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.lines import Line2D

from adl.sched.sim.plot import check_plot_path, jct_cdf, jct_cdf_figure, plot_jct_cdf
from adl.sched.sim.simulator import JobOutcome, SimResult


def replay(jcts: list[int | None]) -> SimResult:
    """A replay whose jobs (submitted at 100 s) took these JCTs; None: never finished."""
    return SimResult(
        jobs=[
            JobOutcome(f"job-{i}", "cifar10", 100, None if jct is None else 100 + jct, 0, 0.0)
            for i, jct in enumerate(jcts)
        ]
    )


def test_jct_cdf_counts_every_job_and_starts_from_zero() -> None:
    x, y = jct_cdf(replay([300, 100, None, 200]))
    assert x.tolist() == [100, 100, 200, 300]
    assert y.tolist() == [0, 0.25, 0.5, 0.75]  # the unfinished job keeps it below 1
    x, y = jct_cdf(replay([None]))
    assert len(x) == len(y) == 0


def test_one_panel_per_workload_and_one_line_per_policy() -> None:
    panels = [
        ("workload-1", [("adl", replay([100, 200, 400, 800])), ("sia", replay([150, 300, None]))]),
        ("workload-2", [("adl", replay([50])), ("sia", replay([None, None]))]),
    ]
    fig = jct_cdf_figure(panels, title="JCT")
    try:
        axes = fig.get_axes()
        assert len(axes) == 2
        for ax, (workload, runs) in zip(axes, panels, strict=True):
            assert ax.get_title(loc="left").startswith(workload)
            assert ax.get_xscale() == "log"
            lines = [
                a for a in ax.get_children() if isinstance(a, Line2D) and a.get_label()[0] != "_"
            ]
            assert len(lines) == len(runs)
            labels = [t.get_text() for t in ax.get_legend().get_texts()]
            assert [label.split(":")[0] for label in labels] == [p for p, _ in runs]
            for line, (_, result) in zip(lines, runs, strict=True):
                y = np.asarray(line.get_ydata(), dtype=float)
                assert np.all(np.diff(y) >= 0)  # a distribution never falls
                done = sum(j.jct_s is not None for j in result.jobs)
                assert (y[-1] if len(y) else 0.0) == pytest.approx(done / len(result.jobs))
        first = [t.get_text() for t in axes[0].get_legend().get_texts()]
        assert first[0] == "adl: mean 375 s, p99 788 s"
        assert first[1] == "sia: mean 225 s, p99 298 s, 2 of 3 jobs finished"
        assert [t.get_text() for t in axes[1].get_legend().get_texts()][1] == "sia: no job finished"
        assert fig.texts[0].get_text() == "JCT"  # the suptitle
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_plot_jct_cdf_writes_a_png(tmp_path: Path) -> None:
    out = plot_jct_cdf([("w", [("adl", replay([60, 120]))])], tmp_path / "sub" / "jct.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="nothing to plot"):
        jct_cdf_figure([("w", [])])
    with pytest.raises(ValueError, match=r"--plot-jct x\.txt: cannot write txt"):
        check_plot_path("x.txt", "--plot-jct")
