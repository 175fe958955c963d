"""The local backend's fixtures (``local_fixtures``), shared with the integration tests that
run the daemon with real worker processes (``tests/integration/test_local_*.py``)."""

from local_fixtures import backend, daemon_factory, home

__all__ = ["backend", "daemon_factory", "home"]
