"""The operator outlasts control-plane outages (issue 36): kopf's API retries never run out
(its default budget of 54 s ended the operator when kube-apiserver was down for 65 s), back off
to a cap and are jittered; the tick treats an unreachable API server as a reason to look again
later, not as a failure."""

from __future__ import annotations

import itertools
from typing import Any

import kopf
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from adl.operator import handlers
from adl.operator.retries import API_RETRIES, Forever


def test_the_retries_never_run_out_and_back_off_to_a_cap() -> None:
    delays = list(itertools.islice(Forever(first_s=1, cap_s=30, jitter=0, rng=lambda: 0.0), 12))
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30, 30, 30, 30, 30]
    assert sum(itertools.islice(API_RETRIES, 20)) > 180  # minutes of outage, not 54 s
    assert not hasattr(API_RETRIES, "__len__")  # kopf counts attempts without a last one


def test_each_request_starts_its_backoff_afresh_with_jitter() -> None:
    values = iter([0.0, 1.0, 0.5])
    backoffs = Forever(first_s=2, cap_s=8, jitter=0.5, rng=lambda: next(values))
    assert list(itertools.islice(backoffs, 3)) == [2.0, 2.0, 6.0]  # x1, x0.5, x0.75
    fresh = Forever(first_s=2, cap_s=8, jitter=0.0)
    assert next(iter(fresh)) == next(iter(fresh)) == 2.0


@pytest.mark.parametrize("bad", [dict(first_s=0), dict(first_s=5, cap_s=1), dict(jitter=1.0)])
def test_nonsense_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Forever(**bad)


async def test_the_operator_settings_use_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADL_KUBE_URL", "http://127.0.0.1:9")  # never dialled here
    settings = kopf.OperatorSettings()
    memo = kopf.Memo()
    startup: Any = handlers.startup  # kopf wraps it; called here as kopf calls it
    await startup(settings=settings, memo=memo)
    assert settings.networking.error_backoffs is API_RETRIES
    assert settings.watching.reconnect_backoff >= 1.0


@pytest.mark.parametrize(
    ("exc", "unavailable"),
    [
        (urllib3.exceptions.MaxRetryError(None, "/", None), True),  # type: ignore[arg-type]
        (ApiException(status=503), True),
        (ApiException(status=403), True),  # RBAC warming up after a restart
        (ApiException(status=0), True),
        (ApiException(status=409), False),
        (ValueError("a bug"), False),
    ],
)
def test_what_counts_as_the_api_server_being_away(exc: BaseException, unavailable: bool) -> None:
    assert handlers.api_unavailable(exc) is unavailable
