"""Sends scheduler hints from rank 0 to the adl API, from a background thread.

``PUT $ADL_API_URL/v1/jobs/{ns}/{name}/hints`` with ``Authorization: Bearer <token>`` (the token
file is re-read for every request so a rotated token is picked up). A failing or absent API never
reaches the training loop: each report is retried a few times with exponential backoff, then
logged and left for the next one.

When reports go out (:func:`report_delays`): the first as soon as the throughput model can be
fitted (a few profiled steps into the run, so a job of a few minutes can still be resized), else
after the steady interval at the latest; then after 2 s, 4 s, 8 s ... doubling up to the steady
interval (30 s, or ``$ADL_REPORT_INTERVAL`` seconds). Every resize starts new worker processes,
so every group reports its new measurements early too.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import tenacity
from pydantic import BaseModel, ValidationError

from adl import contract as C
from adl.models import (
    MAX_EPOCH,
    MAX_GOODPUT,
    MAX_PROGRESS,
    MAX_REPLICAS,
    MAX_RESTART_COST_S,
    GradParamsModel,
    Hints,
    PerfParamsModel,
)
from adl.sched.goodput import BatchBounds, GradParams, PerfParams

M = TypeVar("M", bound=BaseModel)

log = logging.getLogger(__name__)

#: steady seconds between reports, once the early ones are over
DEFAULT_INTERVAL_S = 30.0
#: the environment variable that sets the steady interval, and its bounds in seconds (below a
#: second the reports cost more than they tell; above an hour the scheduler flies blind)
INTERVAL_ENV = "ADL_REPORT_INTERVAL"
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 3600.0
#: the gap after the first report; each next gap doubles, up to the steady interval
FIRST_GAP_S = 2.0
#: before the first report, how often to check whether the throughput model can be fitted yet
READY_POLL_S = 0.5


def report_interval(value: str | float | None = None) -> float:
    """The steady interval: ``value``, else ``$ADL_REPORT_INTERVAL``, else 30 s.

    Raises ``ValueError`` naming the setting for anything that is not a number of seconds within
    [1, 3600]: a typo should stop the job at start, not silently leave it unresized."""
    source = "report interval"
    if value is None:
        value = os.environ.get(INTERVAL_ENV) or None
        source = INTERVAL_ENV
    if value is None:
        return DEFAULT_INTERVAL_S
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a number of seconds, got {value!r}") from None
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:  # also refuses NaN
        raise ValueError(
            f"{source} must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} seconds, "
            f"got {value!r}"
        )
    return seconds


def report_delays(interval_s: float, first_gap_s: float = FIRST_GAP_S) -> Iterator[float]:
    """The gaps between consecutive reports after the first: ``first_gap_s`` doubling up to
    ``interval_s``, then ``interval_s`` for ever. Early reports let the scheduler size a job
    while it is young (a short job would otherwise finish before its second report); backing
    off keeps a long job's reports, and the API's load, at the steady rate."""
    gap = min(first_gap_s, interval_s)
    while True:
        yield gap
        gap = min(gap * 2.0, interval_s)


def model_fitted(hints: Hints | None) -> bool:
    """Whether these hints carry a throughput model (what the scheduler needs to resize)."""
    return hints is not None and hints.perf_params is not None


def _or_none(model: type[M], values: dict[str, float]) -> M | None:
    """``model`` of ``values``, or None when the model refuses them."""
    try:
        return model.model_validate(values)
    except ValidationError:
        return None


def build_hints(
    *,
    init_batch_size: int,
    bounds: BatchBounds | None = None,
    perf: PerfParams | None = None,
    grad: GradParams | None = None,
    progress: float = 0.0,
    total_progress: float | None = None,
    max_profiled_replicas: int = 0,
    batch_size: int | None = None,
    local_bsz: int | None = None,
    accum_steps: int | None = None,
    goodput: float | None = None,
    epoch: int | None = None,
    restart_cost_s: float | None = None,
    min_replicas: int | None = None,
    gpu_type: str = "",
) -> Hints:
    """The wire model from the library's own types (pure). Statistics that are not finite
    (a diverged run: NaN gradients) are left out rather than fail the report, and so is a
    gradient estimate with ``sqr == 0`` (it would make the largest batch look free)."""
    if perf is not None and not all(math.isfinite(x) for x in perf):
        perf = None
    if grad is not None and not grad.usable:  # non-finite, or sqr == 0: no estimate yet
        grad = None
    # out of the models' bounds (the API would refuse the whole report): left out too
    perf_model = _or_none(PerfParamsModel, perf._asdict()) if perf is not None else None
    grad_model = _or_none(GradParamsModel, grad._asdict()) if grad is not None else None
    if goodput is not None and not (math.isfinite(goodput) and 0 <= goodput <= MAX_GOODPUT):
        goodput = None
    if not math.isfinite(progress):
        progress = 0.0
    progress = min(max(progress, 0.0), MAX_PROGRESS)
    if total_progress is not None and not (
        math.isfinite(total_progress) and 0 <= total_progress <= MAX_PROGRESS
    ):
        total_progress = None
    if epoch is not None and not 0 <= epoch <= MAX_EPOCH:
        epoch = None
    return Hints(
        init_batch_size=init_batch_size,
        max_batch_size=bounds.max_batch_size if bounds else None,
        local_bsz_bounds=bounds.local_bsz_bounds if bounds else None,
        gradient_accumulation=bounds.gradient_accumulation if bounds else False,
        perf_params=perf_model,
        grad_params=grad_model,
        max_profiled_replicas=max_profiled_replicas,
        progress=progress,
        total_progress=total_progress,
        batch_size=batch_size,
        local_bsz=local_bsz,
        accum_steps=accum_steps,
        goodput=goodput,
        epoch=epoch,
        # bounded like the model's other fields: a clock that jumped must not fail the report
        restart_cost_s=restart_cost_s
        if restart_cost_s is not None and 0 <= restart_cost_s <= MAX_RESTART_COST_S
        else None,
        # a need beyond the model's bound is reported as the bound: the job still fits nowhere
        # smaller, and a report the API refuses would drop the rest of the hints
        min_replicas=min(int(min_replicas), MAX_REPLICAS) if min_replicas else None,
        # the type the model was measured on, as a node label writes it
        gpu_type=C.normalize_gpu_type(gpu_type),
    )


def current_batch(
    world_size: int,
    loader_config: tuple[int | None, int | None],
    step_local_bsz: int | None,
    step_micro: int,
) -> tuple[int | None, int | None, int | None]:
    """(global batch, micro-batch, accumulation steps) the job trains at now, for the status.

    The data loader's configuration when it set one: the last step's samples would show the
    short last batch of an epoch (a job at 128 shown at 29) or a step caught halfway through its
    micro-steps. Otherwise (a loop without the adaptive loader) the step being measured."""
    local, accum = loader_config
    if local:
        accum = max(int(accum or 0), 0)
        return world_size * local * (accum + 1), local, accum
    if not step_local_bsz:
        return None, None, None
    return world_size * step_local_bsz * max(step_micro, 1), step_local_bsz, max(step_micro - 1, 0)


def hints_url(api_url: str, job: str) -> str:
    """``ns/name`` -> the job's hints endpoint."""
    try:
        key = C.JobKey.parse(job)
    except ValueError:
        raise ValueError(f"ADL_JOB must be 'namespace/name', got {job!r}") from None
    return f"{api_url.rstrip('/')}/v1/jobs/{key.namespace}/{key.name}/hints"


