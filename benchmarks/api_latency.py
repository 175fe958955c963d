"""Latency of the worker API on the local backend as the number of jobs grows.

Each job's workers send a report (``PUT .../hints``) every 30 s or so, and Prometheus scrapes
``/metrics``; both go through the real FastAPI app over a real SQLite state file. Prints, per job
count, the median and p95 of a report (token check included) and of a scrape.

    .venv/bin/python benchmarks/api_latency.py [--jobs 1,100,1000] [--reports 50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from adl.api.app import create_app
from adl.local.api_store import LocalApiStore
from adl.local.store import Store
from adl.models import AdaptiveJobSpec

SPEC = AdaptiveJobSpec.model_validate(
    {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
)
REPORT = {"initBatchSize": 32, "maxBatchSize": 512, "batchSize": 64, "progress": 1.0}


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


def measure(jobs: int, reports: int, root: Path) -> tuple[float, float, float, float]:
    store = Store(root / f"state-{jobs}.db")
    records = [store.add_job("default", f"job-{i}", SPEC) for i in range(jobs)]
    client = TestClient(create_app(LocalApiStore(store)))
    put, scrape = [], []
    for i in range(reports):
        rec = records[(i * 7919) % jobs]  # spread over the jobs
        headers = {"Authorization": f"Bearer {rec.token}"}
        start = time.perf_counter()
        answer = client.put(f"/v1/jobs/default/{rec.name}/hints", json=REPORT, headers=headers)
        put.append(time.perf_counter() - start)
        assert answer.status_code == 204, answer.text
        if i % 5 == 0:
            start = time.perf_counter()
            assert client.get("/metrics").status_code == 200
            scrape.append(time.perf_counter() - start)
    store.close()
    return (*_ms(put), *_ms(scrape))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="1,100,1000", help="job counts, comma-separated")
    parser.add_argument("--reports", type=int, default=50, help="reports timed per job count")
    args = parser.parse_args()
    counts = [int(n) for n in args.jobs.split(",") if n.strip()]
    print(f"{'jobs':>6} | {'report p50 ms':>13} | {'report p95 ms':>13} | "
          f"{'/metrics p50 ms':>15} | {'/metrics p95 ms':>15}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            p50, p95, m50, m95 = measure(n, args.reports, Path(tmp))
            print(f"{n:>6} | {p50:>13.1f} | {p95:>13.1f} | {m50:>15.1f} | {m95:>15.1f}")


if __name__ == "__main__":
    main()
