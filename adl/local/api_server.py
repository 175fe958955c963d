"""The worker API (hints, rendezvous, metrics) served by the local daemon on 127.0.0.1, in a
thread of the daemon's process, on the previous daemon's port when it is free: workers read
``ADL_API_URL`` once at start, so adopted groups reach the API only if it stays where it was."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("adl.local")


class LocalApi:
    """One uvicorn server in a daemon thread; ``url`` is empty until it listens."""

    def __init__(self) -> None:
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self, app: Any, previous_url: str | None) -> None:
        import uvicorn

        sock = _socket(previous_url)
        port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="adl-api", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.02)
        self._server, self._thread = server, thread
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop serving; requests in flight finish first (at most 5 s), so none of them meets
        a closed state store."""
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=5)


def _socket(previous_url: str | None) -> socket.socket:
    """A socket bound to the port of ``previous_url`` when it is free, else to a free one."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT, not a listener
    previous = None
    with contextlib.suppress(ValueError):
        previous = urlsplit(previous_url or "").port
    if previous:
        try:
            sock.bind(("127.0.0.1", previous))
            return sock
        except OSError as err:
            log.warning(
                "API port %d of the previous daemon is taken (%s): running groups report "
                "to the API again only after their next restart",
                previous,
                err,
            )
    sock.bind(("127.0.0.1", 0))
    return sock
