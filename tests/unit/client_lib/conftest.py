"""A standalone job context (one process, no process group) for the in-job library's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from adl.client_lib.context import JobContext, has_context, set_context
from adl.client_lib.env import init_process_group, shutdown


@pytest.fixture
def make_context(tmp_path: Path) -> Iterator[Callable[..., JobContext]]:
    """Start a standalone context whose checkpoints go to ``tmp_path / "ckpt"``; call it again
    to simulate a restart (the previous context is shut down first, its checkpoint kept)."""
    ckpt = tmp_path / "ckpt"

    def start(**extra: str) -> JobContext:
        if has_context():
            shutdown()
        environ = {"ADL_CHECKPOINT_DIR": str(ckpt), "ADL_STOP_FILE": str(tmp_path / "stop")}
        environ.update(extra)
        return init_process_group(environ=environ)

    try:
        yield start
    finally:
        shutdown()
        set_context(None)
