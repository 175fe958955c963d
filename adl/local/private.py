"""Private files under the local state directory.

Everything under ``$ADL_HOME`` is the user's alone: the database and its WAL hold every job's
bearer token, a group's plan holds the job's whole environment (API keys passed with ``--env``,
the daemon's own environment the workers inherit), logs and checkpoints hold whatever the job
prints and saves. So the home is 0700 and every file in it 0600 from the moment it exists, not
chmod'ed afterwards (a file created 0644 and then narrowed can be opened in between, and an open
descriptor keeps its access).

Two layers: the daemon (and every shim and worker it starts, which inherit it) runs with umask
077; the files the CLI's process creates (the database, the daemon's log, its settings) are
created with an explicit mode, so a CLI with the usual umask 022 creates nothing readable either.
Only the standard library: the shim imports this before anything else.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import stat
from pathlib import Path

log = logging.getLogger("adl.local")

#: No group or other permission on anything the daemon, its shims or its workers create.
PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600


def private_umask() -> int:
    """Make this process's new files private (returns the previous umask)."""
    return os.umask(PRIVATE_UMASK)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) accessible to its owner only."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    # mkdir's mode applies to the last directory only; parents that did not exist follow the
    # umask, which is the private one in the daemon
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o077)


#: What adl keeps directly in the home: only these are narrowed in a home found open (the home
#: may be a directory that holds other things, whose modes are not adl's to change).
OWN_ENTRIES = (
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "daemon.lock",
    "daemon.pid",
    "daemon.json",
    "daemon.log",
    "jobs",
)


class UnsafeHome(PermissionError):
    """The state directory, or a directory above it, is controlled by another user."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EPERM, message)


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_home_owner(home: Path) -> None:
    """Refuse a home that another local user controls: the home must be ours, and every
    directory above it ours or root's and not writable by others, unless sticky (``/tmp``),
    where only its owner can move what it holds. Otherwise that user could read the jobs'
    tokens, or swap in files that the daemon runs as us (a home under someone's ``/tmp/x``)."""
    me = os.getuid()
    path = Path(os.path.abspath(home))
    for level, current in enumerate([path, *path.parents]):
        try:
            st = current.stat()
        except FileNotFoundError:
            continue  # created below, by us
        mode = stat.S_IMODE(st.st_mode)
        if level == 0 and st.st_uid != me:
            raise UnsafeHome(
                f"{current} is owned by {_owner(st.st_uid)}, not by you ({_owner(me)}): that "
                "user could read your jobs' tokens and change what the daemon runs; use a "
                "directory of your own"
            )
        if level > 0 and st.st_uid not in (me, 0):
            raise UnsafeHome(
                f"{current}, above {path}, is owned by {_owner(st.st_uid)}, who can replace "
                "what is below it; use a directory whose parents are yours or root's"
            )
        if level > 0 and mode & 0o022 and not mode & stat.S_ISVTX:
            raise UnsafeHome(
                f"{current}, above {path}, is writable by others (mode {oct(mode)}), who can "
                "replace what is below it; use a directory whose parents only you can write"
            )
        if level == 0 and mode & 0o022:
            raise UnsafeHome(
                f"{current} is writable by others (mode {oct(mode)}): they could replace adl's "
                f"files in it; run chmod go-w {current}, or use another directory"
            )


def make_private_home(home: Path) -> None:
    """Create the state directory 0700, after :func:`check_home_owner`. A home of ours that an
    older version (or a lax umask) left readable by others is closed, with adl's files in it,
    once: the files a running job already wrote (its plan, token, logs) would otherwise stay
    readable."""
    check_home_owner(home)
    home.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    st = home.stat()
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o700 != 0o700:  # ours, but closed to us: every read would fail further in
        raise PermissionError(
            errno.EACCES,
            f"you may not read, write or enter it (mode {oct(mode)}): run chmod u+rwx {home}",
        )
    if not mode & 0o077:
        return
    narrowed = 0
    own = [home / name for name in OWN_ENTRIES]
    for path in [home, *own, *(home / "jobs").rglob("*")]:
        try:
            st = path.lstat()
        except OSError:  # not there, or gone meanwhile
            continue
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid() or not st.st_mode & 0o077:
            continue  # a link's target is not ours to change; neither is another user's file
        try:
            path.chmod(stat.S_IMODE(st.st_mode) & ~0o077)
            narrowed += 1
        except OSError:
            continue
    log.warning(
        "%s was readable by others (mode %s): made it and %d entries in it private",
        home,
        oct(mode),
        narrowed - 1,
    )


def write_private(path: Path, text: str) -> None:
    """Write ``path`` atomically, 0600 from creation (a reader sees the old or the new text)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a leftover keeps its old mode through O_CREAT
    data = memoryview(text.encode())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def create_private(path: Path) -> None:
    """Create an empty ``path`` 0600 unless it exists (then it is left as it is)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))


def open_private_append(path: Path) -> int:
    """A descriptor appending to ``path``, created 0600 when missing (the caller closes it)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
