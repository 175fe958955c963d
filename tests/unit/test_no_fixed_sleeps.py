"""No test waits for a guessed time: a sleep in ``tests/`` either paces something (a poll loop,
a worker's simulated step) and says so with a trailing ``# allowed: REASON``, or it is a bug
to replace with a wait on the event (``tests/waiting.py``). Allowed sleeps are few and counted.

Lines are matched as text, so a sleep inside a child process's script (a string) counts too."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: the most sleeps ``tests/`` may keep, each marked ``# allowed: REASON``
MOST_ALLOWED = 10

#: no word boundary in front: in a child's script written on one line, the module's name
#: follows an escaped newline (``\ntime``)
QUALIFIED = re.compile(r"(?:time|asyncio)\.sleep\(")
#: ``from time import sleep`` / ``from asyncio import sleep, ...`` (also ``as nap``)
IMPORTED = re.compile(r"^\s*from\s+(?:time|asyncio)\s+import\s+(?P<names>[^#\n]+)", re.M)
ALLOWED = re.compile(r"#\s*allowed:\s*\S")


def _bare_names(text: str) -> set[str]:
    """The names a module gave to ``sleep`` by importing it from time or asyncio."""
    names = set()
    for match in IMPORTED.finditer(text):
        for item in match.group("names").strip("()\\ ").split(","):
            parts = item.split()
            if parts and parts[0] == "sleep":
                names.add(parts[-1])  # "sleep" or the alias after "as"
    return names


def sleeps(path: Path) -> list[tuple[int, str, bool]]:
    """Each line of ``path`` that calls a sleep: (line number, line, marked allowed)."""
    text = path.read_text()
    bare = [re.compile(rf"(?<![\w.]){re.escape(n)}\(") for n in _bare_names(text)]
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if QUALIFIED.search(line) or any(p.search(line) for p in bare):
            found.append((number, line.strip(), bool(ALLOWED.search(line))))
    return found


def test_every_sleep_in_the_tests_is_marked_allowed_and_they_are_few() -> None:
    unmarked, allowed = [], []
    for path in sorted(TESTS.rglob("*.py")):
        for number, line, ok in sleeps(path):
            where = f"{path.relative_to(TESTS.parent)}:{number}: {line}"
            (allowed if ok else unmarked).append(where)
    assert not unmarked, (
        "sleeps that wait for a guessed time; wait on the event instead (tests/waiting.py), "
        "or mark a sleep that only paces with '# allowed: REASON':\n" + "\n".join(unmarked)
    )
    assert len(allowed) <= MOST_ALLOWED, (
        f"{len(allowed)} allowed sleeps, at most {MOST_ALLOWED}:\n" + "\n".join(allowed)
    )


def test_the_scan_finds_every_spelling_of_a_sleep(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    # written with SLEEP for "sleep", so that this file's own lines are not found by the scan
    text = (
        "import time, asyncio\n"
        "from time import monotonic, SLEEP as nap\n"
        "time.SLEEP(1)\n"
        "await asyncio.SLEEP(0.1)  # allowed: poll interval\n"
        "nap(2)\n"
        "code = 'import time\\ntime.SLEEP(60)\\n'\n"
        "x.nap(3)\n"  # someone else's method of that name
        "time.SLEEP_until(4)\n"  # another function
        "# allowed: a comment alone allows nothing\n"
    )
    sample.write_text(text.replace("SLEEP", "sleep"))
    found = [(n, ok) for n, _, ok in sleeps(sample)]
    assert found == [(3, False), (4, True), (5, False), (6, False)]
