"""The unchunked lane's shared prefill passes (``aggregated._shared_lane``, 2026-12-07): the scheduler
prefills every waiting prompt in one pass. Checked here: the pieces solve their own equations, the lane
reduces to one pass per prompt when a pass shares nothing, the pass table is the cost model's, and a pass
never costs less than nothing (a fuzzed MoE whose prompts' passes are concave in their length had
first passes of −1e289 s on 2026-12-07, when the table held seconds saved at the mean prompt). Against
the reference simulation: ``test_saturation_against_simulation.py`` and the crosscheck grid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.costs.passes import mixed_step_latency_s
from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving import aggregated as A
from planner.serving.types import ServingProblem
from planner.serving.workload import fixed_length, lognormal_lengths
from planner.validation import crosscheck as X

RNG = np.random.default_rng(7)


def _problem(median: int) -> ServingProblem:
    workers = X.default_workers(load_model_catalog(), load_catalog())
    scenario = next(s for s in X.default_scenarios(workers[:1], find_engine("vllm"))
                    if s.mode == "aggregated_unchunked" and s.lengths == "lognormal")
    base = X.scenario_cases(scenario)[0].problem
    work = dataclasses.replace(base.workload, input_tokens=lognormal_lengths(median=median, p90=2 * median),
                               output_tokens=fixed_length(64))
    return dataclasses.replace(base, workload=work)


@pytest.mark.parametrize("median", [32, 1000])
def test_the_pass_table_is_the_cost_models_pass_of_n_prompts(median: int) -> None:
    model = A.AggregatedModel(_problem(median))
    n = A.SHARED_PASS_GRID
    lp = model.mean_prompt_compute
    t = mixed_step_latency_s(model.ctx, decode_batch=0.0, decode_context_tokens=0.0, prefill_tokens=n * lp,
                             prefill_sequences=n)
    # relative: n − T(n) / T(1), passes of one saved
    np.testing.assert_allclose(model.tables.pass_saving_s[0], np.clip(n - t / t[0], 0.0, n - 1.0), rtol=1e-12)
    # interpolated between the points, s(1) = 0, the last point's saving beyond them
    s, slope = A._pass_saving(np.array([1.0, 2.5, 1e9]), model.tables.pass_saving_s[0])
    assert s[0] == 0.0 and s[2] == pytest.approx(model.tables.pass_saving_s[0][-1])
    assert s[1] == pytest.approx(0.5 * (model.tables.pass_saving_s[0][1] + model.tables.pass_saving_s[0][2]))
    # rows given one by one (a stack) read the same
    rows = np.broadcast_to(model.tables.pass_saving_s[0], (3, n.size)).copy()
    np.testing.assert_allclose(A._pass_saving(np.array([1.0, 2.5, 1e9]), rows)[0], s, rtol=1e-12)


def test_without_a_saving_the_lane_is_one_pass_per_prompt() -> None:
    """s = 0: the stall is a busy period of one-prompt passes, λτ_d·E[t] / (1 − λE[t]), and the rate at a
    batch is the old balance's, B / (D·τ_d + B·E[t])."""
    lam = RNG.uniform(0.1, 30.0, 200)
    tau_d = RNG.uniform(0.005, 0.05, 200)
    mean_pre = RNG.uniform(0.001, 0.03, 200)
    keep = lam * mean_pre < 0.95
    lam, tau_d, mean_pre = lam[keep], tau_d[keep], mean_pre[keep]
    none = np.zeros(A.SHARED_PASS_GRID.size)
    cap = np.full(lam.size, 1e9)
    stall, u_ext, _ = A._shared_lane(lam, tau_d, mean_pre, none, cap)
    np.testing.assert_allclose(u_ext, lam * mean_pre, rtol=1e-9)
    np.testing.assert_allclose(stall, lam * tau_d * mean_pre / (1.0 - lam * mean_pre), rtol=1e-9)
    b = RNG.uniform(1.0, 200.0, lam.size)
    got = A._shared_lane_rate(b, 63.0, tau_d, mean_pre, none, cap)
    np.testing.assert_allclose(got, b / (63.0 * tau_d + b * mean_pre), rtol=1e-9)


@pytest.mark.parametrize("median", [4, 128, 2048])
def test_the_extension_pass_and_the_rate_solve_their_equations(median: int) -> None:
    model = A.AggregatedModel(_problem(median))
    mean_pre = float(np.dot(model.in_weights, model.tables.prompt_prefill_s[0]))
    saving = model.tables.pass_saving_s[0] * mean_pre
    sat = model.saturation_rate_per_s()
    lam = np.linspace(0.02, 0.98, 25) * sat
    cap = np.full(lam.size, model.budgets[0] / model.mean_prompt_compute)
    k = A._extension_pass_size(lam, np.full(lam.size, mean_pre), saving, cap, rounds=40)
    x = lam * A._pass_time(k, mean_pre, saving)
    np.testing.assert_allclose(k, x / -np.expm1(-x), rtol=1e-9)  # k = g(λ·T(k))
    assert np.all(np.diff(k) > 0) and k[0] == pytest.approx(1.0, abs=0.05)
    # the rate at a batch closes the balance λ·D·(τ_d + E[S]) = B
    b = np.geomspace(0.5, 0.95 * model.batch_cap, 30)
    tau_d = model.tables.decode(b + 1.0, np.zeros(b.size, dtype=np.intp))
    pre = np.full(b.size, mean_pre)
    bcap = np.full(b.size, cap[0])
    lam_b = A._shared_lane_rate(b, model.mean_decode_steps, tau_d, pre, saving, bcap)
    stall, _, _ = A._shared_lane(lam_b, tau_d, pre, saving, bcap, rounds=40)
    np.testing.assert_allclose(lam_b * model.mean_decode_steps * (tau_d + stall), b, rtol=1e-5)
    # sharing only helps: at least the rate of one pass per prompt
    assert np.all(lam_b >= b / (model.mean_decode_steps * tau_d + b * pre) * (1.0 - 1e-12))


