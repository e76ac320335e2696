"""The orbit of a chunked fixed-length closed loop (``planner.serving.train``): by hand on a loop small enough
to follow, and against the reference simulation of the scheduler it steps."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.aggregated import AggregatedModel
from planner.serving.train import chunked_orbit
from planner.validation import crosscheck as X
from planner.validation.simulator import simulate


def test_two_clients_returning_to_an_idle_engine_split_into_two_iterations() -> None:
    """Two clients of 100-token prompts and 2-token outputs, a 1 s front end, iterations of 50 ms with a
    prompt and 10 ms without. The burst is one iteration (t = 1.00 → 1.05), one decode step (→ 1.06), and
    both requests return together at 2.06 to an idle engine: the first is prefilled alone (→ 2.11, TTFT
    1.05 s), the second, which waited for it, beside the first one's decode (→ 2.16, TTFT 2.16 − 1.06), and
    decodes alone (→ 2.17). From then on the first client returns at 3.16, the second at 3.17, one cycle
    1.10 s: TTFTs 1.05 and 1.09 s, gaps of 50 ms (the first stream, beside the second's prefill) and 10 ms."""
    orbit = chunked_orbit(2, 100, 2, 1000, 8, 1.0, lambda b: 0.01, lambda b, n: 0.05)
    np.testing.assert_allclose(np.sort(np.unique(np.round(orbit.ttft_s, 9))), [1.05, 1.09], rtol=1e-9)
    assert orbit.ttft_s.size % 2 == 0 and np.mean(orbit.ttft_s) == pytest.approx(1.07)
    order = np.argsort(orbit.gap_s)
    np.testing.assert_allclose(orbit.gap_s[order], [0.01, 0.05])
    np.testing.assert_allclose(orbit.gap_weight[order], [0.5, 0.5])
    assert orbit.requests_per_s == pytest.approx(2 / 1.10)


def test_the_budget_and_the_batch_cap_shape_the_orbit() -> None:
    """One iteration holds at most the budget beside the decodes, and at most ``max_batch`` sequences: with
    a cap of one, requests are served one after the other, each a prefill and its decode steps."""
    serial = chunked_orbit(3, 100, 3, 1000, 1, 0.0, lambda b: 0.01, lambda b, n: 0.05)
    # each request: its prefill (50 ms) and two decode steps (10 ms); the third waits for the two before
    assert serial.requests_per_s == pytest.approx(1 / 0.07)
    np.testing.assert_allclose(np.unique(np.round(serial.ttft_s, 9)), [0.05 + 2 * 0.07], rtol=1e-9)
    # a 150-token budget splits every 100-token prompt that does not start an iteration
    tokens: list[int] = []
    chunked_orbit(2, 100, 2, 150, 8, 0.0, lambda b: 0.01, lambda b, n: tokens.append(n) or 0.05)
    assert max(tokens) <= 150 and 50 in tokens


@pytest.mark.parametrize("bad", [dict(clients=0), dict(prompt_tokens=0), dict(front_end_s=-1.0),
                                 dict(front_end_s=float("nan")), dict(max_batch=0)])
def test_invalid_loops_are_refused(bad: dict) -> None:
    args = dict(clients=2, prompt_tokens=10, output_tokens=2, token_budget=100, max_batch=4, front_end_s=0.0,
                decode_s=lambda b: 0.01, mixed_s=lambda b, n: 0.05)
    args.update(bad)
    with pytest.raises(ValueError):
        chunked_orbit(**args)


def test_the_orbit_is_the_simulated_one() -> None:
    """Qwen3-32B on two H100s, 16 clients of 512/256 tokens, the crosscheck's engine (locked, no front-end
    spread): the closed form packed each train into budget-full iterations and its ITL p99 was a
    decode-only gap (19.1 against the simulated 38.2 ms); the orbit has the simulated groups' TTFTs and
    the mixed iteration at the p99."""
    workers = X.default_workers(load_model_catalog(), load_catalog())
    qwen = next(w for w in workers if "Qwen3-32B" in w.label)
    scenario = next(s for s in X.default_scenarios([qwen], find_engine("vllm"))
                    if s.mode == "aggregated_chunked" and s.lengths == "fixed")
    case = next(c for c in X.scenario_cases(scenario) if c.point.label == "N=16")
    problem = case.problem
    orbit = AggregatedModel(problem)._chunked_train(16.0)
    sim = simulate(problem, num_requests=1600, warmup_requests=320, seed=0,
                   step_time=X.StepTimeMemos().for_problem(problem), kv_watermark=X.KV_WATERMARK)
    for q in (0.1, 0.3, 0.5, 0.7, 0.9):
        assert np.quantile(orbit.ttft_s, q) == pytest.approx(np.quantile(sim.ttft_s, q), rel=0.03)
    # (the simulation's window rate counts a burst more or less at its ends: its Little's-law rate instead)
    assert orbit.requests_per_s == pytest.approx(16.0 / float(np.mean(sim.e2e_s)), rel=0.01)
    cdf = np.cumsum(orbit.gap_weight[np.argsort(orbit.gap_s)])
    p99 = np.sort(orbit.gap_s)[np.searchsorted(cdf, 0.99)]
    assert p99 == pytest.approx(np.quantile(sim.itl_s, 0.99), rel=0.1)


def test_a_loop_that_does_not_settle_is_left_to_the_cohort_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """107 clients of 24/1 tokens behind a 268 ms front end drift from cycle to cycle (its windows still
    disagree after 500 cycles): no orbit, and the planner keeps the cohort law for such a loop."""
    a, b, c = 0.01, 1e-5, 2e-5
    orbit = chunked_orbit(107, 24, 1, 1507, 184, 0.268, lambda n: a + b * n, lambda n, t: a + b * n + c * t)
    assert orbit is None
    # the settled loops of this file are orbits; a loop without one keeps the cohort's TTFT
    import planner.serving.aggregated as agg
    from tests.unit.test_serving_properties import _chunked_fixed_loop

    model = AggregatedModel(_chunked_fixed_loop(16))
    assert model._train_at(np.array([16.0]), 16.0)[0]
    monkeypatch.setattr(agg, "chunked_orbit", lambda *args: None)
    model = AggregatedModel(_chunked_fixed_loop(16))
    assert not model._train_at(np.array([16.0]), 16.0)[0]
    iterations, t_iter = model._chunked_cohort(np.array([16.0]), 16.0)
    phi, mean = model.lockstep(np.array([16.0]), 16.0)
    cohort = model.problem.engine.request_overhead_s + t_iter[0] * (iterations[0] + 1) / 2
    assert mean[0] == pytest.approx(cohort)
    assert model.lockstep_itl(16.0, 16.0) is None
