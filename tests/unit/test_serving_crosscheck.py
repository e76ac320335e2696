"""The closed form against the reference simulation on a subset of the crosscheck grid (issue 3, section 5).

Issue 3 asks that the closed-form mean and p90 of TTFT and ITL stay within 15 % of the simulation of the
same scheduler, the p99 within 25 % (``planner.validation.crosscheck``; the whole grid is
``docs/accuracy_crosscheck.md``). Each statistic of each case below is one test. Where the closed form
misses, the test is a strict xfail carrying the figures measured when it was written and the mechanism
(see the report's *Reading of the misses*): it XPASSes, and fails, once the closed form meets the target,
and must then become a plain assert.

The cases are those of Llama-3.1-8B on one H100 that simulate fast (unchunked and disaggregated runs take
a fraction of a second; the three chunked ones, a few seconds), each with two replications of 4000 requests
(10 % warm-up), enough that the simulation's own spread is a few percent at these loads. Seeds are fixed:
the figures are deterministic.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.costs.types import Parallelism
from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.aggregated import AggregatedModel
from planner.serving.disaggregated import DisaggregatedModel
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, PoolSpec
from planner.serving.workload import Arrival
from planner.validation import crosscheck as X
from planner.validation.simulator import simulate

NUM_REQUESTS = 4000
SEEDS = (0, 1)

#: test id -> (mode, lengths, load point label)
CASES = {
    "disagg-poisson-0.3": ("disaggregated", "lognormal", "ρ=0.30"),
    "disagg-poisson-0.7": ("disaggregated", "lognormal", "ρ=0.70"),
    "disagg-closed-16": ("disaggregated", "lognormal", "N=16"),
    "disagg-closed-64": ("disaggregated", "lognormal", "N=64"),
    "disagg-fixed-closed-16": ("disaggregated", "fixed", "N=16"),
    "disagg-fixed-closed-64": ("disaggregated", "fixed", "N=64"),
    "unchunked-poisson-0.3": ("aggregated_unchunked", "lognormal", "ρ=0.30"),
    "unchunked-poisson-0.5": ("aggregated_unchunked", "lognormal", "ρ=0.50"),
    "unchunked-poisson-0.7": ("aggregated_unchunked", "lognormal", "ρ=0.70"),
    "unchunked-closed-4": ("aggregated_unchunked", "lognormal", "N=4"),
    "unchunked-closed-64": ("aggregated_unchunked", "lognormal", "N=64"),
    "unchunked-fixed-closed-4": ("aggregated_unchunked", "fixed", "N=4"),
    "unchunked-fixed-closed-64": ("aggregated_unchunked", "fixed", "N=64"),
    "chunked-poisson-0.3": ("aggregated_chunked", "lognormal", "ρ=0.30"),
    "chunked-poisson-0.5": ("aggregated_chunked", "lognormal", "ρ=0.50"),
    "chunked-closed-4": ("aggregated_chunked", "lognormal", "N=4"),
    "chunked-closed-16": ("aggregated_chunked", "lognormal", "N=16"),
    "chunked-fixed-closed-4": ("aggregated_chunked", "fixed", "N=4"),
    "chunked-fixed-closed-16": ("aggregated_chunked", "fixed", "N=16"),
    "chunked-fixed-closed-64": ("aggregated_chunked", "fixed", "N=64"),
}

#: pools of several workers (``crosscheck.with_pools``: 2 prefill + 3 decode workers of the first worker),
#: test id -> (lengths, load point label, the simulated decode router)
POOL_CASES = {
    "pools-poisson-0.7": ("lognormal", "ρ=0.70", "least_loaded"),
    "pools-closed-64": ("lognormal", "N=64", "least_loaded"),
    "pools-fixed-closed-64": ("fixed", "N=64", "least_loaded"),
    "pools-round-robin-poisson-0.7": ("lognormal", "ρ=0.70", "round_robin"),
    "pools-round-robin-closed-128": ("lognormal", "N=128", "round_robin"),
}

#: (test id, metric, statistic) -> why the closed form misses, with the figures measured (cf vs sim); none
#: on the grid's cases since the chunked fixed-length closed loops run as a train
#: (``AggregatedModel._chunked_train``). None now: "pools-fixed-closed-64"'s TTFT p90 was one (−16.3 %,
#: 2026-12-05: the closed form has a fixed-length loop on 2 prefill workers space itself out with no wait,
#: which two workers do only in part) until the engines' refit of 2026-12-06 moved the simulated tail
#: (the closed form's 41.9 ms did not move): −14 %, a knife edge
KNOWN_MISSES: dict[tuple[str, str, str], str] = {}


@pytest.fixture(scope="module")
def gpu():
    return load_catalog()["h100-sxm"]


@pytest.fixture(scope="module")
def scenarios():
    workers = X.default_workers(load_model_catalog(), load_catalog())[:1]
    return {(s.mode, s.lengths): s for s in X.default_scenarios(workers, find_engine("vllm"))}


@pytest.fixture(scope="module")
def comparison(scenarios):
    """``comparison(test_id)``: the case's comparison, computed once per module on shared memos."""
    memos = X.StepTimeMemos()
    done: dict[str, X.Comparison] = {}

    def get(test_id: str) -> X.Comparison:
        if test_id not in done:
            if test_id in POOL_CASES:
                lengths, label, routing = POOL_CASES[test_id]
                n_pre, n_dec = X.POOL_SIZES[0]
                scenario = X.with_pools(scenarios[("disaggregated", lengths)], n_pre, n_dec, routing)
                cases = X.scenario_cases(scenario, fractions=X.POOL_LOAD_FRACTIONS,
                                         concurrencies=X.POOL_CONCURRENCIES)
            else:
                mode, lengths, label = CASES[test_id]
                cases = X.scenario_cases(scenarios[(mode, lengths)])
            case = next(c for c in cases if c.point.label == label)
            done[test_id] = X.compare(case, num_requests=NUM_REQUESTS, seeds=SEEDS, memos=memos)
        return done[test_id]

    return get


