from datetime import UTC, datetime, timedelta, timezone

from adl.operator.timestamps import parse_time


def test_api_server_strings_and_client_datetimes() -> None:
    assert parse_time("2026-01-01T00:10:00Z") == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    plus_two = parse_time("2026-01-01T02:10:00+02:00")
    assert plus_two == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    assert plus_two is not None and plus_two.utcoffset() == timedelta(hours=2)
    typed = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_time(typed) is typed


def test_unset_is_none() -> None:
    assert parse_time(None) is None and parse_time("") is None
