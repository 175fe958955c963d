"""``adl submit`` flags build the same spec a manifest would, for either backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from adl.cli.submit import manifest, spec_from_command
from adl.local.client import in_submitting_directory
from adl.operator.client import preflight


def _spec(**kw: object):  # type: ignore[no-untyped-def]
    base: dict = dict(min_replicas=1, max_replicas=4, env=[], workdir=None, max_restarts=None)
    base.update(kw)
    return spec_from_command(["python", "train.py"], **base)


def test_cluster_flags_reach_the_spec_and_pass_preflight() -> None:
    spec = _spec(
        image="registry.example/adl-job:0.1.0",
        gpus_per_replica=2,
        storage_class="fast",
        checkpoint_size="20Gi",
        env=["A=1"],
    )
    assert spec.trainer["image"] == "registry.example/adl-job:0.1.0"
    assert spec.trainer["env"] == [{"name": "A", "value": "1"}]
    assert "workingDir" not in spec.trainer
    assert spec.gpus_per_replica == 2
    assert spec.checkpoint.storage_class == "fast" and spec.checkpoint.size == "20Gi"
    assert preflight("j", spec, storage_classes=["fast"], node_gpus=[4, 4]) == []


def test_without_an_image_kubernetes_refuses_and_says_how() -> None:
    (err,) = preflight("j", _spec(), storage_classes=None, node_gpus=None)
    assert "--image" in err


def test_claim_and_storage_class_together_are_refused() -> None:
    with pytest.raises(ValueError, match="claimName or storageClass"):
        _spec(image="img:1", claim="ckpt", storage_class="fast")


def test_bad_env_is_refused() -> None:
    with pytest.raises(ValueError, match="NAME=VALUE"):
        _spec(env=["NOEQUALS"])


def test_priority_and_weight_reach_the_spec_and_are_bounded() -> None:
    spec = _spec(priority=10, weight=2.5)
    assert (spec.priority, spec.weight) == (10, 2.5)
    assert (_spec().priority, _spec().weight) == (0, 1.0)
    with pytest.raises(ValueError, match="priority"):
        _spec(priority=5000)
    with pytest.raises(ValueError, match="weight"):
        _spec(weight=0)


def test_the_job_kind_reaches_the_spec_and_is_validated() -> None:
    assert _spec(job_kind="bert-large").job_kind == "bert-large"
    assert _spec().job_kind is None  # the scheduler derives one from the command
    with pytest.raises(ValueError, match="jobKind"):
        _spec(job_kind="two words")


def test_the_job_kind_flag_is_a_manifest_setting() -> None:
    from typer.testing import CliRunner

    from adl.cli.main import app

    result = CliRunner().invoke(
        app, ["submit", "-f", str(EXAMPLE), "--job-kind", "k", "--backend", "local"]
    )
    assert result.exit_code == 2 and "--job-kind: set these in the manifest" in result.output


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "synthetic.yaml"


def test_the_example_manifest_passes_both_backends_checks() -> None:
    name, namespace, spec = manifest(EXAMPLE)
    assert (name, namespace) == ("synthetic", None)
    assert spec.trainer["command"][:2] == ["python", "examples/train_synthetic.py"]
    assert preflight(name, spec, storage_classes=["standard"], node_gpus=[4, 4]) == []


def test_a_local_job_runs_where_it_was_submitted_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _, _, spec = manifest(EXAMPLE)  # no workingDir: the submitting directory
    assert in_submitting_directory(spec).trainer["workingDir"] == str(tmp_path)
    relative = _spec(workdir="sub")
    assert in_submitting_directory(relative).trainer["workingDir"] == str(tmp_path / "sub")
    absolute = _spec(workdir="/srv/train")
    assert in_submitting_directory(absolute) == absolute