def _tolerance_params():
    for test_id in [*CASES, *POOL_CASES]:
        for metric in X.METRICS:
            for statistic in X.STATISTICS:
                reason = KNOWN_MISSES.get((test_id, metric, statistic))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                yield pytest.param(test_id, metric, statistic, id=f"{test_id}-{metric}-{statistic}",
                                   marks=marks)


def test_known_misses_name_real_cases():
    assert {k[0] for k in KNOWN_MISSES} <= set(CASES) | set(POOL_CASES)
    assert all(m in X.METRICS and s in X.STATISTICS for _, m, s in KNOWN_MISSES)


@pytest.mark.parametrize(("test_id", "metric", "statistic"), list(_tolerance_params()))
def test_closed_form_within_tolerance_of_simulation(comparison, test_id, metric, statistic):
    c = comparison(test_id)
    cf = getattr(c.closed_form[metric], statistic)
    sim = getattr(c.simulated[metric], statistic)
    error = c.error_fraction(metric, statistic)
    assert abs(error) <= X.TOLERANCE_FRACTION[statistic], (
        f"{c.case.name} {metric} {statistic}: closed form {1e3 * cf:.4g} ms, simulation {1e3 * sim:.4g} ms, "
        f"{100 * error:+.1f} % (tolerance {100 * X.TOLERANCE_FRACTION[statistic]:.0f} %)")


# --------------------------------------------------------------------------------------------------
# the machinery
# --------------------------------------------------------------------------------------------------


def test_pools_are_simulated_with_their_workers_and_router(comparison, scenarios):
    """The pools cases run the pools they name: the closed form's saturation and the simulated traffic of
    2 prefill + 3 decode workers, requests routed as the label says."""
    c = comparison("pools-poisson-0.7")
    dep = c.case.problem.deployment
    assert isinstance(dep, DisaggregatedDeployment)
    assert (dep.prefill.workers, dep.decode.workers) == X.POOL_SIZES[0]
    assert c.case.scenario.decode_routing == "least_loaded" and "2P3D least loaded" in c.case.name
    assert c.simulated_requests_per_s == pytest.approx(c.case.point.arrival.rate_per_s, rel=0.03)
    assert comparison("pools-round-robin-poisson-0.7").case.scenario.decode_routing == "round_robin"
    # the decode pool splits the traffic: each worker's batch is a third of the pool's
    one = comparison("disagg-poisson-0.7")
    assert c.closed_form_decode_batch < one.closed_form_decode_batch
    with pytest.raises(ValueError, match="disaggregated"):
        X.with_pools(scenarios[("aggregated_chunked", "lognormal")], 2, 3)


