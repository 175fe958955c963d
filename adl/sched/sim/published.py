"""Published average JCTs (seconds, 1.0x load) from the traces README, to print beside ours.

The Pollux column is the published adaptive scheduler, the yardstick for ``--policy adl``.
"""

from __future__ import annotations

#: workload name -> policy name -> published average JCT in seconds
PUBLISHED_AVG_JCT_S: dict[str, dict[str, float]] = {
    "workload-1": {"adl": 2089, "optimus": 4087, "tiresias": 2474},
    "workload-2": {"adl": 3323, "optimus": 6914, "tiresias": 5145},
    "workload-3": {"adl": 2188, "optimus": 3944, "tiresias": 3876},
    "workload-4": {"adl": 2721, "optimus": 5968, "tiresias": 3280},
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
#: what each of our policy names is compared against in the published table
PUBLISHED_LABEL: dict[str, str] = {
    "adl": "Pollux",
    "optimus": "Optimus+Oracle",
    "tiresias": "Tiresias",
}


def published_avg_jct(workload: str, policy: str) -> float | None:
    """The published figure for this workload and policy, if there is one."""
    return PUBLISHED_AVG_JCT_S.get(workload, {}).get(policy)
