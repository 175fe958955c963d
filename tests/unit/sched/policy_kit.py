"""Jobs and clusters for the policy tests (adl's policy and the Pollux baseline)."""

import numpy as np

from adl.sched.types import JobInfo, NodeInfo


def amdahl(serial: float, cross_node: float = 0.9):
    """Speedup of a job with a serial fraction; spanning nodes costs a constant factor."""

    def fn(n, k):
        n = np.asarray(n, dtype=float)
        k = np.asarray(k, dtype=float)
        s = k / (1.0 + serial * (k - 1.0))
        return np.where(n > 1, s * cross_node, s)

    return fn


def nodes_of(count: int, gpus: int = 4) -> list[NodeInfo]:
    return [NodeInfo(f"n{i}", gpus) for i in range(count)]


def job(name: str, order: int = 0, **kw) -> JobInfo:
    kw.setdefault("speedup", amdahl(0.05))
    kw.setdefault("max_profiled_replicas", 32)
    kw.setdefault("remaining_s", 3600.0)
    return JobInfo(name=name, submit_order=order, **kw)


def random_jobs(seed: int, count: int) -> list[JobInfo]:
    rng = np.random.default_rng(seed)
    return [
        job(
            f"j{i}",
            i,
            speedup=amdahl(float(rng.uniform(0, 0.3)), float(rng.uniform(0.5, 1.0))),
            remaining_s=float(10 ** rng.uniform(2, 5)) if rng.random() < 0.7 else None,
            attained_service_s=float(rng.uniform(0, 1e4)),
            age_s=float(rng.uniform(0, 1e4)),
            min_replicas=int(rng.integers(0, 3)),
            max_replicas=int(rng.integers(2, 20)),
            max_profiled_replicas=int(rng.integers(0, 9)),
            restarts=int(rng.integers(0, 4)),
        )
        for i in range(count)
    ]


def counts(allocation) -> dict[str, int]:
    return {name: len(names) for name, names in allocation.items()}
