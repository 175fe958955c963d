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


def test_a_nan_stored_by_an_earlier_version_does_not_break_every_read(tmp_path: Path) -> None:
    """Earlier versions stored NaN from a diverged job's report; the models now refuse it.
    Reading the jobs (the daemon, ``adl ls``, every worker's token check) must still work."""
    from adl.models import AdaptiveJobSpec

    store = Store(tmp_path / "state.db")
    spec = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
    )
    store.add_job("default", "sick", spec)
    store.add_job("default", "well", spec)
    with store._tx() as db:
        db.execute(
            "UPDATE jobs SET hints=?, status=? WHERE key='default/sick'",
            (
                '{"initBatchSize": 8, "progress": 3.0, "goodput": NaN}',
                '{"phase": "Running", "goodput": NaN, "batchSize": 64}',
            ),
        )
    jobs = {r.key: r for r in store.jobs()}
    sick = jobs["default/sick"]
    assert sick.status.phase.value == "Running" and sick.status.batch_size == 64
    assert sick.status.goodput is None
    assert sick.hints is not None and sick.hints.progress == 3.0 and sick.hints.goodput is None
    assert jobs["default/well"].status.phase.value == "Pending"
