"""GPU types too slow for a job to be worth running it on (opt-in: ``Knobs.min_type_speed``).

On a mixed cluster a job that cannot have its fast type takes a slow one rather than wait:
any progress is worth more to the objective than none. For a job the slow type runs at a
sixth or less of its fastest (imagenet, yolov3 and cifar10 on a K80 against a V100), that
holds many GPUs for little progress, and the job moves back, a second restart, as soon as
its fast type has room: most of adl's moves between types in the mixed-cluster replays were
such round trips (issue 33). Sia's allocations leave these jobs off the K80s and give the
K80s to the jobs that lose least there (bert, deepspeech2, ncf).

With the knob, a job does not use a type that runs it at less than ``min_type_speed`` of its
fastest type (its speeds in its fastest type's frame, :mod:`adl.sched.policy_type_frame`,
where the fastest is 1.0, so a job always keeps that type). On a cluster of one type every
speed is 1.0 and nothing is left out. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping


def fast_enough(speeds: Mapping[str, float], floor: float) -> dict[str, float]:
    """``speeds`` (type -> speed relative to the job's fastest type) without the types below
    ``floor``; all of them when the floor is 0 or would leave none."""
    if floor <= 0.0:
        return dict(speeds)
    kept = {t: s for t, s in speeds.items() if s >= floor}
    return kept or dict(speeds)
