"""Optimism beyond what a job has measured: the policy's exploration prior.

A job's throughput model is fitted to the configurations it has run. Beyond its largest profiled
replica count the fitted growth of gradient-sync time with replicas ("retrogression") is an
extrapolation, often from one or two points, and a pessimistic one locks the job out of the
configurations that would prove it wrong. So for ``K`` above the profiled count the policy values
the job as if sync time stopped growing where it was last measured (compute still scales, the
batch-size efficiency is still modelled). The job only ever gets ``2 x`` its profiled count (the
ramp cap), measures the truth there, and its next model corrects any over-estimate.
"""

from __future__ import annotations

from adl.sched.goodput import PerfParams


def frozen_sync(perf: PerfParams, profiled: int) -> PerfParams:
    """The model with sync time held at its value for ``profiled`` replicas (per regime: within
    a node and across nodes) for every larger replica count. Never slower than ``perf`` there,
    since the fitted growth terms are non-negative."""
    extra = max(int(profiled) - 2, 0)
    return perf._replace(
        alpha_r=perf.alpha_r + perf.beta_r * extra,
        beta_r=0.0,
        alpha_n=perf.alpha_n + perf.beta_n * extra,
        beta_n=0.0,
    )