def test_the_simulation_sees_the_offered_load(comparison):
    """The open-loop points are where they were placed, and both sides carry the same traffic."""
    for test_id in ("disagg-poisson-0.3", "unchunked-poisson-0.3"):
        c = comparison(test_id)
        assert c.simulated_requests_per_s == pytest.approx(c.case.point.arrival.rate_per_s, rel=0.03)
        assert c.closed_form_requests_per_s == pytest.approx(c.case.point.arrival.rate_per_s, rel=1e-9)
        assert c.closed_form_feasible and c.num_preemptions == 0
        assert c.num_measured == len(SEEDS) * (NUM_REQUESTS - NUM_REQUESTS // 10)


def test_replications_are_independent_and_pooled(comparison):
    c = comparison("disagg-poisson-0.7")
    assert len(c.replications) == len(SEEDS)
    means = [r["ttft_s"].mean for r in c.replications]
    assert means[0] != means[1]
    # equally many requests per replication: the pooled mean is the replications' mean
    assert c.simulated["ttft_s"].mean == pytest.approx(np.mean(means), rel=1e-12)
    assert min(means) <= c.simulated["ttft_s"].mean <= max(means)
    assert c.spread_fraction("ttft_s", "mean") == pytest.approx((max(means) - min(means)) / np.mean(means))


def test_poisson_points_are_fractions_of_the_closed_form_saturation(scenarios):
    for mode in X.MODES:
        scenario = scenarios[(mode, "lognormal")]
        problem = scenario.problem(Arrival(kind="poisson", rate_per_s=1.0))
        model = (DisaggregatedModel if mode == "disaggregated" else AggregatedModel)(problem)
        saturation = model.saturation_rate_per_s()
        points = X.poisson_points(scenario)
        rates = [p.arrival.rate_per_s for p in points]
        assert rates == pytest.approx([f * saturation for f in X.POISSON_LOAD_FRACTIONS], rel=1e-12)
        assert [p.load_fraction for p in points] == list(X.POISSON_LOAD_FRACTIONS)
    # fixed lengths are offered closed loops only
    fixed = X.scenario_cases(scenarios[("aggregated_chunked", "fixed")])
    assert {c.point.arrival.kind for c in fixed} == {"closed_loop"}


def test_high_loads_run_four_times_the_replications(scenarios):
    """A p99 at ρ = 0.9 is set by a few congestion episodes per run: those cases pool 4× the replications
    (consecutive seeds from the first); lower loads and closed loops keep the seeds they are given."""
    cases = X.scenario_cases(scenarios[("aggregated_chunked", "lognormal")])
    by_label = {c.point.label: c for c in cases}
    assert X.run_seeds(by_label["ρ=0.90"], (0, 1, 2)) == tuple(range(12))
    assert X.run_seeds(by_label["ρ=0.90"], (5,)) == (5, 6, 7, 8)
    assert X.run_seeds(by_label["ρ=0.70"], (0, 1, 2)) == (0, 1, 2)
    assert X.run_seeds(by_label["N=64"], (0, 1, 2)) == (0, 1, 2)


def test_engine_is_locked_in_step_and_keeps_its_front_end():
    vllm = find_engine("vllm")
    engine = X.crosscheck_engine(vllm)
    assert engine.closed_loop_coherence == 1.0
    assert engine.request_overhead_s == vllm.request_overhead_s
    assert engine.request_overhead_jitter_s == 0.0  # the simulation's front end is a constant
    assert dataclasses.replace(engine, closed_loop_coherence=vllm.closed_loop_coherence,
                               request_overhead_jitter_s=vllm.request_overhead_jitter_s) == vllm
    assert X.crosscheck_engine(vllm, request_overhead_s=0.0).request_overhead_s == 0.0


def test_simulated_kv_transfer_is_the_closed_forms_exposed_time(scenarios):
    scenario = scenarios[("disaggregated", "lognormal")]
    problem = scenario.problem(Arrival(kind="poisson", rate_per_s=1.0))
    model = DisaggregatedModel(problem)
    transfer = X.exposed_kv_transfer(problem)
    assert transfer is not None
    for tokens, seconds in zip(model.in_values, model.transfer_s, strict=True):
        assert transfer(int(tokens)) == pytest.approx(float(seconds), rel=1e-12)
    res = simulate(problem, num_requests=60, warmup_requests=5, kv_transfer_s=transfer)
    expected = dict(zip(model.in_values.astype(int).tolist(), model.transfer_s.tolist(), strict=True))
    np.testing.assert_allclose(res.kv_transfer_s, [expected[int(n)] for n in res.input_tokens], rtol=1e-12)
    assert X.exposed_kv_transfer(scenarios[("aggregated_chunked", "lognormal")].problem(
        Arrival(kind="poisson", rate_per_s=1.0))) is None


def test_step_time_memos_are_shared_per_worker_configuration(scenarios, gpu):
    memos = X.StepTimeMemos()
    arrival = Arrival(kind="closed_loop", concurrency=4)
    lognormal = memos.for_problem(scenarios[("aggregated_chunked", "lognormal")].problem(arrival))
    fixed = memos.for_problem(scenarios[("aggregated_chunked", "fixed")].problem(arrival))
    no_front_end = X.crosscheck_engine(find_engine("vllm"), request_overhead_s=0.0)
    other_engine = dataclasses.replace(scenarios[("aggregated_chunked", "fixed")], engine=no_front_end)
    assert lognormal is fixed is memos.for_problem(other_engine.problem(arrival))
    unchunked = memos.for_problem(scenarios[("aggregated_unchunked", "lognormal")].problem(arrival))
    assert unchunked is not lognormal and unchunked.token_budget == X.UNCHUNKED_TOKEN_BUDGET
    assert len(memos) == 2
    # pools of different workers cannot share one step-time function
    scenario = scenarios[("disaggregated", "lognormal")]
    mixed = DisaggregatedDeployment(prefill=PoolSpec(gpu=gpu, parallelism=Parallelism(tp=2)),
                                    decode=PoolSpec(gpu=gpu))
    assert memos.for_problem(dataclasses.replace(scenario, deployment=mixed).problem(arrival)) is None
    assert isinstance(scenarios[("aggregated_unchunked", "fixed")].deployment, AggregatedDeployment)


def test_group_summaries_count_the_cases_within_tolerance(comparison):
    members = [comparison(t) for t in ("unchunked-poisson-0.3", "unchunked-poisson-0.5", "disagg-closed-16")]
    summaries = X.summarize_groups(members)
    groups = {(s.mode, s.arrival) for s in summaries}
    assert groups == {("aggregated_unchunked", "poisson"), ("disaggregated", "closed loop · lognormal")}
    assert len(summaries) == len(groups) * len(X.METRICS) * len(X.STATISTICS)
    for s in summaries:
        group = [c for c in members if (c.case.scenario.mode, X.arrival_group(c.case)) == (s.mode, s.arrival)]
        errors = [abs(c.error_fraction(s.metric, s.statistic)) for c in group]
        assert s.num_cases == len(group)
        assert s.worst_fraction == pytest.approx(max(errors))
        assert s.median_fraction == pytest.approx(np.median(errors))
        assert s.num_within == sum(c.within_tolerance(s.metric, s.statistic) for c in group)
        assert (s.verdict == "PASS") == (s.num_within == s.num_cases)
        worst = max(group, key=lambda c: abs(c.error_fraction(s.metric, s.statistic)))
        assert s.worst_case == worst.case.name
        assert s.worst_signed_fraction == pytest.approx(worst.error_fraction(s.metric, s.statistic))


@pytest.mark.parametrize("test_id", ["chunked-poisson-0.5", "unchunked-poisson-0.5", "unchunked-poisson-0.7",
                                     "disagg-poisson-0.7"])
def test_decode_batch_spread_follows_the_simulation(comparison, test_id):
    """The decode batch's variance over its mean (the ITL law's batch fluctuation) against the simulation's
    time-weighted one. Measured when written: the law is 6–14 % under the simulation in each of these, where
    the M/G/∞ occupancy (Poisson, variance = mean) is 43–74 % under it."""
    c = comparison(test_id)
    sim = c.simulated_batch_dispersion
    assert sim > 1.5, f"the simulated batch is nearly Poisson here ({sim:.3g}): the case tests nothing"
    assert c.closed_form_batch_dispersion == pytest.approx(sim, rel=0.2), (
        f"{c.case.name}: batch variance/mean, closed form {c.closed_form_batch_dispersion:.3g}, simulation "
        f"{sim:.3g}")
