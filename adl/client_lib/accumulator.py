"""Metrics that sum across replicas and survive restarts.

Each replica adds to its own running sums (``acc["loss"] += x``); :meth:`Accumulator.synchronized`
(a collective: every rank enters it) folds every replica's additions into a job-wide total that is
identical on all ranks. Integer counts stay ``int`` (summed exactly as int64), anything else is a
``float``.

Surviving a restart means giving each accumulator of the restarted script the sums of *the same*
accumulator of the stopped one, however the script builds them (once, per epoch, inside a
function, several, named or not). A restart replays the script: the code before
``remaining_epochs_until`` runs again, finished epochs are skipped, the epoch the job stopped in
runs again from its start while the data loaders skip the batches already consumed (a finished
pass yields nothing). So an accumulator is identified by where it is created:

* its *segment* (:func:`adl.client_lib.epoch.segment`): the epoch it is created in, or the code
  before or after the epoch loop;
* its name, when it has one, and how many were created before it in that segment (with that
  name, or unnamed).

The checkpoint holds the accumulators of the current epoch (all of them, also those already out
of scope: their epoch replays, and its printed metrics must come out the same), and those still
referenced that were created before or after the epoch loop (code outside the loop replays with
fresh passes of the loaders, so an accumulator it dropped must start empty). An accumulator
created in a finished epoch is never restored: its epoch does not replay.

Patterns that cannot be matched after a restart raise :class:`AccumulatorScopeError` when they
happen, not after the restart: an unnamed accumulator created in one epoch (or inside the loop
over a data loader, at one batch) and added to in another, and accumulators created inside a
hand-written epoch loop (``for epoch in range(n)``). A *named* accumulator used across epochs
or batches is kept under its name instead and restored whenever one with that name is created.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from adl.client_lib.context import JobContext
from adl.client_lib.env import context
from adl.client_lib.epoch import segment

Number = int | float
STATE_NAME = "adl.accumulators"
_LONG = "long/"  # key prefix of named accumulators used across epochs or batches


class AccumulatorScopeError(RuntimeError):
    """An accumulator is used in a way a restart could not resume with the right sums."""


def _distributed(ctx: JobContext) -> bool:
    return ctx.world_size > 1 and dist.is_initialized()


def _number(value: Any) -> Number:
    """An int for integral values (Python, numpy or tensor), else a float."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float):
        return value
    try:
        return operator.index(value)
    except TypeError:
        return float(value)


