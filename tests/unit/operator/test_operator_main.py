"""The operator's command line (what the chart passes)."""

from __future__ import annotations

import pytest

from adl.operator.main import parse_args, policy_factory
from adl.sched.policy_knobs import Knobs


def test_cluster_wide_with_peering() -> None:
    o = parse_args(["-A", "--peering=adl", "--node-selector=pool=gpu", "--round-interval=10"])
    assert o.all_namespaces and o.peering == "adl" and not o.standalone
    assert o.node_selector == {"pool": "gpu"} and o.round_interval == 10


def test_a_node_is_lost_after_a_minute_unless_told() -> None:
    assert parse_args(["-A"]).node_lost_after == 60
    assert parse_args(["-A", "--node-lost-after=15"]).node_lost_after == 15


def test_namespaced_defaults_to_standalone_without_peering() -> None:
    o = parse_args(["--namespace=a", "--namespace=b"])
    assert o.namespaces == ["a", "b"] and not o.all_namespaces and o.standalone


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-A", "--namespace=a"],
        ["-A", "--node-selector=novalue"],
        ["-A", "--round-interval=0"],
        ["-A", "--peering=x", "--standalone"],
        ["-A", "--policy-knob=srpt_pwr=0.25"],
        ["-A", "--policy-knob=srpt_power=high"],
        ["-A", "--policy-knob=max_restart_penalty=1.5"],
        ["-A", "--metrics-port=8080"],  # the API's port
        ["-A", "--port=9000", "--metrics-port=9000"],
        ["-A", "--metrics-port=8081"],  # kopf's liveness port
        ["-A", "--node-lost-after=0"],
    ],
)
def test_bad_arguments_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_api_docs_are_off_and_metrics_share_the_api_port_unless_asked() -> None:
    o = parse_args(["-A"])
    assert o.api_docs is False and o.metrics_port is None
    o = parse_args(["-A", "--api-docs", "--metrics-port=8082"])
    assert o.api_docs is True and o.metrics_port == 8082


def test_operator_modules_import_without_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import adl.operator.handlers, adl.operator.client, adl.operator.main, "
        "adl.cli.cmd_crd; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_peering_priority_prefers_the_oldest_replica_and_is_distinct() -> None:
    from adl.operator.main import peering_priority

    active, standby = peering_priority(1_700_000_000.0), peering_priority(1_700_000_000.25)
    assert active > standby  # a replica started later never takes over from a live one
    assert parse_args(["-A", "--peering=adl"]).priority is None
    assert parse_args(["-A", "--peering=adl", "--priority=7"]).priority == 7


def test_policy_knobs_reach_the_policy_the_operator_runs() -> None:
    o = parse_args(["-A", "--policy-knob=srpt_power=0.25", "--policy-knob=fairness=0,dp=0"])
    assert o.policy_knobs == {"srpt_power": 0.25, "fairness": 0.0, "dp": 0.0}
    policy = policy_factory(o.policy_knobs)()
    knobs = policy.knobs  # type: ignore[attr-defined]
    assert (knobs.srpt_power, knobs.fairness, knobs.dp) == (0.25, 0.0, 0.0)
    assert knobs == Knobs(srpt_power=0.25, fairness=0.0, dp=0.0)  # the rest keep their defaults
    assert policy_factory({})().knobs.srpt_power == 0.5  # type: ignore[attr-defined]


def test_the_gpu_type_label_is_gpu_feature_discoverys_unless_told() -> None:
    assert parse_args(["-A"]).gpu_type_label == "nvidia.com/gpu.product"
    told = parse_args(["-A", "--gpu-type-label=node.kubernetes.io/instance-type"])
    assert told.gpu_type_label == "node.kubernetes.io/instance-type"
    for bad in ("", "a b", "/name", "x/" + "n" * 64):
        with pytest.raises(SystemExit):
            parse_args(["-A", f"--gpu-type-label={bad}"])
