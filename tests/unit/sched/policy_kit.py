"""Jobs and clusters for the policy tests (adl's policy and the Pollux baseline)."""

import numpy as np

from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams, PerfParams
from adl.sched.speedup import SpeedupFunction
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


def fitted_speedup(rng: np.random.Generator) -> SpeedupFunction:
    """A random fitted goodput model's speedup (the policy tabulates these a row at a time)."""
    sqr = float(rng.uniform(0.1, 1.0))
    b0 = int(2 ** rng.integers(5, 9))
    return SpeedupFunction(
        GoodputFunction(
            PerfParams(
                alpha_c=float(rng.uniform(0.005, 0.05)),
                beta_c=float(rng.uniform(1e-4, 5e-3)),
                alpha_n=float(rng.uniform(0.02, 0.3)),
                beta_n=float(rng.uniform(0.0, 0.02)),
                alpha_r=float(rng.uniform(0.005, 0.05)),
                beta_r=float(rng.uniform(0.0, 0.005)),
                gamma=float(rng.uniform(1.0, 3.0)),
            ),
            GradParams(sqr=sqr, var=sqr * float(10 ** rng.uniform(-1, 3))),
            BatchBounds(
                init_batch_size=b0,
                max_batch_size=b0 * int(2 ** rng.integers(2, 7)),
                local_bsz_bounds=(max(b0 // 8, 1), b0 * 2),
                gradient_accumulation=bool(rng.integers(0, 2)),
            ),
        )
    )
