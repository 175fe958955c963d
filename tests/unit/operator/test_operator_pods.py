"""Pod, Service, Secret and claim builders; label selection the API server would do."""

from __future__ import annotations

import pytest

from adl.models import AdaptiveJobSpec
from adl.operator import pods as P

JOB = P.JobRef(name="bert", namespace="ml", uid="u-1")


def spec(**kw: object) -> AdaptiveJobSpec:
    trainer = {
        "name": "t",
        "image": "img:1",
        "command": ["python", "train.py"],
        "args": ["--x"],
        "env": [{"name": "USER_VAR", "value": "1"}, {"name": "ADL_RANK", "value": "bogus"}],
    }
    template = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"containers": [trainer, {"name": "sidecar", "image": "s"}]},
    }
    return AdaptiveJobSpec.model_validate({"template": template, **kw})


def test_node_slots_and_ranks_are_contiguous_per_node() -> None:
    alloc = ["b", "a", "b", "c", "a"]
    assert P.node_slots(alloc) == [("b", 2), ("a", 2), ("c", 1)]
    assert P.rank_offsets(alloc) == [0, 2, 4]


def test_worker_env_per_pod() -> None:
    alloc = ["n1", "n1", "n2"]
    env0 = P.worker_env(JOB, 4, alloc, 0, "http://api:8080")
    env1 = P.worker_env(JOB, 4, alloc, 1, "http://api:8080")
    assert env0["ADL_JOB"] == "ml/bert" and env0["ADL_GROUP"] == "4"
    assert (env0["ADL_RANK"], env0["ADL_LOCAL_WORLD_SIZE"]) == ("0", "2")
    assert (env1["ADL_RANK"], env1["ADL_LOCAL_WORLD_SIZE"]) == ("2", "1")
    assert env0["ADL_WORLD_SIZE"] == env1["ADL_WORLD_SIZE"] == "3"
    assert env0["ADL_NUM_NODES"] == "2"
    assert env0["ADL_MASTER_ADDR"] == env1["ADL_MASTER_ADDR"] == "bert-g4-0.bert.ml.svc"
    assert env0["ADL_TOKEN_FILE"] == "/var/run/adl/token"
    assert env0["ADL_CHECKPOINT_DIR"].startswith("/adl/checkpoint/")


def test_pod_for_two_replicas() -> None:
    env = P.worker_env(JOB, 2, ["n1", "n1"], 0, "http://api")
    pod = P.build_pod(JOB, spec(gpusPerReplica=2), group=2, index=0, node="n1", replicas=2, env=env)
    meta, pspec = pod["metadata"], pod["spec"]
    assert meta["name"] == "bert-g2-0" and meta["namespace"] == "ml"
    assert meta["labels"] == {
        "team": "a",
        "adl.dev/job": "bert",
        "adl.dev/group": "2",
        "adl.dev/node-index": "0",
        "app.kubernetes.io/managed-by": "adl",
    }
    assert meta["ownerReferences"] == [P.owner_reference(JOB)]
    trainer, sidecar = pspec["containers"]
    assert sidecar == {"name": "sidecar", "image": "s"}
    assert trainer["command"] == [
        "python",
        "-m",
        "adl.client_lib.launch",
        "--nproc",
        "2",
        "--",
        "python",
        "train.py",
        "--x",
    ]
    assert trainer["args"] == []
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "4"
    env_names = [e["name"] for e in trainer["env"]]
    assert env_names.count("ADL_RANK") == 1 and "USER_VAR" in env_names
    assert {"name": "ADL_RANK", "value": "0"} in trainer["env"]
    assert pspec["restartPolicy"] == "Never"
    assert pspec["automountServiceAccountToken"] is False  # user code gets no API token
    assert pspec["terminationGracePeriodSeconds"] == 60
    assert (pspec["hostname"], pspec["subdomain"]) == ("bert-g2-0", "bert")
    term = pspec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    vols = {v["name"]: v for v in pspec["volumes"]}
    assert vols["adl-checkpoint"]["persistentVolumeClaim"]["claimName"] == "bert-checkpoint"
    assert vols["adl-token"]["secret"]["secretName"] == "bert-adl-token"


