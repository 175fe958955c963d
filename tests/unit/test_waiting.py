"""The test kit's wait (tests/waiting.py): what it returns, and what it says when it gives up."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from tests.waiting import WaitTimeout, eventually, wait_for


def test_returns_the_first_truthy_value_and_treats_errors_as_not_yet() -> None:
    calls = itertools.count(1)

    def third_time_lucky() -> str | None:
        n = next(calls)
        if n == 1:
            raise FileNotFoundError("not written yet")
        return "done" if n >= 3 else None

    assert wait_for(third_time_lucky, 5, every=0) == "done"


def test_past_the_deadline_it_names_what_and_the_last_error() -> None:
    def never() -> None:
        raise ConnectionRefusedError("port closed")

    with pytest.raises(WaitTimeout, match=r"the port: not within 0 s .*port closed.*\nlog tail"):
        wait_for(never, 0, "the port", details=lambda: "log tail")


def test_without_a_name_it_says_where_the_check_is_written() -> None:
    with pytest.raises(WaitTimeout, match=r"<lambda> at test_waiting\.py:\d+: .*last value: 0"):
        wait_for(lambda: 0, 0)


def test_give_up_stops_at_once_with_its_reason() -> None:
    checks = itertools.count()
    with pytest.raises(WaitTimeout, match="the daemon: exited with 3"):
        wait_for(lambda: next(checks) < 0, 60, "the daemon", give_up=lambda: "exited with 3")
    assert next(checks) == 0  # not even checked once


async def test_eventually_awaits_a_coroutine_check() -> None:
    answers = iter([0, 0, 200])

    async def status() -> bool:
        return next(answers) == 200

    assert await eventually(status, 5, every=0) is True
    with pytest.raises(WaitTimeout, match="ready: not within 0 s"):
        await eventually(status, 0, "ready")  # the iterator is spent: each call raises


def test_the_waits_are_defined_once_and_imported_from_the_kit_itself() -> None:
    """One wait helper: no test module defines its own ``wait_for``/``eventually`` or takes the
    kit's from another module that passes it on (a re-export becomes a copy the day someone
    edits it)."""
    tests = Path(__file__).resolve().parents[1]
    waits = {"wait_for", "eventually"}
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        where = path.relative_to(tests.parent)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in waits:
                if path != tests / "waiting.py":
                    wrong.append(f"{where}:{node.lineno}: defines its own {node.name}")
            elif isinstance(node, ast.ImportFrom) and node.module != "tests.waiting":
                for alias in node.names:
                    if alias.name in waits:
                        wrong.append(f"{where}:{node.lineno}: {alias.name} from {node.module}")
    assert not wrong, "take wait_for/eventually from tests.waiting:\n" + "\n".join(wrong)
