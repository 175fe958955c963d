"""The state database: what opening it says when the file is not one."""

from __future__ import annotations

from pathlib import Path

import pytest

from adl.local.store import StateUnreadable, Store


def test_a_file_that_is_not_a_database_is_named_with_what_to_do(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.write_bytes(b"not sqlite at all " * 512)
    with pytest.raises(StateUnreadable) as err:
        Store(db)
    said = str(err.value)
    assert "\n" not in said
    assert said.startswith(f"{db} is not a readable adl state database (")
    assert f"move it aside (mv {db} {db}.corrupt)" in said
