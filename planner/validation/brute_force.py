"""Brute-force references for the searches of ``planner.optimize``: the SLO capacity of one configuration
found by bisection on the rate with the full ``evaluate``, one configuration at a time. Tests hold the
vectorized searches against it; the service never imports it."""

from __future__ import annotations

import dataclasses

from planner.optimize.common import meets_slo
from planner.serving.evaluate import evaluate
from planner.serving.types import Evaluation, ServingProblem, Slo
from planner.serving.workload import Arrival


def evaluate_at_rate(problem: ServingProblem, rate_per_s: float, slo: Slo) -> Evaluation:
    """``evaluate`` under Poisson arrivals at ``rate_per_s`` with ``slo``."""
    wl = dataclasses.replace(problem.workload, arrival=Arrival(kind="poisson", rate_per_s=rate_per_s))
    return evaluate(dataclasses.replace(problem, workload=wl, slo=slo))


def brute_force_capacity(problem: ServingProblem, slo: Slo, halvings: int = 26) -> float:
    """Largest Poisson rate at which the full evaluation meets the SLO (bisection; 0 when even a trickle
    misses it). An overloaded evaluation reports the saturation rate it serves, which bounds the search."""
    saturation = evaluate_at_rate(problem, 1e6, slo).requests_per_s
    if not meets_slo(evaluate_at_rate(problem, saturation * 1e-6, slo), slo):
        return 0.0
    lo, hi = 0.0, saturation
    for _ in range(halvings):
        mid = 0.5 * (lo + hi)
        if meets_slo(evaluate_at_rate(problem, mid, slo), slo):
            lo = mid
        else:
            hi = mid
    return lo
