"""A ``<job>-adl-token`` Secret that no job owns, made by a tenant before the job was created:
the job must not adopt it. Adopting it would hand the job a token the planter knows (or chose),
so the planter could write the job's hints. The job waits with a clear reason until the Secret
is removed, then makes its own."""

from __future__ import annotations

import base64
from typing import Any

from operator_kit import MemoryCluster

from adl.operator import handlers
from adl.operator import pods as P
from tests.event_sink import EventRecorder

JOB = P.JobRef("j", "ns", "u")
PLANTED_TOKEN = "chosen-by-a-tenant"


def planted_secret() -> dict[str, Any]:
    """What a tenant with `create secrets` in the namespace can make: the right name and
    labels, no owner (the job does not exist yet, so its uid is unknown)."""
    secret = P.build_token_secret(JOB, PLANTED_TOKEN)
    del secret["metadata"]["ownerReferences"]
    secret["data"] = {P.TOKEN_KEY: base64.b64encode(PLANTED_TOKEN.encode()).decode()}
    del secret["stringData"]
    return secret


async def test_a_secret_planted_before_the_job_is_refused_not_adopted() -> None:
    cluster = MemoryCluster(maxReplicas=1)
    events = EventRecorder()
    cluster.create(planted_secret())
    rt = handlers.Runtime(cluster, policy=None, events=events)  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")

    # the planted token is not the job's: no hash of it, no pod mounting it
    annotations = cluster.job["metadata"]["annotations"]
    assert "adl.dev/token-sha256" not in annotations
    assert cluster.pods == []
    # the reason is said, in an Event and in the status
    assert cluster.job["status"]["reason"] == "TokenSecretNotOwned"
    message = cluster.job["status"]["message"]
    assert "Secret j-adl-token" in message and "not created by the operator" in message
    assert [r for r in events.reasons() if r == "TokenSecretNotOwned"] == ["TokenSecretNotOwned"]

    await handlers._reconcile_job(rt, "ns", "j")  # said once, still waiting
    assert [r for r in events.reasons() if r == "TokenSecretNotOwned"] == ["TokenSecretNotOwned"]
    assert cluster.pods == []

    # an admin removes it: the job makes its own Secret, owned by it, with a fresh token
    del cluster.objects[("Secret", "j-adl-token")]
    await handlers._reconcile_job(rt, "ns", "j")
    secret = cluster.get_secret("ns", "j-adl-token")
    assert secret is not None
    assert secret["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    assert P.token_from_secret(secret) not in (None, PLANTED_TOKEN)
    assert cluster.get("Pod", P.pod_name("j", 1, 0)) is not None
    assert cluster.job["status"]["reason"] == "Starting"


async def test_a_secret_owned_by_something_else_is_refused_too() -> None:
    # an ownerReference to another kind (or a forged one to an unrelated object) is not this job
    cluster = MemoryCluster(maxReplicas=1)
    secret = planted_secret()
    secret["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm-uid"}
    ]
    cluster.create(secret)
    rt = handlers.Runtime(cluster, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    assert cluster.pods == []
    assert cluster.job["status"]["reason"] == "TokenSecretNotOwned"
    assert "adl.dev/token-sha256" not in cluster.job["metadata"]["annotations"]


async def test_the_jobs_own_secret_is_reused_after_an_operator_restart() -> None:
    # the check must not refuse the Secret the operator made for this very job
    cluster = MemoryCluster(maxReplicas=1)
    cluster.create(P.build_token_secret(JOB, "the-jobs-token"))
    rt = handlers.Runtime(cluster, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    await handlers._reconcile_job(rt, "ns", "j")
    from adl.api.auth import token_digest

    digest = cluster.job["metadata"]["annotations"]["adl.dev/token-sha256"]
    assert digest == token_digest("the-jobs-token")
    assert cluster.get("Pod", P.pod_name("j", 1, 0)) is not None
