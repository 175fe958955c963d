"""Every rank's heartbeat: its step count and step time, from a background thread, so the
controller can tell a hung rank (``adl.controller.liveness``).

At every step boundary the training loop already passes through (``PreemptionMonitor``), the
rank's :class:`StepClock` counts the step and updates its step time: an integer increment and
one ``time.monotonic()``, no collective and no I/O. A daemon thread sends
``PUT $ADL_API_URL/v1/jobs/{ns}/{name}/heartbeat`` every ``$ADL_HEARTBEAT_INTERVAL_S`` seconds
(default 5) with the count, the step time, whether the rank is saving a checkpoint and the job's
hang settings (``$ADL_HANG_TIMEOUT_S``, ``$ADL_HANG_STEP_MULTIPLE``). A process stopped with
SIGSTOP, or stuck in the kernel, sends nothing: its silence is what names it. A failing API
never reaches the training loop; a failed heartbeat is logged (once per run of failures) and the
next one tries again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from adl import contract as C
from adl.client_lib.context import WorkerEnv
from adl.client_lib.reporter import hints_url
from adl.models import (
    MAX_HANG_STEP_MULTIPLE,
    MAX_HANG_TIMEOUT_S,
    MAX_HEARTBEAT_INTERVAL_S,
    MAX_STEP_TIME_S,
    MAX_STEPS,
    MIN_HANG_STEP_MULTIPLE,
    MIN_HANG_TIMEOUT_S,
    MIN_HEARTBEAT_INTERVAL_S,
    Heartbeat,
)

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
#: the weight of the newest step in the step time's moving average
STEP_TIME_WEIGHT = 0.1


class StepClock:
    """This rank's progress: step boundaries reached, recent step time, saving or not. Written
    by the training loop, read by the heartbeat thread (plain attribute reads: a heartbeat may
    see a value one step old, which does not matter at its rate)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.steps = 0
        self.step_time_s: float | None = None
        self.saving = False
        self._last: float | None = None

    def step(self) -> None:
        """A step boundary: count it, and time the step that ended here."""
        now = self._clock()
        if self._last is not None:
            took = now - self._last
            old = self.step_time_s
            self.step_time_s = took if old is None else old + STEP_TIME_WEIGHT * (took - old)
        self._last = now
        self.steps += 1

    @contextlib.contextmanager
    def save(self) -> Iterator[None]:
        """Around a checkpoint save: no steps meanwhile, and the pause is no step's time."""
        self.saving = True
        try:
            yield
        finally:
            self.saving = False
            if self._last is not None:
                self._last = self._clock()


def _number(
    environ: Mapping[str, str], name: str, low: float, high: float, zero_ok: bool = False
) -> float | None:
    """``environ[name]`` as seconds within [low, high] (or 0 when ``zero_ok``); None when unset.
    Anything else raises ``ValueError`` naming the setting: a typo should stop the job at its
    start, not silently leave it without detection."""
    raw = (environ.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if zero_ok and value == 0:
        return 0.0
    if not (math.isfinite(value) and low <= value <= high):
        off = "0 (off) or " if zero_ok else ""
        raise ValueError(f"{name} must be {off}in [{low:g}, {high:g}], got {raw!r}")
    return value


@dataclass(frozen=True)
class HeartbeatSettings:
    interval_s: float = DEFAULT_INTERVAL_S
    hang_timeout_s: float | None = None  # None: the controller's default (45 s)
    hang_step_multiple: float | None = None  # None: the controller's default (10)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> HeartbeatSettings:
        interval = _number(
            environ, C.ENV_HEARTBEAT_INTERVAL_S, MIN_HEARTBEAT_INTERVAL_S, MAX_HEARTBEAT_INTERVAL_S
        )
        return cls(
            interval_s=DEFAULT_INTERVAL_S if interval is None else interval,
            hang_timeout_s=_number(
                environ, C.ENV_HANG_TIMEOUT_S, MIN_HANG_TIMEOUT_S, MAX_HANG_TIMEOUT_S, True
            ),
            hang_step_multiple=_number(
                environ, C.ENV_HANG_STEP_MULTIPLE, MIN_HANG_STEP_MULTIPLE, MAX_HANG_STEP_MULTIPLE
            ),
        )


def heartbeat_url(api_url: str, job: str) -> str:
    """``ns/name`` -> the job's heartbeat endpoint."""
    return hints_url(api_url, job).removesuffix("/hints") + "/heartbeat"


class HeartbeatSender:
    """The thread that sends this rank's heartbeats."""

    def __init__(
        self,
        clock: StepClock,
        url: str,
        group: int,
        rank: int,
        settings: HeartbeatSettings,
        token_file: Path | None = None,
    ) -> None:
        self.clock = clock
        self.url = url
        self.group, self.rank = group, rank
        self.settings = settings
        self.token_file = token_file
        self.sent = 0
        self.failed = 0
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(
        cls, env: WorkerEnv, clock: StepClock, environ: Mapping[str, str]
    ) -> HeartbeatSender | None:
        """A sender for this rank, or None without a job or an API (standalone runs). Bad
        settings raise ``ValueError`` (on every rank alike)."""
        settings = HeartbeatSettings.from_env(environ)
        if not env.api_url or not env.job:
            return None
        try:
            url = heartbeat_url(env.api_url, env.job)
        except ValueError as err:
            log.warning("not sending heartbeats: %s", err)
            return None
        return cls(clock, url, env.group, env.rank, settings, env.token_file)

    def beat(self) -> Heartbeat:
        """What this rank says now, within the wire model's bounds."""
        step = self.clock.step_time_s
        if step is not None and not (math.isfinite(step) and step >= 0):
            step = None
        return Heartbeat(
            group=self.group,
            rank=self.rank,
            steps=min(self.clock.steps, MAX_STEPS),
            step_time_s=min(step, MAX_STEP_TIME_S) if step is not None else None,
            interval_s=self.settings.interval_s,
            saving=self.clock.saving,
            hang_timeout_s=self.settings.hang_timeout_s,
            hang_step_multiple=self.settings.hang_step_multiple,
        )

    def _headers(self) -> dict[str, str]:
        if self.token_file is None:
            return {}
        try:
            token = self.token_file.read_text().strip()
        except OSError:
            return {}
        return {"Authorization": f"Bearer {token}"} if token else {}

    def send_once(self, client: httpx.Client) -> bool:
        """One heartbeat; True when the API took it. Never raises."""
        try:
            response = client.put(self.url, json=self.beat().wire(), headers=self._headers())
            response.raise_for_status()
        except Exception as err:  # the API being away must never stop training
            self.failed += 1
            if not self._failing:
                log.warning("heartbeat to %s failed: %s (retrying quietly)", self.url, err)
            self._failing = True
            return False
        if self._failing:
            log.info("heartbeats reach %s again", self.url)
        self._failing = False
        self.sent += 1
        return True

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="adl-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = self.settings.interval_s
        with httpx.Client(timeout=min(interval, 5.0)) as client:
            while True:
                self.send_once(client)
                if self._stop.wait(interval):
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.interval_s + 6.0)
            self._thread = None
