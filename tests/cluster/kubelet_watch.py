"""List-then-watch of one resource in a thread, as plain dicts (what the kubelet and the claim
provisioner react to). A relist after a broken or expired watch reports every object again,
and ``on_relist`` gets the names present so a consumer can forget what vanished meanwhile."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("adl.tests.informer")

#: a watch ends this often so that a stop request is seen without closing sockets under it
WATCH_WINDOW_S = 5
#: the pause before listing again after an error (the control plane may be restarting)
RETRY_S = 0.5

Event = Callable[[str, dict[str, Any]], None]


class Informer:
    """Calls ``on_event(type, object)`` for ADDED/MODIFIED/DELETED, from its own thread."""

    def __init__(
        self,
        list_call: Callable[..., Any],
        on_event: Event,
        *,
        name: str,
        on_relist: Callable[[list[dict[str, Any]]], None] | None = None,
        **list_kwargs: Any,
    ) -> None:
        self.list_call = list_call
        self.on_event = on_event
        self.on_relist = on_relist
        self.kwargs = list_kwargs
        self.stopping = threading.Event()
        self.synced = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=WATCH_WINDOW_S + 5)

    def _list(self) -> str:
        resp = self.list_call(_preload_content=False, **self.kwargs)
        body = json.loads(resp.data)
        items = body.get("items") or []
        if self.on_relist is not None:
            self.on_relist(items)
        for item in items:
            self.on_event("ADDED", item)
        self.synced.set()
        return str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        version: str | None = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                w = watch.Watch()
                for ev in w.stream(
                    self.list_call,
                    resource_version=version,
                    timeout_seconds=WATCH_WINDOW_S,
                    deserialize=False,
                    allow_watch_bookmarks=True,
                    **self.kwargs,
                ):
                    kind, obj = ev["type"], ev.get("raw_object", ev["object"])
                    if kind == "ERROR":
                        version = None  # e.g. 410 Gone: list again
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        self.on_event(kind, obj)
                    if self.stopping.is_set():
                        break
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("%s: %s", self.thread.name, exc.reason)
                version = None
                self.stopping.wait(RETRY_S)
            except Exception as exc:  # connection reset, control plane restarting
                if not self.stopping.is_set():
                    log.warning("%s: %r", self.thread.name, exc)
                version = None
                self.stopping.wait(RETRY_S)
