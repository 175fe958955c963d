"""Which backend the CLI talks to: ``--backend local|k8s`` (or ``$ADL_BACKEND``); by default the
local daemon unless a Kubernetes context is configured. The Kubernetes client is imported only
when chosen, so the local path never needs the kubernetes package."""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from adl.cli.console import fail
from adl.contract import ENV_BACKEND
from adl.jobs_api import Backend, BackendError


class BackendKind(StrEnum):
    LOCAL = "local"
    K8S = "k8s"


def kube_context_configured(environ: Mapping[str, str] | None = None) -> bool:
    """A kubeconfig with a current context exists (``$KUBECONFIG`` or ``~/.kube/config``), or
    we run inside a cluster."""
    env = os.environ if environ is None else environ
    if env.get("KUBERNETES_SERVICE_HOST"):
        return True
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths:
        paths = [str(Path(env.get("HOME", str(Path.home()))) / ".kube" / "config")]
    for p in paths:
        try:
            text = Path(p).expanduser().read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("current-context:") and line.split(":", 1)[1].strip() not in (
                "",
                '""',
                "''",
            ):
                return True
    return False


def resolve_kind(name: str | None, environ: Mapping[str, str] | None = None) -> BackendKind:
    env = os.environ if environ is None else environ
    chosen = name or env.get(ENV_BACKEND)
    if chosen:
        try:
            return BackendKind(chosen.lower())
        except ValueError:
            raise BackendError(f"unknown backend {chosen!r}: use 'local' or 'k8s'") from None
    return BackendKind.K8S if kube_context_configured(env) else BackendKind.LOCAL


def get_backend(name: str | None = None, **options: Any) -> Backend:
    """An instance of the chosen backend (options go to its constructor)."""
    kind = resolve_kind(name)
    if kind is BackendKind.LOCAL:
        from adl.local.client import LocalBackend

        return cast(Backend, LocalBackend(**options))
    try:
        from adl.operator.client import (  # type: ignore[import-not-found,unused-ignore]
            KubernetesBackend,
        )
    except ImportError as err:
        raise BackendError(f"the Kubernetes backend is not available: {err}") from None
    return cast(Backend, KubernetesBackend(**options))


def open_backend(name: str | None) -> Backend:
    """The backend a command was asked for; a bad choice ends the command with one line."""
    try:
        resolve_kind(name)
    except BackendError as err:  # a typo in --backend / $ADL_BACKEND is a usage error
        raise fail(str(err), 2) from None
    try:
        return get_backend(name)
    except BackendError as err:
        raise fail(str(err)) from None
