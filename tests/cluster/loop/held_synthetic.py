"""``examples/train_synthetic.py`` held at known epochs, so a disruption test acts while the job
trains at a known size whatever the machine's speed (a fast machine trains the example's
epochs in a fraction of a second; a slow one takes seconds).

Run as the example itself (same arguments). Before an epoch, every rank holds when

- it is in the job's first group (``ADL_GROUP=1``, one replica) and the epoch is the second or
  later: the job waits, its hints reported by the reporter's thread, until the scheduler grows
  it (the resize's stop releases it);
- it runs at world size 2 and the epoch is ``HELD_FROM`` or later: the grown job waits there
  until something stops it (the disruption the test causes, or the shrink for another job).
  ``ADL_TEST_HOLD_GROWN`` in its environment chooses which grown groups hold: ``every`` (the
  default), ``first`` (only group 2, the one the first growth makes: a job grown again later
  trains on) or ``never``.

It declares a long run to the scheduler (``DECLARED_EPOCHS``) and stops after ``--epochs``.

Rank 0 prints ``{"held": epoch, "world": W, "group": G}`` when it starts holding. A hold ends
when this rank's stop is requested (SIGTERM, or the stop file); the rank then takes the
epoch's first step, at whose boundary adl checkpoints and exits 143. Groups after those train
freely to the end. A hold lasts at most ``HOLD_LIMIT_S``: the test did not act, and the job
fails loudly rather than sit there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # the checkout: adl and the test kit

import adl  # noqa: E402
from adl.client_lib.env import context  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

#: the grown (world size 2) job holds from this epoch on
HELD_FROM = 2
HOLD_LIMIT_S = 240.0
#: the length the job declares to the scheduler (``remaining_epochs_until``), whatever it runs:
#: a job a few epochs long is rightly never grown (its restart would cost more than the second
#: replica saves, on a fast machine by far), and the test needs it grown
DECLARED_EPOCHS = 1000


def _held(epoch: int) -> bool:
    ctx = context()
    first_group = os.environ.get("ADL_GROUP") == "1" and ctx.world_size == 1
    mode = os.environ.get("ADL_TEST_HOLD_GROWN", "every")
    group = os.environ.get("ADL_GROUP")
    grown = ctx.world_size == 2 and (mode == "every" or (mode == "first" and group == "2"))
    return (first_group and epoch >= 1) or (grown and epoch >= HELD_FROM)


def _hold(epoch: int) -> None:
    ctx = context()
    if ctx.rank == 0:
        group = int(os.environ.get("ADL_GROUP", "0"))
        print(json.dumps({"held": epoch, "world": ctx.world_size, "group": group}), flush=True)
    monitor = ctx.preemption
    assert monitor is not None, "run as a job's worker (adl's preemption monitor)"
    wait_for(monitor.local_stop_requested, HOLD_LIMIT_S, f"epoch {epoch}: a stop")


def main() -> None:
    script = ROOT / "examples" / "train_synthetic.py"
    spec = importlib.util.spec_from_file_location("train_synthetic", script)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    epochs_until = adl.remaining_epochs_until

    def held_epochs(total: int) -> Iterator[int]:
        for epoch in epochs_until(max(total, DECLARED_EPOCHS)):
            if epoch >= total:
                return  # the epochs it runs are the example's own (--epochs)
            if _held(epoch):
                _hold(epoch)
            yield epoch

    adl.remaining_epochs_until = held_epochs  # type: ignore[assignment]  # what main() calls
    example.main(sys.argv[1:])


if __name__ == "__main__":
    main()
