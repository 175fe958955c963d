"""How the operator's kopf machinery retries the API server: without end, with backoff and jitter.

kopf retries a failed API request (connection refused, 5xx, 403, 429) with the delays of
``settings.networking.error_backoffs``, then escalates the error. Its default, 1+1+2+...+21 =
54 s, is shorter than a control-plane outage: the request that ran out was the peering
keep-alive or a watch's listing, whose failure ends the whole operator (kube-apiserver stopped
for 65 s made the process exit; for 55 s it survived). Workers train on without the API server,
so the operator must outlast it: every request waits for the server, however long it is away,
and the watches and the peering carry on when it returns.

``Forever`` is an iterable that kopf iterates afresh per request (it is not ``Sized``, so kopf
numbers the attempts without a total): doubling delays from ``first_s`` up to ``cap_s``, each
scaled by a random factor in ``[1 - jitter, 1]`` so that many clients (every watch stream of
the operator, every replica of it) do not return to the server in lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Forever:
    """Backoff delays (seconds) for kopf's API retries, never exhausted."""

    first_s: float = 1.0
    cap_s: float = 30.0
    jitter: float = 0.5
    rng: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.cap_s:
            raise ValueError("need 0 < first_s <= cap_s")
        if not 0 <= self.jitter < 1:
            raise ValueError("need 0 <= jitter < 1")

    def __iter__(self) -> Iterator[float]:
        delay = self.first_s
        while True:
            yield delay * (1 - self.jitter * self.rng())
            delay = min(delay * 2, self.cap_s)


#: what the operator runs with: a returning server is found within half a minute of its return
API_RETRIES = Forever()
