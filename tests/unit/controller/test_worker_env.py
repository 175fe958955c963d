"""The worker environment contract: one function, identical on every backend."""

from __future__ import annotations

import pytest

from adl.contract import TORCH_ENV_VARS
from adl.controller.actions import CreateGroup
from adl.controller.env import ENV_VARS, WorkerSite, group_env, replica_placement, worker_env

SITE = WorkerSite("10.0.0.5", 29500, "/ckpt/ns/job", "http://api:8080", "/var/run/adl/token")


def test_every_contract_variable_is_set() -> None:
    env = worker_env("ns/job", 4, ["a", "a", "b"], 0, SITE, scheduled_since=1714564800.25)
    assert set(env) == set(ENV_VARS) | set(TORCH_ENV_VARS)
    assert env["ADL_SCHEDULED_SINCE"] == "1714564800.250"
    assert env["ADL_JOB"] == "ns/job" and env["ADL_GROUP"] == "4"
    assert env["ADL_MASTER_ADDR"] == "10.0.0.5" and env["ADL_MASTER_PORT"] == "29500"
    assert env["ADL_CHECKPOINT_DIR"] == "/ckpt/ns/job"
    assert env["ADL_API_URL"] == "http://api:8080"
    assert env["ADL_TOKEN_FILE"] == "/var/run/adl/token"


def test_ranks_are_contiguous_per_node_whatever_the_list_order() -> None:
    envs = group_env("ns/j", 1, ["a", "b", "a", "b", "a"], SITE)
    rows = [
        (e["ADL_RANK"], e["ADL_NODE_RANK"], e["ADL_LOCAL_RANK"], e["ADL_LOCAL_WORLD_SIZE"])
        for e in envs
    ]
    assert rows == [
        ("0", "0", "0", "3"),
        ("1", "0", "1", "3"),
        ("2", "0", "2", "3"),
        ("3", "1", "0", "2"),
        ("4", "1", "1", "2"),
    ]
    assert {e["ADL_WORLD_SIZE"] for e in envs} == {"5"}
    assert {e["ADL_NUM_NODES"] for e in envs} == {"2"}
    assert replica_placement(["x"]) == [(0, 0, 1)]


def test_torchrun_variables_match_the_adl_ones_on_every_replica() -> None:
    """Scripts written for torchrun (and ``init_process_group("gloo")`` with its default
    ``env://``) read RANK, WORLD_SIZE, ..., MASTER_PORT: same values as the ADL_* ones."""
    envs = group_env("ns/j", 1, ["a", "b", "a"], SITE)
    rows = [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs]
    assert rows == [("0", "3", "0", "2"), ("1", "3", "1", "2"), ("2", "3", "0", "1")]
    for e in envs:
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("10.0.0.5", "29500")
        assert all(e[t] == e[f"ADL_{t}"] for t in TORCH_ENV_VARS)


def test_optional_variables_left_out_when_unknown() -> None:
    env = worker_env("ns/j", 1, ["a"], 0, WorkerSite("127.0.0.1", 1234, "/tmp/c"))
    assert "ADL_API_URL" not in env and "ADL_TOKEN_FILE" not in env


def test_rank_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="rank 2 outside a group of 2"):
        worker_env("ns/j", 1, ["a", "a"], 2, SITE)


def test_create_group_action_builds_the_same_env() -> None:
    action = CreateGroup("ns/j", 3, ("a", "b"), (0, 1))
    assert action.env(1, SITE) == worker_env("ns/j", 3, ["a", "b"], 1, SITE)