def test_single_replica_keeps_the_users_command_and_no_gpu_for_cpu_jobs() -> None:
    pod = P.build_pod(JOB, spec(gpusPerReplica=0), group=1, index=0, node="n", replicas=1, env={})
    trainer = pod["spec"]["containers"][0]
    assert trainer["command"] == ["python", "train.py"] and trainer["args"] == ["--x"]
    assert "nvidia.com/gpu" not in (trainer.get("resources") or {}).get("limits", {})


def test_a_template_that_wants_the_api_token_keeps_it() -> None:
    s = spec()
    s.template["spec"]["automountServiceAccountToken"] = True
    pod = P.build_pod(JOB, s, group=1, index=0, node="n", replicas=1, env={})
    assert pod["spec"]["automountServiceAccountToken"] is True
    named = spec()
    named.template["spec"]["serviceAccountName"] = "trainer-sa"  # its own account: its token
    pod = P.build_pod(JOB, named, group=1, index=0, node="n", replicas=1, env={})
    assert "automountServiceAccountToken" not in pod["spec"]


def test_multi_replica_pod_needs_a_command() -> None:
    s = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "image": "only-entrypoint"}]}}}
    )
    with pytest.raises(ValueError, match="command is required"):
        P.build_pod(JOB, s, group=1, index=0, node="n", replicas=2, env={})


def test_checkpoint_claims() -> None:
    assert P.build_pvc(JOB, spec(checkpoint={"claimName": "shared"})) is None
    assert P.checkpoint_claim(JOB, spec(checkpoint={"claimName": "shared"})) == "shared"
    pvc = P.build_pvc(JOB, spec(checkpoint={"storageClass": "fast", "size": "5Gi"}))
    assert pvc is not None
    assert pvc["spec"]["storageClassName"] == "fast"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    default = P.build_pvc(JOB, spec())
    assert default is not None and "storageClassName" not in default["spec"]


def test_service_and_secret() -> None:
    svc = P.build_service(JOB)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"] == {"adl.dev/job": "bert"}
    secret = P.build_token_secret(JOB, "tok")
    assert secret["stringData"] == {"token": "tok"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-1"


@pytest.mark.parametrize(
    ("labels", "selector", "expected"),
    [
        ({"adl.dev/job": "a"}, "adl.dev/job=a", True),
        ({"adl.dev/job": "ab"}, "adl.dev/job=a", False),
        ({"adl.dev/job": "a", "adl.dev/group": "2"}, "adl.dev/job=a,adl.dev/group=2", True),
        ({"adl.dev/job": "a", "adl.dev/group": "3"}, "adl.dev/job=a,adl.dev/group=2", False),
        ({"adl.dev/job": "a"}, "adl.dev/job==a", True),
        ({"adl.dev/job": "a"}, "adl.dev/job!=a", False),
        ({}, "adl.dev/job!=a", True),
        ({"x": "1"}, "x", True),
        ({}, "x", False),
        ({"x": "1"}, "!x", False),
    ],
)
def test_label_selection(labels: dict[str, str], selector: str, expected: bool) -> None:
    assert P.matches_selector(labels, selector) is expected


def test_slot_resource_is_configurable() -> None:
    pod = P.build_pod(
        JOB, spec(gpusPerReplica=1), group=1, index=0, node="n", replicas=3, env={}, resource="cpu"
    )
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "3"}


def test_a_templates_node_name_and_scheduler_never_reach_the_pods() -> None:
    """Placement is adl's: a pod bound by nodeName, or handed to another scheduler, would run
    where adl did not allocate it (and unchecked by kube-scheduler)."""
    spec = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "image": "i"}],
                               "nodeName": "some-other-node", "schedulerName": "mine"}}}
    )  # fmt: skip
    pod = P.build_pod(JOB, spec, group=1, index=0, node="gpu-a", replicas=1, env={})
    assert "nodeName" not in pod["spec"] and "schedulerName" not in pod["spec"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert "gpu-a" in str(terms)


def test_the_jobs_disruption_budget_refuses_evictions_of_its_workers_only() -> None:
    job = P.JobRef(name="train", namespace="team", uid="uid-1")
    pdb = P.build_disruption_budget(job)
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["apiVersion"] == "policy/v1"
    assert pdb["metadata"]["name"] == P.disruption_budget_name("train") == "train-adl"
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # deleted with the job
    spec = pdb["spec"]
    assert spec["maxUnavailable"] == 0
    # the workers' label: every group's pods, never the capacity placeholders
    assert spec["selector"] == {"matchLabels": {"adl.dev/job": "train"}}
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
