"""Answer-preserving fast paths (2026-12-06): ``queueing.ggc_wait_array`` of a single queue takes the scalar
formulas, and an open loop's λ(B) curve keeps brief states (``AggregatedModel._at_batch(brief=True)``). Both
must give what the general paths give. An open loop's curve on a long empirical law is computed on grouped
prompt points (2026-12-07), which must keep the answers to a fraction of a percent."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving import aggregated as A
from planner.serving import queueing as Q
from planner.serving.evaluate import evaluate
from planner.serving.types import ServingProblem
from planner.serving.workload import sampled_lengths
from planner.validation import crosscheck as X

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("servers", [1, 2, 7, 256])
def test_a_single_queue_waits_as_the_array_path_says(servers: int) -> None:
    """One rate at a time against the same rates in one array (the array path: more than one element)."""
    s = 0.05
    top = servers / s
    lam = np.concatenate([[0.0, 1e-9], RNG.uniform(0.0, 1.2 * top, 200), [top, 2 * top]])
    wq, p = Q.ggc_wait_array(arrival_rate_per_s=lam, servers=servers, service_mean_s=s, service_scv=0.7,
                             arrival_scv=1.3)
    for i in range(lam.size):
        w1, p1 = Q.ggc_wait_array(arrival_rate_per_s=lam[i:i + 1], servers=servers, service_mean_s=s,
                                  service_scv=0.7, arrival_scv=1.3)
        assert w1.shape == p1.shape == (1,)
        assert p1[0] == pytest.approx(p[i], rel=1e-12, abs=1e-300)
        if np.isinf(wq[i]):
            assert np.isinf(w1[0])
        else:
            assert w1[0] == pytest.approx(wq[i], rel=1e-12, abs=1e-300)
    # a queue that does no work, and a 0-d rate
    w0, p0 = Q.ggc_wait_array(arrival_rate_per_s=5.0, servers=2, service_mean_s=0.0, service_scv=1.0)
    assert (w0.tolist(), p0.tolist()) == ([0.0], [0.0])
    over, _ = Q.ggc_wait_array(arrival_rate_per_s=50.0, servers=2, service_mean_s=0.05, service_scv=1.0)
    assert np.isinf(over[0])


def _case(kind: str) -> ServingProblem:
    workers = X.default_workers(load_model_catalog(), load_catalog())
    scenario = next(s for s in X.default_scenarios(workers[:1], find_engine("vllm"))
                    if s.mode == "aggregated_chunked" and s.lengths == "lognormal")
    label = "ρ=0.70" if kind == "poisson" else "N=64"
    return next(c for c in X.scenario_cases(scenario) if c.point.label == label).problem


def test_an_open_loops_brief_curve_has_the_full_curves_rates_and_stability() -> None:
    problem = _case("poisson")
    brief = A.AggregatedModel(problem)
    b, lam, ok = brief._curve(1.0)
    st = brief.__dict__["_curve_cache"][1.0][3]
    assert st.own_prefill_s.shape == (b.size, 0) and np.all(np.isnan(st.queue_wait_s))
    full = brief._at_batch(b, 1.0, 1.0)  # the same batches, every field
    np.testing.assert_array_equal(full.rate_per_s, lam)
    np.testing.assert_array_equal(full.stable, st.stable)
    np.testing.assert_array_equal(full.prefill_utilization, st.prefill_utilization)
    np.testing.assert_array_equal(full.mean_iteration_s, st.mean_iteration_s)
    # the states read off a brief curve are full, and the same as from a curve kept whole
    whole = A.AggregatedModel(problem)
    monkey = whole._at_batch

    def never_brief(*args, brief=False, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        return monkey(*args, **kw)

    whole._at_batch = never_brief  # type: ignore[method-assign]
    for m in (brief, whole):
        m._curve_state(1.0)  # a closed loop's reading: the whole states
    a, c = brief._curve_state(1.0), whole._curve_state(1.0)
    for k, v in a.__dict__.items():
        np.testing.assert_array_equal(v, c.__dict__[k], err_msg=k)
    assert a.own_prefill_s.shape[1] == problem.workload.input_tokens.values.size


def test_a_closed_loop_keeps_whole_curve_states() -> None:
    problem = _case("closed")
    model = A.AggregatedModel(problem)
    ev = evaluate(problem)
    scale = (64 - 1) / 64
    model.closed_loop_state(64.0, 1.0 - 1.0 / 64)
    entry = model.__dict__["_curve_cache"][scale]
    assert entry[4] is False and entry[3].own_prefill_s.shape[1] > 0
    assert ev.requests_per_s > 0


def _trace_problem(budget: int) -> ServingProblem:
    """Llama-3.1-8B on an H100, Poisson arrivals, a trace of 2000 lognormal prompt and output samples."""
    base = _case("poisson")
    rng = np.random.default_rng(3)
    prompts = sampled_lengths(np.clip(rng.lognormal(7.0, 1.1, 2000), 4, 20000).astype(int).tolist())
    outputs = sampled_lengths(np.clip(rng.lognormal(5.0, 0.8, 2000), 2, 3000).astype(int).tolist())
    dep = dataclasses.replace(base.deployment, token_budget=budget)
    wl = dataclasses.replace(base.workload, input_tokens=prompts, output_tokens=outputs)
    return dataclasses.replace(base, deployment=dep, workload=wl)


@pytest.mark.parametrize("budget", [2048, 8192])
def test_an_open_loops_curve_on_a_grouped_trace_keeps_its_answers(budget: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The brief curve of a long empirical law is computed on ``CURVE_PROMPT_POINTS`` grouped points: the
    saturation rate and the answers at rates up to 0.95 of it stay those of the curve on every point."""
    problem = _trace_problem(budget)
    assert problem.workload.input_tokens.values.size > A.CURVE_PROMPT_POINTS
    coarse = A.AggregatedModel(problem)._curve_model()
    assert coarse.prompt_compute.size <= A.CURVE_PROMPT_POINTS
    assert coarse.mean_prompt_compute == pytest.approx(float(coarse.prompt_compute @ coarse.in_weights),
                                                       rel=1e-12)
    sat = A.AggregatedModel(problem).saturation_rate_per_s()
    answers = [evaluate(_at_rate(problem, f * sat)) for f in (0.3, 0.7, 0.95)]
    monkeypatch.setattr(A, "CURVE_PROMPT_POINTS", 10**9)
    assert A.AggregatedModel(problem)._curve_model().prompt_compute.size == coarse.in_values.size
    assert sat == pytest.approx(A.AggregatedModel(problem).saturation_rate_per_s(), rel=5e-4)
    for f, got in zip((0.3, 0.7, 0.95), answers, strict=True):
        ref = evaluate(_at_rate(problem, f * sat))
        assert got.feasible and ref.feasible
        for name in ("ttft_s", "itl_s", "e2e_latency_s"):
            a, r = getattr(got, name), getattr(ref, name)
            for q in ("mean", "p90", "p99"):
                assert getattr(a, q) == pytest.approx(getattr(r, q), rel=5e-3), (f, name, q)
        assert got.mean_decode_batch == pytest.approx(ref.mean_decode_batch, rel=5e-3)


def _at_rate(problem: ServingProblem, rate: float) -> ServingProblem:
    arrival = dataclasses.replace(problem.workload.arrival, rate_per_s=rate)
    return dataclasses.replace(problem, workload=dataclasses.replace(problem.workload, arrival=arrival))
