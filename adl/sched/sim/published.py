"""Published average JCTs (seconds, 1.0x load) from the traces README, to print beside ours.

Each policy we replay is compared with one published scheduler: the baselines with themselves
(``pollux``, Pollux's policy with its genetic search, and ``pollux-objective``, its objective
solved by adl's optimizer, both with Pollux), ``adl`` with Pollux, its yardstick. Sia published
no figures for these workloads.
"""

from __future__ import annotations

#: workload name -> published scheduler -> average JCT in seconds
PUBLISHED_AVG_JCT_S: dict[str, dict[str, float]] = {
    "workload-1": {"pollux": 2089, "optimus": 4087, "tiresias": 2474},
    "workload-2": {"pollux": 3323, "optimus": 6914, "tiresias": 5145},
    "workload-3": {"pollux": 2188, "optimus": 3944, "tiresias": 3876},
    "workload-4": {"pollux": 2721, "optimus": 5968, "tiresias": 3280},
}
#: Pollux's published p99 JCT and makespan (seconds, 1.0x load), the other two yardsticks
POLLUX_P99_JCT_S: dict[str, float] = {
    "workload-1": 39105,
    "workload-2": 43324,
    "workload-3": 14570,
    "workload-4": 51976,
}
POLLUX_MAKESPAN_S: dict[str, float] = {
    "workload-1": 64849,
    "workload-2": 56644,
    "workload-3": 36806,
    "workload-4": 64694,
}
#: our policy name -> the published scheduler it is compared with
YARDSTICK: dict[str, str] = {
    "adl": "pollux",
    "pollux": "pollux",
    "pollux-objective": "pollux",
    "optimus": "optimus",
    "tiresias": "tiresias",
}
#: our policy name -> how the published figure beside it is labelled
PUBLISHED_LABEL: dict[str, str] = {
    "adl": "Pollux",
    "pollux": "Pollux",
    "pollux-objective": "Pollux",
    "optimus": "Optimus+Oracle",
    "tiresias": "Tiresias",
}


def published_avg_jct(workload: str, policy: str) -> float | None:
    """The published figure this policy is compared with on this workload, if there is one."""
    yardstick = YARDSTICK.get(policy)
    return None if yardstick is None else PUBLISHED_AVG_JCT_S.get(workload, {}).get(yardstick)
