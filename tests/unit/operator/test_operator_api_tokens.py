"""The API store on Kubernetes. Its token check looks at the job a request names first, so a
copy of that job's token hash on another job (the annotation is writable by whoever can edit
that job) cannot take the token over; a job whose status is unreadable stays out of the metrics
without breaking them."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from adl.operator.api_store import OperatorApiStore

TOKEN = "victim-token"
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()


def job(ns: str, name: str, digest: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {"adl.dev/token-sha256": digest},
        },
        "spec": {},
    }


class Jobs:
    """The two reads the API store makes, counted."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies
        self.lists = 0
        self.gets = 0

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self.lists += 1
        return copy.deepcopy(self.bodies)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        for b in self.bodies:
            if (b["metadata"]["namespace"], b["metadata"]["name"]) == (namespace, name):
                return copy.deepcopy(b)
        return None


@pytest.mark.parametrize("victim_first", [True, False])
async def test_a_copied_token_hash_does_not_take_the_token_over(victim_first: bool) -> None:
    victim, clone = job("team-a", "victim", DIGEST), job("team-b", "clone", DIGEST)
    jobs = Jobs([victim, clone] if victim_first else [clone, victim])
    api = OperatorApiStore(jobs)  # type: ignore[arg-type]
    assert await api.token_owner(TOKEN, "team-a/victim") == "team-a/victim"
    assert jobs.lists == 0  # the named job's own hash answered: no list of every job


async def test_another_jobs_token_is_told_apart_from_no_jobs_token() -> None:
    jobs = Jobs([job("team-a", "victim", DIGEST), job("team-b", "other", "0" * 64)])
    api = OperatorApiStore(jobs)  # type: ignore[arg-type]
    assert await api.token_owner(TOKEN, "team-b/other") == "team-a/victim"  # 403
    assert await api.token_owner("nobody's", "team-b/other") is None  # 401
    assert await api.token_owner(TOKEN, "team-b/gone") == "team-a/victim"


async def test_a_status_the_models_refuse_leaves_one_job_out_of_the_metrics() -> None:
    good, edited = job("team-a", "good", DIGEST), job("team-a", "edited", "0" * 64)
    good["status"] = {"phase": "Running", "restarts": {"resize": 1}}
    edited["status"] = {"phase": "Running", "restarts": {"cosmic-ray": 1}}
    api = OperatorApiStore(Jobs([good, edited]))  # type: ignore[arg-type]
    assert [s.key for s in await api.list_jobs()] == ["team-a/good"]


async def test_a_checked_token_is_taken_unread_for_a_few_seconds_only() -> None:
    """Heartbeats come from every rank every few seconds: a token that matched its job's hash
    is taken without reading the job again for TOKEN_CACHE_S, then checked again; a wrong
    token is never remembered, and the right one of another job is not taken for this one."""
    from adl.operator.api_store import TOKEN_CACHE_S

    now = [100.0]
    jobs = Jobs([job("team-a", "victim", DIGEST), job("team-b", "other", "0" * 64)])
    api = OperatorApiStore(jobs, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await api.token_owner(TOKEN, "team-a/victim") == "team-a/victim"
    assert await api.token_owner(TOKEN, "team-a/victim") == "team-a/victim"
    assert jobs.gets == 1
    assert await api.token_owner("wrong", "team-a/victim") is None
    assert await api.token_owner("wrong", "team-a/victim") is None
    assert jobs.gets == 3  # a refused token is read again each time
    assert await api.token_owner(TOKEN, "team-b/other") == "team-a/victim"  # still 403
    now[0] += TOKEN_CACHE_S + 0.1
    gets = jobs.gets
    assert await api.token_owner(TOKEN, "team-a/victim") == "team-a/victim"
    assert jobs.gets == gets + 1  # past the bound: read again
