"""``python -m adl.operator`` as the chart runs it: kopf and the API service in one process,
against kmock; liveness, readiness, a job started, round metrics, clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from operator_harness import *  # noqa: F403  (the kmock fixtures)
from operator_harness import objects

from adl.operator.store import KUBE_URL_ENV, api_client
from tests.waiting import eventually


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_operator_process_serves_api_and_runs_jobs(k8s: Any, tmp_path: Path) -> None:
    core = client.CoreV1Api(api_client())
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    await asyncio.to_thread(core.create_node, node)
    port, health, metrics_port = free_port(), free_port(), free_port()
    env = {**os.environ, KUBE_URL_ENV: str(k8s.url)}
    args = [
        sys.executable,
        "-m",
        "adl.operator",
        "-A",
        "--standalone",
        f"--port={port}",
        f"--health-port={health}",
        f"--metrics-port={metrics_port}",
        "--round-interval=0.5",
    ]
    log_path = tmp_path / "operator.log"
    log_file = log_path.open("wb")  # a file, not a pipe: an unread pipe would block the process

    def output() -> str:
        return log_path.read_text(errors="replace")[-4000:]

    proc = await asyncio.to_thread(
        subprocess.Popen, args, env=env, stdout=log_file, stderr=subprocess.STDOUT
    )
    try:
        async with httpx.AsyncClient() as http:

            async def status_of(url: str) -> int:
                try:
                    return (await http.get(url)).status_code
                except httpx.TransportError:
                    return 0

            async def ready() -> bool:
                return await status_of(f"http://127.0.0.1:{port}/readyz") == 200

            def exited() -> str | None:
                return None if proc.poll() is None else f"exited with {proc.returncode}"

            await eventually(ready, 40, what="/readyz", details=output, give_up=exited)
            assert await status_of(f"http://127.0.0.1:{health}/healthz") == 200

            container = {"name": "t", "image": "t:1", "command": ["python", "t.py"]}
            job = {
                "apiVersion": "adl.dev/v1",
                "kind": "AdaptiveJob",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"template": {"spec": {"containers": [container]}}, "maxReplicas": 2},
            }
            custom = client.CustomObjectsApi(api_client())
            await asyncio.to_thread(
                custom.create_namespaced_custom_object,
                "adl.dev",
                "v1",
                "default",
                "adaptivejobs",
                job,
            )
            # the real AdlPolicy places the job on the only node's GPUs
            await eventually(lambda: "p-g1-0" in objects(k8s, "pods"), timeout=20, what="pod")
            pod = objects(k8s, "pods")["p-g1-0"]
            env_vars = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
            assert env_vars["ADL_API_URL"] == "http://adl.adl-system.svc:8080"
            # /metrics (every tenant's jobs) only on its own port; no docs anywhere
            for path in ("/metrics", "/docs", "/openapi.json"):
                assert await status_of(f"http://127.0.0.1:{port}{path}") == 404, path
            for path in ("/docs", "/openapi.json", "/readyz"):
                assert await status_of(f"http://127.0.0.1:{metrics_port}{path}") == 404, path
            metrics = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
            assert "adl_rounds_total" in metrics and "adl_round_latency_seconds_count" in metrics
            rounds = [line for line in metrics.splitlines() if line.startswith("adl_rounds_total")]
            assert float(rounds[0].split()[-1]) >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)
            raise AssertionError(f"no exit within 20 s of SIGTERM:\n{output()}") from None
        finally:
            log_file.close()
    # kopf stops on SIGTERM and the API service stops with it: a clean exit, not a kill
    assert code == 0, f"exit code {code}:\n{output()}"
    # the API's lifespan ended normally (it was not cancelled as one of kopf's tasks)
    assert "Application shutdown complete" in output() and "Traceback" not in output()
    assert "Timer 'tick' succeeded" not in output()  # no log line per job per second