def _all_strings(strings: list[str], group: Any | None, world: int) -> list[str]:
    """The union of every rank's strings, sorted (encoded as bytes: no pickling)."""
    blob = "\0".join(sorted(strings)).encode()
    size = torch.tensor([len(blob)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = int(max(s.item() for s in sizes))
    buf = torch.zeros(longest, dtype=torch.uint8)
    if blob:
        buf[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, buf, group=group)
    union: set[str] = set()
    for b, n in zip(bufs, sizes, strict=True):
        text = bytes(b[: int(n.item())].tolist()).decode()
        union.update(k for k in text.split("\0") if k)
    return sorted(union)


def _fold(ctx: JobContext, accs: dict[str, Accumulator]) -> None:
    """Collective: fold the pending additions of several accumulators into their totals.

    Accumulators are matched across ranks by their key in ``accs`` and their sums by name, over
    the union of every rank's (a rank without one adds zero), in at most two all-reduces: int64
    for keys that are integers on every rank (exact), float64 for the others.
    """
    if _distributed(ctx):
        tags = [
            f"{'i' if acc._integral(key) else 'f'}\x1f{ident}\x1f{key}"
            for ident, acc in accs.items()
            for key in acc
        ]
        kinds: dict[tuple[str, str], str] = {}
        for tag in _all_strings(tags, ctx.cpu_group, ctx.world_size):
            kind, ident, key = tag.split("\x1f", 2)
            if kinds.get((ident, key)) != "f":
                kinds[(ident, key)] = kind
        for kind, dtype in (("i", torch.int64), ("f", torch.float64)):
            names = sorted(k for k, v in kinds.items() if v == kind)
            if not names:
                continue
            delta = torch.tensor(
                [accs[i]._local.get(k, 0) if i in accs else 0 for i, k in names], dtype=dtype
            )
            dist.all_reduce(delta, group=ctx.cpu_group)
            for (ident, key), value in zip(names, delta.tolist(), strict=True):
                acc = accs.get(ident)
                if acc is not None:
                    total = acc._total.get(key, 0)
                    acc._total[key] = total + value if kind == "i" else float(total) + value
    else:
        for acc in accs.values():
            for key, value in acc._local.items():
                acc._total[key] = acc._total.get(key, 0) + value
    for acc in accs.values():
        acc._local.clear()


class Accumulator(MutableMapping[str, Number]):
    """A dict of job-wide sums; read ``acc[k]`` for this replica's view (total + own additions).

    Give it a ``name`` to keep one accumulator across epochs (e.g. created lazily and reused);
    without one it belongs to the epoch (or the batch of a data loader) it is created in. See the
    module docstring for how it is restored after a restart.
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._total: dict[str, Number] = {}
        self._local: dict[str, Number] = {}
        self._ctx = context()
        # Where it may be added to (None: anywhere), and its checkpoint key (None: not saved).
        self._epoch: int | None = None
        self._path: tuple[tuple[int, int], ...] = ()
        self._key: str | None = None
        _registry(self._ctx).adopt(self)

    # ------------------------------------------------------------------ mapping

    def __getitem__(self, key: str) -> Number:
        """Missing keys read as 0 (like ``collections.Counter``), so ``acc[k] += x`` works."""
        return self._total.get(key, 0) + self._local.get(key, 0)

    def __contains__(self, key: object) -> bool:
        return key in self._total or key in self._local

    def __setitem__(self, key: str, value: Number) -> None:
        """Record an assignment as an addition, so ``acc[k] += x`` adds x on this replica."""
        self._touch()
        self._local[key] = _number(value) - self._total.get(key, 0)

    def __delitem__(self, key: str) -> None:
        if key not in self._total and key not in self._local:
            raise KeyError(key)
        self._touch()
        self._total.pop(key, None)
        self._local.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(self._total) | set(self._local)))

    def __len__(self) -> int:
        return len(set(self._total) | set(self._local))

    def __repr__(self) -> str:
        return f"Accumulator({self.name!r}, {dict(self)})"

    def update_sums(self, values: dict[str, Number]) -> None:
        """Add several values at once."""
        self._touch()
        for key, value in values.items():
            self._local[key] = self._local.get(key, 0) + _number(value)

    def _integral(self, key: str) -> bool:
        return isinstance(self._total.get(key, 0), int) and isinstance(self._local.get(key, 0), int)

    # ------------------------------------------------------------------ collective

    def sync(self) -> dict[str, Number]:
        """Collective: fold every replica's additions into the totals; return the totals."""
        _fold(self._ctx, {"": self})
        return dict(self._total)

    @contextmanager
    def synchronized(self) -> Iterator[Accumulator]:
        """Collective: inside the block, every rank reads the same job-wide totals."""
        self.sync()
        yield self

    def reset(self) -> None:
        """Forget every value (call on every rank, e.g. at the start of an epoch)."""
        self._touch()
        self._total.clear()
        self._local.clear()

    # ------------------------------------------------------------------ scope

    def _touch(self) -> None:
        """Check that the script adds to this accumulator where a restart can resume it."""
        if self._epoch is None and not self._path:
            return
        ctx = self._ctx
        here = ctx.feeding_path
        if (self._epoch is None or segment(ctx) == self._epoch) and here[
            : len(self._path)
        ] == self._path:
            return
        if self.name is None:
            where = f"in epoch {self._epoch}" if self._epoch is not None else ""
            if self._path:
                where = f"{where} inside the loop over a data loader, at one of its batches"
            raise AccumulatorScopeError(
                f"an unnamed adl.Accumulator() created {where.strip()} is added to after that "
                f"{'batch' if self._path else 'epoch'}: after a restart it could not be told "
                f"apart from a new one and would resume with wrong sums. Create it where it "
                f"starts counting (before the epoch loop to count the whole run, or again in "
                f"each epoch), or give it a name, adl.Accumulator('train'), to keep it across "
                f"epochs"
            )
        _registry(ctx).keep_by_name(self)

    def _unscope(self) -> None:
        self._epoch, self._path = None, ()


class _Registry:
    """The checkpoint state of every accumulator of the job (see the module docstring)."""

    name = STATE_NAME

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx
        self._saved: dict[str, dict[str, Any]] = {}  # restored and not claimed yet, by key
        self._held: dict[str, Accumulator] = {}  # this epoch's (and named long-lived) ones
        self._live: weakref.WeakValueDictionary[str, Accumulator] = weakref.WeakValueDictionary()
        self._created: dict[str, int] = {}  # accumulators created so far, per segment and name

    def adopt(self, acc: Accumulator) -> None:
        """Give a new accumulator its identity and, if the checkpoint has it, its sums."""
        ctx = self._ctx
        seg = segment(ctx)
        path = ctx.feeding_path
        if isinstance(seg, int):
            acc._epoch = seg
        elif ctx.manual_epoch_loop and not path:
            raise AccumulatorScopeError(
                "adl.Accumulator() created inside an epoch loop that is not "
                "adl.remaining_epochs_until(): a restart runs such a loop again from its first "
                "epoch, so this accumulator could not get its own sums back. Loop with "
                "`for epoch in adl.remaining_epochs_until(n):`"
            )
        entry: dict[str, Any] | None = None
        if path:
            # Inside a loader's loop body: a restart resumes after the batch it stopped at and
            # never comes back to this one, so there is nothing to restore or save.
            acc._path = path
        else:
            base = f"{seg}/{'' if acc.name is None else acc.name}"
            count = self._created.get(base, 0)
            self._created[base] = count + 1
            acc._key = f"{base}#{count}"
            entry = self._saved.pop(acc._key, None)
        if entry is None and acc.name is not None:
            entry = self._saved.pop(_LONG + acc.name, None)
            if entry is not None:
                acc._key = _LONG + acc.name
                acc._unscope()
        if entry is not None:
            acc._total = dict(entry["total"])
        self._remember(acc)

    def keep_by_name(self, acc: Accumulator) -> None:
        """A named accumulator used beyond its epoch or batch: save and restore it by name."""
        assert acc.name is not None
        if acc._key is not None:
            self._held.pop(acc._key, None)
            self._live.pop(acc._key, None)
        acc._key = _LONG + acc.name
        acc._unscope()
        self._held[acc._key] = acc

    def _remember(self, acc: Accumulator) -> None:
        self._prune()
        if acc._key is None:
            return
        if acc._epoch is not None or acc._key.startswith(_LONG):
            self._held[acc._key] = acc
        else:
            self._live[acc._key] = acc

    def _prune(self) -> None:
        """Let go of the accumulators of finished epochs: their epochs never replay."""
        seg = segment(self._ctx)
        for key, acc in list(self._held.items()):
            if acc._epoch is not None and acc._epoch != seg:
                del self._held[key]

    def _saving(self) -> dict[str, Accumulator]:
        self._prune()
        accs = dict(self._live.items())
        accs.update(self._held)
        return accs

    # ------------------------------------------------------------------ checkpoint

    def prepare_checkpoint(self) -> None:
        _fold(self._ctx, self._saving())

    def state_dict(self) -> dict[str, Any]:
        entries: dict[str, Any] = {}
        # Restored but not created again yet (the job stopped again before reaching them).
        prefix = f"{segment(self._ctx)}/"
        for key, entry in self._saved.items():
            if key.startswith((prefix, _LONG)):
                entries[key] = entry
        for key, acc in self._saving().items():
            entries[key] = {"total": dict(acc._total)}
        return {"entries": entries}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._saved = dict(state["entries"])


def _registry(ctx: JobContext) -> _Registry:
    registry = ctx.state(STATE_NAME)
    if registry is None:
        registry = _Registry(ctx)
        ctx.register(registry)
    assert isinstance(registry, _Registry)
    return registry
