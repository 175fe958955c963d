"""kopf's event poster for code that runs outside kopf's per-object tasks.

``kopf.event`` puts an event on the operator's posting queue through two context variables
that kopf sets only inside the task handling one object (a handler, a timer). The cluster-wide
round runs in a task of its own (``handlers.round_loop``), started at kopf's start-up, where
they are unset: the events a round emits (a decision, a hold) raised ``LookupError`` there and
failed the round. So the first handler to run captures the poster (the operator-wide queue
and its loop), and the round's task installs it.

kopf has no public way to do this; the two variables live in ``kopf._core.engines.posting``
(kopf 1.45). A kopf without them fails at import, loudly, not at the first event.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kopf._core.engines import posting as _posting

#: the operator-wide posting queue and the loop it belongs to, as kopf set them
Poster = tuple[asyncio.AbstractEventLoop, Any]


def capture() -> Poster | None:
    """The poster of the kopf task running now (None outside kopf's per-object tasks)."""
    try:
        return (_posting.event_queue_loop_var.get(), _posting.event_queue_var.get())
    except LookupError:
        return None


def install(poster: Poster | None) -> None:
    """Let ``kopf.event`` post from the current task (its context only)."""
    if poster is None:
        return
    loop, queue = poster
    _posting.event_queue_loop_var.set(loop)
    _posting.event_queue_var.set(queue)
