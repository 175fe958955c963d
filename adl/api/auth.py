"""Per-job bearer tokens: generation, constant-time lookup and the request check.

Each job gets its own random token (mounted into its workers); a worker may only write its own
job's hints. 401: no token, or one that belongs to no job. 403: another job's token."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import HTTPException, status

TOKEN_BYTES = 32


def generate_token() -> str:
    """A fresh URL-safe token (256 bits of entropy)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_digest(token: str) -> str:
    """What a job's object keeps of its token (Kubernetes: an annotation) instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def find_owner(
    candidates: Iterable[tuple[str, str]], token: str, prefer: str | None = None
) -> str | None:
    """The job whose token equals ``token``; compares against every candidate in constant
    time per comparison, so timing reveals neither which job matched nor how much of it.

    ``prefer`` (the job a request names) wins when it matches: a copy of its token (or of
    the token's hash) on another job must not take its token over."""
    owner = None
    presented = token.encode()
    for job, expected in candidates:
        if hmac.compare_digest(expected.encode(), presented) and (owner is None or owner != prefer):
            owner = job
    return owner


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


@dataclass(frozen=True)
class AuthError:
    code: int
    detail: str

    def exception(self) -> HTTPException:
        headers = {"WWW-Authenticate": "Bearer"} if self.code == 401 else None
        return HTTPException(status_code=self.code, detail=self.detail, headers=headers)


def check(job: str, token: str | None, owner: str | None) -> AuthError | None:
    """Decide a request for ``job`` presenting ``token`` that belongs to ``owner`` (pure)."""
    if token is None:
        return AuthError(status.HTTP_401_UNAUTHORIZED, "missing bearer token")
    if owner is None:
        return AuthError(status.HTTP_401_UNAUTHORIZED, "invalid bearer token")
    if owner != job:
        return AuthError(status.HTTP_403_FORBIDDEN, f"this token may not act on job {job}")
    return None
