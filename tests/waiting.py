"""The test kit's one way to wait for something: re-check a condition until it holds, with a
deadline, and say what never happened when it does not.

Tests wait on the thing they need (a file, a phase, a counter), never for a guessed time:
``tests/unit/test_no_fixed_sleeps.py`` fails on a sleep that is not marked ``# allowed:``.
Child processes the tests start may use it too, with the repository root on ``sys.path``
(``ROOT`` below)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: the repository root, for child processes that import this module
ROOT = Path(__file__).resolve().parents[1]

#: how often a condition is re-checked: short against what the tests wait for (process starts,
#: rounds, API round trips), long enough not to load a busy machine
POLL_S = 0.05


class WaitTimeout(AssertionError):
    """A condition did not hold before its deadline."""


def _name(check: Callable[..., Any], what: str) -> str:
    if what:
        return what
    code = getattr(check, "__code__", None)
    if code is None:
        return repr(check)
    # a lambda has no useful name: where it is written says which condition it was
    return f"{code.co_name} at {Path(code.co_filename).name}:{code.co_firstlineno}"


def _attempt(check: Callable[[], T | None]) -> tuple[T | None, Exception | None]:
    try:
        return check(), None
    except Exception as exc:  # "not yet": a file not written yet, a port not open yet
        return None, exc


def _stop_if_given_up(
    check: Callable[..., Any],
    what: str,
    give_up: Callable[[], str | None] | None,
    details: Callable[[], str] | None,
) -> None:
    reason = give_up() if give_up else None
    if reason:
        extra = f"\n{details()}" if details else ""
        raise WaitTimeout(f"{_name(check, what)}: {reason}{extra}")


def _timed_out(
    what: str, timeout: float, last: Any, error: Exception | None, details: Callable[[], str] | None
) -> WaitTimeout:
    why = f" (last error: {error!r})" if error is not None else f" (last value: {last!r})"
    extra = f"\n{details()}" if details else ""
    return WaitTimeout(f"{what}: not within {timeout:g} s{why}{extra}")


def wait_for(
    check: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "",
    *,
    every: float = POLL_S,
    details: Callable[[], str] | None = None,
    give_up: Callable[[], str | None] | None = None,
) -> T:
    """Re-check ``check`` every ``every`` seconds until it returns something truthy, and return
    that. Past ``timeout`` raise ``WaitTimeout`` naming ``what`` (or where the check is written)
    with ``details()`` (log tails); at once when ``give_up()`` names a reason (a process died).
    An exception from ``check`` counts as "not yet" and is shown if time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        _stop_if_given_up(check, what, give_up, details)
        value, error = _attempt(check)
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(_name(check, what), timeout, value, error, details)
        time.sleep(every)  # allowed: poll interval


async def eventually(
    check: Callable[[], Any],
    timeout: float = 8.0,
    what: str = "",
    *,
    every: float = POLL_S,
    details: Callable[[], str] | None = None,
    give_up: Callable[[], str | None] | None = None,
) -> Any:
    """``wait_for`` for a test running in an event loop: the loop serves others (kmock's API
    server, the operator's requests) between the checks. ``check`` may be a coroutine
    function (an HTTP request in this loop)."""
    deadline = time.monotonic() + timeout
    while True:
        _stop_if_given_up(check, what, give_up, details)
        value, error = _attempt(check)
        if inspect.isawaitable(value):
            try:
                value = await value
            except Exception as exc:  # "not yet", as from a plain check
                value, error = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(_name(check, what), timeout, value, error, details)
        await asyncio.sleep(every)  # allowed: poll interval
