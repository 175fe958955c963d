"""One unit of work per job on a mixed cluster, whatever GPU type the job runs on now.

A job reports its remaining work in seconds on one GPU *of the type it runs on*
(``JobInfo.remaining_s``: its progress over its current model's single-GPU goodput) and its
speed on every type relative to that same type (``JobInfo.type_speed``: 1.0 where it runs).
Move it from a V100 to a K80 that runs it 6x slower and both are restated: its remaining
seconds grow 6x, its V100 speed becomes 6.0.

The policy's value of a placement is ``w(R) x speedup x speed``. With the shortest-first
exponent ``a = 1`` that is unit-free (the rate at which the job's fraction of work is done),
but the default ``a = 1/2`` is not: restating ``R`` and the speeds by ``c`` scales the job's
value by ``c^(1/2)``, and the aging term moves too. So a job on the slow type weighed itself
``sqrt(6)`` ~ 2.5 x higher than the same job on the fast one, took the fast GPUs from a like
job, dropped to the lower weight there, and lost them back the next round: in the
mixed-cluster replays two imagenet jobs swapped V100s and K80s every round for ten minutes at
a time, again and again (issue 33).

The fix states every job in one frame that does not depend on where it runs: its work in
seconds on one GPU of its *fastest* type (measured or estimated; a type only being explored,
``JobInfo.exploring``, is optimistic and does not count), and its speeds relative to that
type. On a cluster of one type, and for a job that runs on its fastest type, the frame is the
reported one (the scale is exactly 1.0), so uniform clusters schedule exactly as before.
Pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping


def frame_scale(speeds: Mapping[str, float], exploring: Collection[str] = ()) -> float:
    """The job's speed on its fastest type relative to its reported frame: ``speeds`` are the
    job's speeds on the types it may use (relative to the type its model was measured on),
    ``exploring`` the types valued optimistically and not measured. Dividing the reported
    remaining work and every speed by it puts the job in its fastest type's frame. 1.0 when
    nothing else is known or every known speed is invalid."""
    known = [s for t, s in speeds.items() if t not in exploring and math.isfinite(s) and s > 0.0]
    return max(known, default=1.0)