def test_a_closed_loop_keeps_one_pass_per_prompt() -> None:
    """Its balance is λ·E[t_pre] (its stall law counts the returns per decode end); no pass table."""
    problem = _problem(32)
    arrival = dataclasses.replace(problem.workload.arrival, kind="closed_loop", rate_per_s=None, concurrency=64)
    closed = dataclasses.replace(problem, workload=dataclasses.replace(problem.workload, arrival=arrival))
    model = A.AggregatedModel(closed)
    assert np.all(model.tables.pass_saving_s == 0.0)
    st = model.states_at_batch(np.array([10.0, 40.0]))
    mean_pre = float(np.dot(model.in_weights, model.tables.prompt_prefill_s[0]))
    np.testing.assert_allclose(st.prefill_utilization, st.rate_per_s * mean_pre, rtol=1e-12)


def test_a_pass_of_a_concave_law_costs_more_than_nothing() -> None:
    """Qwen3-30B-A3B (MoE) in fp8 on A100s, prompts of 1 to 34 tokens (the fuzzer's body, seed 21): E[t_pre]
    is below the mean prompt's pass (more experts for 11 tokens than for one), which saved more than
    n·E[t_pre] at n = 10 … 12 in seconds; relative, every pass of the stall law is positive and so is every
    ITL (the mean was 1.7e192 s)."""
    from planner.api.catalogs import Catalogs
    from planner.api.routers.evaluate import build_problem
    from planner.api.serving_schemas import EvaluateRequest
    from planner.serving.evaluate import evaluate

    body = {"model": "Qwen/Qwen3-30B-A3B", "weight_dtype": "fp8", "kv_dtype": "fp8",
            "deployment": {"mode": "aggregated", "gpu": "a100-80gb-sxm", "parallelism": {"tp": 1, "pp": 2},
                           "chunked_prefill": False},
            "workload": {"input_tokens": {"samples": [1, 1, 13, 8, 34]}, "output_tokens": 5,
                         "arrival": {"kind": "poisson", "rate_per_s": 1e-6}}}
    problem = build_problem(EvaluateRequest.model_validate(body), Catalogs(None))[0]
    model = A.AggregatedModel(problem)
    st = model.steady_state(np.array([1e-6]), 1.0)
    assert np.all(st.mixed_kind_s > 0) and np.all(st.mixed_kind_weight >= 0)
    ev = evaluate(problem)
    assert 0 < ev.itl_s.mean < 1.0 and np.isfinite(ev.itl_s.p99)


def test_co_arrivals_of_regular_arrivals() -> None:
    """λ·W for Poisson (and bursty) arrivals; the renewal function of regular ones, continuous at c² = 1,
    below λ·W for c² < 1 and ~0 for nearly deterministic arrivals in a short window."""
    lam, win = np.array([8.0, 8.0, 50.0]), np.array([0.025, 0.2, 0.05])
    np.testing.assert_allclose(A._co_arrivals(lam, win, 1.0), lam * win)
    np.testing.assert_allclose(A._co_arrivals(lam, win, 4.0), lam * win)
    np.testing.assert_allclose(A._co_arrivals(lam, win, 0.999), lam * win, rtol=2e-3)
    smooth = A._co_arrivals(lam, win, 0.25)
    assert np.all(smooth < lam * win) and smooth[0] < 0.01 * lam[0] * win[0]


def test_regular_arrivals_wait_as_the_simulation_says() -> None:
    """Llama-3.1-8B unchunked, the grid's lognormal lengths, gamma arrivals of CV 0.5 at 0.8 of saturation:
    with λ·W co-arrivals the TTFT mean was +15 % and its p90 +27 % against the simulation (2026-12-07)."""
    from planner.serving.evaluate import evaluate
    from planner.serving.workload import Arrival
    from planner.validation.simulator import simulate

    workers = X.default_workers(load_model_catalog(), load_catalog())
    scenario = next(s for s in X.default_scenarios(workers[:1], find_engine("vllm"))
                    if s.mode == "aggregated_unchunked" and s.lengths == "lognormal")
    base = X.scenario_cases(scenario)[0].problem
    rate = 0.8 * X.saturation_rate_per_s(base)
    p = dataclasses.replace(base, workload=dataclasses.replace(
        base.workload, arrival=Arrival(kind="gamma", rate_per_s=rate, cv=0.5)))
    ev = evaluate(p)
    sim = simulate(p, num_requests=8000, warmup_requests=1000, seed=0,
                   step_time=X.StepTimeMemos().for_problem(p), kv_watermark=X.KV_WATERMARK)
    assert ev.ttft_s.mean == pytest.approx(float(np.mean(sim.ttft_s)), rel=0.08)
    assert ev.ttft_s.p90 == pytest.approx(float(np.quantile(sim.ttft_s, 0.9)), rel=0.10)