def _worth_retrying(err: BaseException) -> bool:
    """Transport errors, 5xx, 429 and 401 (a token file being replaced) may pass; a report the
    service refused (400, 403, 404, 413, 422) would be refused again."""
    if isinstance(err, httpx.HTTPStatusError):
        code = err.response.status_code
        return code >= 500 or code in (401, 429)
    return isinstance(err, httpx.HTTPError)


def _describe(err: BaseException) -> str:
    """The error, with what the service said about it (its JSON ``detail``, shortened)."""
    if not isinstance(err, httpx.HTTPStatusError):
        return str(err)
    try:
        detail = err.response.json().get("detail")
    except (ValueError, AttributeError):
        detail = err.response.text
    said = str(detail or "")[:300]
    return f"HTTP {err.response.status_code}" + (f": {said}" if said else "")


class HintsReporter:
    """Periodic, failure-tolerant PUT of the hints a provider builds."""

    def __init__(
        self,
        provider: Callable[[], Hints | None],
        url: str,
        token_file: str | Path | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 5.0,
        attempts: int = 3,
        backoff_s: float = 0.5,
        first_gap_s: float = FIRST_GAP_S,
        poll_s: float = READY_POLL_S,
        watch: Callable[[], Hashable] | None = None,
    ) -> None:
        self.provider = provider
        # Cheap to call: when its value differs from the one at the last report, report at once
        # (the batch the job uses changed, and the status would show the old one until then).
        self.watch = watch
        self._reported_key: Hashable = None
        self.url = url
        self.token_file = Path(token_file) if token_file else None
        self.interval_s = interval_s
        self.first_gap_s = first_gap_s
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.attempts = max(attempts, 1)
        self.backoff_s = backoff_s
        self.sent = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(
        cls,
        provider: Callable[[], Hints | None],
        interval_s: float | None = None,
        watch: Callable[[], Hashable] | None = None,
    ) -> HintsReporter | None:
        """A reporter for this worker, or None when it is not rank 0 or no API is configured.
        The steady interval is ``interval_s``, else ``$ADL_REPORT_INTERVAL``, else 30 s."""
        interval = report_interval(interval_s)  # a bad setting fails on every rank alike
        api, job = os.environ.get(C.ENV_API_URL), os.environ.get(C.ENV_JOB)
        if not api or not job or os.environ.get(C.ENV_RANK, "0") != "0":
            return None
        try:
            url = hints_url(api, job)
        except ValueError as err:
            log.warning("not reporting hints: %s", err)
            return None
        token = os.environ.get(C.ENV_TOKEN_FILE)
        return cls(provider, url, token, interval_s=interval, watch=watch)

    # ------------------------------------------------------------------ one report

    def _headers(self) -> dict[str, str]:
        if self.token_file is None:
            return {}
        try:
            token = self.token_file.read_text().strip()
        except OSError as err:
            log.warning("cannot read token file %s: %s", self.token_file, err)
            return {}
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)  # stop() cuts a backoff short

    def _put(self, hints: Hints) -> None:
        response = httpx.put(
            self.url, json=hints.wire(), headers=self._headers(), timeout=self.timeout_s
        )
        response.raise_for_status()

    def _build(self) -> Hints | None:
        try:
            return self.provider()
        except Exception:
            log.exception("building hints failed")
            return None

    def report_once(self) -> bool:
        """Build and send hints now; True on success. Never raises."""
        self._reported_key = self._key()  # before building: a change meanwhile reports again
        return self._send(self._build())

    def _key(self) -> Hashable:
        if self.watch is None:
            return None
        try:
            return self.watch()
        except Exception:
            log.exception("watching the batch configuration failed")
            return self._reported_key

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds``, or less when the watched value changes; True once stopped."""
        if self.watch is None:
            return self._stop.wait(seconds)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._stop.wait(min(self.poll_s, left)):
                return True
            if self._key() != self._reported_key:
                break
        return self._stop.is_set()

    def _send(self, hints: Hints | None) -> bool:
        if hints is None:
            return False
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(multiplier=self.backoff_s, max=self.interval_s),
            retry=tenacity.retry_if_exception(_worth_retrying),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            retrying(self._put, hints)
        except Exception as err:  # the API being down must never stop training
            self.failed += 1
            log.warning("reporting hints to %s failed: %s", self.url, _describe(err))
            return False
        self.sent += 1
        return True

    # ------------------------------------------------------------------ background thread

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="adl-hints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Until the model can be fitted, look often (building hints without one is cheap); give
        # up waiting after one steady interval, so a job of very slow steps still reports.
        deadline = time.monotonic() + self.interval_s
        while not self._stop.wait(self.poll_s):
            key = self._key()
            hints = self._build()
            if model_fitted(hints) or time.monotonic() >= deadline:
                self._reported_key = key
                self._send(hints)
                break
        for gap in report_delays(self.interval_s, self.first_gap_s):
            if self._wait(gap):
                return
            self.report_once()

    def stop(self, flush: bool = False) -> None:
        """Stop the thread; ``flush`` sends one last report first (short timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s * self.attempts + 1.0)
            self._thread = None
        if flush:
            self._stop.clear()
            try:
                self.report_once()
            finally:
                self._stop.set()
