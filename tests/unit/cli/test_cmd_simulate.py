"""``adl simulate``: tables, --json fields, --plot PNG, and exit code 2 for bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adl.cli.main import app
from adl.sched.sim.traces import default_traces_dir

TRACES = default_traces_dir()
FIELDS = {
    "avg_jct_s",
    "p99_jct_s",
    "makespan_s",
    "restarts_per_job",
    "round_ms_p50",
    "round_ms_p95",
    "jobs",
}


def small_workload(path: Path, offset: int = 0, apps: tuple[str, ...] = ("cifar10", "ncf")) -> Path:
    """A few short cifar10/ncf jobs (seconds to simulate)."""
    rows = [
        ("cifar10-0", 100 + offset, "cifar10", 6, 2048),
        ("ncf-1", 150 + offset, "ncf", 1, 32768),
        ("ncf-2", 400 + offset, "ncf", 1, 32768),
        ("cifar10-3", 900 + offset, "cifar10", 12, 4096),
    ]
    lines = ["name,time,application,num_replicas,batch_size"]
    lines += [",".join(str(x) for x in r) for r in rows if r[2] in apps]
    path.write_text("\n".join(lines) + "\n")
    return path


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, ["simulate", *args], env=env)


def test_json_fields_and_plot_png(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv")
    out, png = tmp_path / "out.json", tmp_path / "plots" / "s.png"
    res = invoke(
        str(wl),
        "--policy",
        "tiresias",
        "--traces",
        str(TRACES),
        "--json",
        str(out),
        "--plot",
        str(png),
    )
    assert res.exit_code == 0, res.output
    assert "avg JCT" in res.output and "cifar10" in res.output and "ncf" in res.output
    doc = json.loads(out.read_text())
    assert doc["policy"] == "tiresias"
    summary = doc["workloads"]["small"]
    assert set(summary) >= FIELDS
    assert summary["jobs"] == 4 and summary["finished"] == 4
    assert 0 < summary["avg_jct_s"] <= summary["p99_jct_s"] <= summary["makespan_s"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 5000


def test_several_policies_and_the_jct_distribution_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adl.sched.sim.plot as plot

    small_workload(tmp_path / "workload-1.csv")
    small_workload(tmp_path / "workload-2.csv", offset=600)
    drawn: list[list[list[str]]] = []  # per figure, per panel: the labels of its lines
    figure = plot.jct_cdf_figure

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        fig = figure(*args, **kwargs)
        drawn.append([[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes])
        return fig

    monkeypatch.setattr(plot, "jct_cdf_figure", recording)
    out, jct_png, gpus_png = tmp_path / "out.json", tmp_path / "jct.png", tmp_path / "gpus.png"
    res = invoke(
        str(tmp_path),
        "-p",
        "fifo,tiresias",
        "--traces",
        str(TRACES),
        "--json",
        str(out),
        "--plot-jct",
        str(jct_png),
        "--plot",
        str(gpus_png),
    )
    assert res.exit_code == 0, res.output
    for workload in ("workload-1", "workload-2"):
        for policy in ("fifo", "tiresias"):
            assert f"{workload} under {policy}" in res.output
    docs = json.loads(out.read_text())["policies"]
    assert [d["policy"] for d in docs] == ["fifo", "tiresias"]
    assert all(list(d["workloads"]) == ["workload-1", "workload-2"] for d in docs)
    assert all(d["rounds_on_events"] is False and d["policy_knobs"] == {} for d in docs)
    # one panel per workload, one line per policy in it
    assert len(drawn) == 1 and len(drawn[0]) == 2
    assert all(
        [label.split(":")[0] for label in panel] == ["fifo", "tiresias"] for panel in drawn[0]
    )
    for png in (jct_png, gpus_png):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_policy_knobs_reach_adl_alone_among_several_policies(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv", apps=("ncf",))
    out = tmp_path / "out.json"
    res = invoke(
        str(wl),
        "-p",
        "adl,fifo",
        "--traces",
        str(TRACES),
        "--json",
        str(out),
        "--policy-knob",
        "fairness=0",
    )
    assert res.exit_code == 0, res.output
    docs = json.loads(out.read_text())["policies"]
    assert [(d["policy"], d["policy_knobs"]) for d in docs] == [
        ("adl", {"fairness": 0.0}),
        ("fifo", {}),
    ]


def test_directory_replays_every_workload(tmp_path: Path) -> None:
    small_workload(tmp_path / "workload-1.csv")
    small_workload(tmp_path / "workload-2.csv", offset=600)
    out = tmp_path / "out.json"
    res = invoke(str(tmp_path), "-p", "fifo", "--traces", str(TRACES), "--json", str(out))
    assert res.exit_code == 0, res.output
    reports = json.loads(out.read_text())["workloads"]
    assert list(reports) == ["workload-1", "workload-2"]
    assert all(set(r) >= FIELDS for r in reports.values())


def test_adl_policy_with_hidden_remaining_work(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv", apps=("ncf",))
    out = tmp_path / "adl.json"
    res = invoke(
        str(wl),
        "--policy",
        "adl",
        "--hide-remaining",
        "--seed",
        "3",
        "--traces",
        str(TRACES),
        "--json",
        str(out),
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["hide_remaining"] is True and doc["seed"] == 3
    assert doc["workloads"]["small"]["finished"] == 2


def test_policy_knobs_reach_the_adl_policy(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv")
    docs = {}
    for name, knobs in (("default", []), ("no-ramp", ["--policy-knob", "ramp_factor=1"])):
        out = tmp_path / f"{name}.json"
        res = invoke(str(wl), "--traces", str(TRACES), "--json", str(out), *knobs)
        assert res.exit_code == 0, res.output
        docs[name] = json.loads(out.read_text())
    assert docs["default"]["policy_knobs"] == {}
    assert docs["no-ramp"]["policy_knobs"] == {"ramp_factor": 1.0}
    default, no_ramp = docs["default"]["workloads"]["small"], docs["no-ramp"]["workloads"]["small"]
    # ramp_factor 1 caps every job at the replicas it has profiled: one, so none ever grows
    assert no_ramp["restarts_per_job"] == 0 < default["restarts_per_job"]
    assert no_ramp["avg_jct_s"] > 2 * default["avg_jct_s"]


def test_adl_reschedules_on_arrivals_unless_fixed_rounds(tmp_path: Path) -> None:
    """As adl's operator does, a round runs when a job arrives: the ncf jobs (submitted 30 s
    and 20 s before a 60 s boundary) start at once; ``--fixed-rounds`` makes them wait."""
    wl = small_workload(tmp_path / "small.csv", apps=("ncf",))
    docs, outputs = {}, {}
    for name, extra in (("events", []), ("fixed", ["--fixed-rounds"])):
        out = tmp_path / f"{name}.json"
        res = invoke(str(wl), "--traces", str(TRACES), "--json", str(out), *extra)
        assert res.exit_code == 0, res.output
        docs[name], outputs[name] = json.loads(out.read_text()), " ".join(res.output.split())
    assert docs["events"]["rounds_on_events"] is True
    assert docs["fixed"]["rounds_on_events"] is False
    assert "at each submission and finish" in outputs["events"]
    assert "at each submission" not in outputs["fixed"] and "every 60 s" in outputs["fixed"]
    events, fixed = (docs[k]["workloads"]["small"]["avg_jct_s"] for k in ("events", "fixed"))
    assert fixed - events == pytest.approx((30 + 20) / 2)


def test_baselines_are_replayed_with_fixed_rounds(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    wl = small_workload(tmp_path / "small.csv", apps=("ncf",))
    res = invoke(str(wl), "-p", "tiresias", "--traces", str(TRACES), "--json", str(out))
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["rounds_on_events"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.csv", "--policy", "fifo"], "not found"),
        (["{wl}", "--policy", "themis"], "unknown policy"),
        (["{wl}", "--policy", "fifo", "--traces", "{tmp}/no-traces"], "traces directory"),
        (["{tmp}", "--policy", "fifo"], "no workload-*.csv"),
        (["{wl}", "--policy-knob", "srpt_pwr=1"], "unknown policy knob 'srpt_pwr'"),
        (["{wl}", "--policy-knob", "ramp_factor=0.5"], "ramp_factor must be in [1, inf)"),
        (["{wl}", "-p", "fifo", "--policy-knob", "fairness=0"], "adl policy only"),
        (["{wl}", "-p", "fifo", "--plot", "{tmp}/x.txt"], "cannot write txt"),
        (["{wl}", "-p", "fifo", "--plot-jct", "{tmp}/x.txt"], "--plot-jct"),
        (["{wl}", "-p", "fifo,themis"], "unknown policy 'themis'"),
        (["{wl}", "-p", "fifo,tiresias,fifo"], "a policy is named twice"),
        (["{wl}", "-p", "adl,fifo", "--decisions", "{tmp}/d.tsv"], "--decisions takes one policy"),
        (["{tmp}/empty.csv", "-p", "fifo"], "empty.csv: no jobs"),
        (["{tmp}/short.csv", "-p", "fifo"], "short.csv: missing column(s) batch_size"),
        (["{tmp}/nan.csv", "-p", "fifo"], "nan.csv:2: time 'soon' is not a number"),
        (["{tmp}/neg.csv", "-p", "fifo"], "neg.csv:2: num_replicas must be >= 1, got 0"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    wl = small_workload(tmp_path / "small.csv")
    head = "name,time,application,num_replicas,batch_size\n"
    (tmp_path / "empty.csv").write_text(head)
    (tmp_path / "short.csv").write_text("name,time,application,num_replicas\nj,0,cifar10,1\n")
    (tmp_path / "nan.csv").write_text(head + "j,soon,cifar10,1,128\n")
    (tmp_path / "neg.csv").write_text(head + "j,0,cifar10,0,128\n")
    argv = [a.format(wl=wl, tmp=tmp_path) for a in args]
    res = invoke(*argv)
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())  # rich wraps long lines
    assert "Traceback" not in res.output


def test_traces_default_comes_from_the_environment(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv")
    res = invoke(str(wl), "--policy", "fifo", env={"ADL_TRACES": str(tmp_path / "elsewhere")})
    assert res.exit_code == 2
    assert "elsewhere" in res.output


def test_simulate_does_not_import_torch() -> None:
    import subprocess

    code = (
        "import sys; from typer.testing import CliRunner; from adl.cli.main import app; "
        "r = CliRunner().invoke(app, ['simulate', 'nope.csv']); "
        "assert r.exit_code == 2; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decisions_log_every_allocation_change_with_its_reason(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv")
    out = tmp_path / "decisions.tsv"
    res = invoke(str(wl), "--traces", str(TRACES), "--decisions", str(out))
    assert res.exit_code == 0, res.output
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert rows and all(len(r) == 4 and r[0] == "small" for r in rows)
    first = {job: why for _, _, job, why in reversed(rows)}  # each job's first decision
    assert set(first) == {"cifar10-0", "ncf-1", "ncf-2", "cifar10-3"}
    assert all(why.startswith("started with") for why in first.values())
    times = [int(r[1]) for r in rows]
    assert times == sorted(times)
    assert any(why.startswith(("grew", "shrank")) and "speedup" in why for *_, why in rows)


def test_peer_conditions_replays_adl_every_60_s_with_per_model_restarts(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv")
    out = tmp_path / "peer.json"
    res = invoke(str(wl), "--traces", str(TRACES), "--json", str(out), "--peer-conditions")
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["peer_conditions"] is True and doc["rounds_on_events"] is False
    small = doc["workloads"]["small"]
    assert set(small["restarts_per_job_by_app"]) == {"cifar10", "ncf"}
    assert small["max_resumes_per_hour"] >= 0
