"""Pieces the searches share: the SLO a chosen configuration is verified against, and the nearest SLO that
something meets when nothing meets the one asked for."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeAlias

import numpy as np

from planner.serving.evaluate import evaluate
from planner.serving.types import Evaluation, ServingProblem, Slo
from planner.serving.workload import Arrival, Workload

#: a configuration whose objective is within this fraction of the best one counts as tied
TIE_FRACTION = 5e-3
#: how the operating rate of a verified plan backs off when ``evaluate`` finds the SLO just missed
BACKOFF_FACTOR = 0.995
MAX_BACKOFFS = 20
#: a searched capacity is verified this fraction below itself: the searches bracket the SLO boundary to about
#: 1/289 of a curve cell (~0.25 % of the rate), so the full evaluation can land just past it
SEARCH_MARGIN = 3e-3


#: called by a search between its stages with the stage's name; it may raise (the API's raises
#: ``DeadlineExceeded`` past the request's deadline). The core never reads the clock itself.
Checkpoint: TypeAlias = Callable[[str], None]


def tick(checkpoint: Checkpoint | None, stage: str) -> None:
    """Call ``checkpoint`` (when there is one) with the stage a search is about to run."""
    if checkpoint is not None:
        checkpoint(stage)


def open_loop(workload: Workload, rate_per_s: float, arrival_cv: float) -> Workload:
    """The workload at an open-loop rate (Poisson, or gamma with the given coefficient of variation)."""
    arrival = (
        Arrival(kind="poisson", rate_per_s=rate_per_s)
        if abs(arrival_cv - 1.0) < 1e-12
        else Arrival(kind="gamma", rate_per_s=rate_per_s, cv=arrival_cv)
    )
    return dataclasses.replace(workload, arrival=arrival)


def meets_slo(ev: Evaluation, slo: Slo) -> bool:
    """Does an evaluation meet every target of the SLO, at its percentile, in steady state?"""
    if not ev.feasible:
        return False
    frac = ev.slo_attainment_fraction
    if frac is None:
        return True
    need = slo.ttft_percentile / 100.0 if slo.ttft_s is not None else 1.0
    return frac >= need - 1e-9 and frac > 0.0


def verified_evaluation(
    problem: ServingProblem, rate_per_s: float, arrival_cv: float, slo: Slo, backoff: bool
) -> tuple[Evaluation, float, bool]:
    """``evaluate`` the chosen configuration at ``rate_per_s`` (less ``SEARCH_MARGIN`` when ``backoff`` is set:
    a searched capacity); when it still misses the SLO and ``backoff`` is set, lower the rate by 0.5 % steps
    until it meets it.
    Returns (evaluation, rate, meets)."""
    rate = float(rate_per_s) * ((1.0 - SEARCH_MARGIN) if backoff else 1.0)
    for _ in range(MAX_BACKOFFS if backoff else 1):
        ev = evaluate(
            dataclasses.replace(problem, workload=open_loop(problem.workload, rate, arrival_cv), slo=slo)
        )
        if meets_slo(ev, slo):
            return ev, rate, True
        rate *= BACKOFF_FACTOR
    return ev, rate, False


def scaled_slo(slo: Slo, factor: float) -> Slo:
    return dataclasses.replace(
        slo,
        ttft_s=None if slo.ttft_s is None else slo.ttft_s * factor,
        itl_s=None if slo.itl_s is None else slo.itl_s * factor,
    )


def nearest_feasible_slo(slo: Slo, feasible: Callable[[Slo], bool], max_factor: float = 1e3) -> Slo | None:
    """The SLO with every target scaled by the smallest common factor ≥ 1 that some configuration meets
    (bisection on the factor in log space, 9 steps: within 1.4 % of the factor's exact value), or None
    when even ``max_factor`` times the targets is out of reach."""
    if not feasible(scaled_slo(slo, max_factor)):
        return None
    lo, hi = 0.0, float(np.log(max_factor))
    for _ in range(9):
        mid = 0.5 * (lo + hi)
        if feasible(scaled_slo(slo, float(np.exp(mid)))):
            hi = mid
        else:
            lo = mid
    return scaled_slo(slo, float(np.exp(hi)))


def confirmed_nearest_slo(slo: Slo, feasible: Callable[[Slo], bool], confirmed: Callable[[Slo], bool],
                          tries: int = 6) -> Slo | None:
    """:func:`nearest_feasible_slo`, then confirmed by the full search (``confirmed``: the plan with that SLO
    is optimal once evaluated); when it is not, the targets grow by 2 % at a time, ``tries`` times."""
    near = nearest_feasible_slo(slo, feasible)
    if near is None:
        return None
    for k in range(tries):
        candidate = scaled_slo(near, 1.02**k)
        if confirmed(candidate):
            return candidate
    return None

