"""A local state directory that another user controls is refused, with a message that names
the owner or the mode: that user could read the jobs' tokens, or replace the files the daemon
runs as you (an ``ADL_HOME`` under a directory someone else made in ``/tmp``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from adl.jobs_api import BackendError
from adl.local.client import ensure_home

OTHER = 54321  # a uid no account on the test machine has

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a directory to another uid needs root (CI runs as root)"
)


def test_a_home_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "theirs"
    home.mkdir(mode=0o700)
    os.chown(home, OTHER, OTHER)
    with pytest.raises(BackendError, match=f"owned by uid {OTHER}, not by you"):
        ensure_home(home)


def test_a_home_below_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    """/tmp/theirs/adl: the owner of /tmp/theirs can swap the home for one of their own."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(BackendError, match=f"{theirs}, above .* is owned by uid {OTHER}"):
        ensure_home(theirs / "adl")
    assert not (theirs / "adl").exists()  # refused before creating anything


def test_a_home_below_a_world_writable_directory_is_refused_unless_it_is_sticky(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(BackendError, match=r"writable by others \(mode 0o777\)"):
        ensure_home(shared / "adl")
    shared.chmod(0o777 | stat.S_ISVTX)  # like /tmp: only an entry's owner may move it
    ensure_home(shared / "adl")
    assert stat.S_IMODE((shared / "adl").stat().st_mode) == 0o700


def test_a_home_writable_by_others_is_refused_with_the_fix(tmp_path: Path) -> None:
    home = tmp_path / "open"
    home.mkdir()
    home.chmod(0o777)
    with pytest.raises(BackendError, match=rf"mode 0o777\): they could .*chmod go-w {home}"):
        ensure_home(home)


def test_a_home_closed_to_its_owner_is_refused_with_the_fix_not_a_traceback(
    tmp_path: Path,
) -> None:
    """Mode 000 on our own home: one line naming the mode and the fix (it was a raw
    PermissionError traceback from the first file read in it)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    home.chmod(0)
    try:
        with pytest.raises(BackendError, match=r"mode 0o0\): run chmod u\+rwx"):
            ensure_home(home)
    finally:
        home.chmod(0o700)
