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


def test_a_job_being_deleted_is_named_as_such_and_its_workers_may_still_report(
    tmp_path: Path,
) -> None:
    from adl.api.auth import generate_token
    from adl.local.api_store import LocalApiStore
    from adl.local.store import JobExists
    from adl.models import AdaptiveJobSpec, Hints

    store = Store(tmp_path / "state.db")
    spec = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
    )
    token = store.add_job("default", "a", spec).token
    store.mark_deleted("default/a")
    store.mark_deleted("default/a")  # again, while its workers stop: no second event
    assert [e.reason for e in store.events("default/a")].count("Deleting") == 1
    with pytest.raises(JobExists, match="still stopping"):
        store.add_job("default", "a", spec)
    api = LocalApiStore(store)
    assert api.token_owner(token, "default/a") == "default/a"  # not a 401 while it stops
    api.put_hints("default/a", Hints(init_batch_size=8, progress=1.0))
    assert api.token_owner(generate_token(), "default/a") is None
    store.purge("default/a")
    store.add_job("default", "a", spec)  # gone: the name is free again


def test_a_job_stored_under_looser_rules_is_still_read(tmp_path: Path) -> None:
    """Earlier versions accepted a command written as one string (it then failed to start);
    submitting one is refused now, but a home holding one must stay readable."""
    from adl.models import AdaptiveJobSpec

    store = Store(tmp_path / "state.db")
    spec = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
    )
    store.add_job("default", "old", spec)
    store.add_job("default", "new", spec)
    with store._tx() as db:
        db.execute(
            "UPDATE jobs SET spec=? WHERE key='default/old'",
            ('{"template": {"spec": {"containers": [{"name": "t", "command": "python t.py"}]}}}',),
        )
    jobs = {r.key: r for r in store.jobs()}
    assert jobs["default/old"].spec.trainer["command"] == "python t.py"
    assert store.set_suspend("default/old", True)
    with pytest.raises(ValueError, match="list of strings"):
        AdaptiveJobSpec.model_validate_json(
            store._query("SELECT spec FROM jobs WHERE key='default/old'")[0][0]
        )
