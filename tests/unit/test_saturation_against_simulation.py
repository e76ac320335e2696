"""The closed form's saturation rate against what the reference simulation serves when offered more.

The crosscheck grid places its Poisson loads at fractions of the closed form's own saturation rate, so it
never asks whether that rate is right: a closed form that saturated early would still pass at ρ = 0.9.
Here the simulation is offered twice the closed form's saturation rate, and what it serves (its queue
growing) is its capacity. Measured when written (2026-12-06; 8000 requests, 2000 of warm-up, seed 0): the
grid's lognormal scenarios, closed-form saturation and simulated capacity in requests/s,

- Llama-3.1-8B (H100 tp1): chunked 16.35 / 16.49, unchunked 14.93 / 15.65, disaggregated 29.00 / 29.40;
- Qwen3-32B (H100 tp2): chunked 8.82 / 8.92, unchunked 7.84 / 8.45, disaggregated 12.56 / 12.98.

Unchunked, the simulated scheduler prefills the prompts that wait together in one pass, which costs less
than one pass each (weights are read once); the closed form costs each prompt's own pass. With prompts of
~1000 tokens that costs 4-8 % of capacity; with short prompts it is most of it (the strict xfail below)."""

from __future__ import annotations

import dataclasses

import pytest

from planner.api.catalogs import Catalogs
from planner.api.routers.evaluate import build_problem
from planner.api.serving_schemas import EvaluateRequest
from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.evaluate import Evaluation, evaluate
from planner.serving.types import ServingProblem
from planner.serving.workload import fixed_length, lognormal_lengths
from planner.validation import crosscheck as X
from planner.validation.simulator import simulate

CATALOGS = Catalogs(None)


def _scenario(mode: str) -> X.Scenario:
    workers = X.default_workers(load_model_catalog(), load_catalog())
    return next(s for s in X.default_scenarios(workers[:1], find_engine("vllm"))
                if s.mode == mode and s.lengths == "lognormal")


def _capacity(problem: ServingProblem, offered: float, requests: int = 8000) -> float:
    """What the simulation serves offered ``offered`` requests/s (Poisson)."""
    arrival = dataclasses.replace(problem.workload.arrival, rate_per_s=offered)
    q = dataclasses.replace(problem, workload=dataclasses.replace(problem.workload, arrival=arrival))
    return simulate(q, num_requests=requests, warmup_requests=requests // 4, seed=0,
                    step_time=X.StepTimeMemos().for_problem(q), kv_watermark=X.KV_WATERMARK).requests_per_s


@pytest.mark.parametrize(("mode", "tolerance"), [("aggregated_chunked", 0.03), ("aggregated_unchunked", 0.10),
                                                 ("disaggregated", 0.05)])
def test_the_saturation_rate_is_what_the_simulation_serves_overloaded(mode: str, tolerance: float) -> None:
    """Llama-3.1-8B on one H100 per role, the grid's lognormal lengths (the closed form at most 5 % under)."""
    problem = X.scenario_cases(_scenario(mode))[0].problem
    sat = X.saturation_rate_per_s(problem)
    served = _capacity(problem, 2.0 * sat)
    assert sat == pytest.approx(served, rel=tolerance)
    assert sat <= served * 1.01  # the closed form does not promise more than is served


@pytest.mark.xfail(strict=True, reason=(
    "unchunked, the closed form costs each waiting prompt its own prefill pass; the scheduler prefills them "
    "together, and with 32-token prompts a pass of two costs 0.51 of two passes (the weights are read once): "
    "saturation 74.0 requests/s against 143 simulated (2026-12-06; docs/accuracy_notes.md)"))
def test_short_unchunked_prompts_saturate_where_the_simulation_does() -> None:
    """Lognormal prompts of median 32 tokens (p90 64), 64-token outputs: measured when written, the closed
    form saturates at 74.0 requests/s, the simulation serves 143 offered three times that; at 0.9 of the
    closed form's saturation both agree (TTFT mean 40 against 37 ms)."""
    base = X.scenario_cases(_scenario("aggregated_unchunked"))[0].problem
    work = dataclasses.replace(base.workload, input_tokens=lognormal_lengths(median=32, p90=64),
                               output_tokens=fixed_length(64))
    problem = dataclasses.replace(base, workload=work)
    sat = X.saturation_rate_per_s(problem)
    assert sat == pytest.approx(_capacity(problem, 3.0 * sat, requests=6000), rel=0.15)


def _evaluate(prompt: int, arrival: dict, chunked: bool = False) -> Evaluation:
    body = {"model": "meta-llama/Llama-3.1-8B",
            "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1},
                           "chunked_prefill": chunked, "token_budget": 8192},
            "workload": {"input_tokens": prompt, "output_tokens": 64, "arrival": arrival}}
    return evaluate(build_problem(EvaluateRequest.model_validate(body), CATALOGS)[0])


def _warned(ev: Evaluation) -> bool:
    head = "without chunked prefill the engine prefills the prompts that wait"
    return any(w.startswith(head) for w in ev.warnings)


@pytest.mark.parametrize("arrival", [{"kind": "poisson", "rate_per_s": 600.0},
                                     {"kind": "closed_loop", "concurrency": 200}], ids=["open", "closed"])
def test_a_busy_unchunked_lane_of_short_prompts_says_its_throughput_is_understated(arrival: dict) -> None:
    ev = _evaluate(32, arrival)
    assert ev.utilization["prefill_lane"] >= 0.5 or not ev.feasible
    assert _warned(ev)
    assert not _warned(_evaluate(32, arrival, chunked=True))  # chunked: the lane takes every waiting prompt


def test_no_shared_pass_warning_for_an_idle_lane_or_long_prompts() -> None:
    assert not _warned(_evaluate(32, {"kind": "poisson", "rate_per_s": 10.0}))  # lane 8 % busy
    long = _evaluate(2000, {"kind": "poisson", "rate_per_s": 14.0})  # lane 58 % busy; two passes cost 0.98
    assert long.utilization["prefill_lane"] >= 0.5 and not _warned(long)


def test_a_rate_below_the_saturation_rate_is_feasible_where_every_iteration_mixes() -> None:
    """1-token prompts, 2-token outputs, Llama-3.1-70B tp4 on A100s: the lane is busy in every iteration
    (u = 1 ± 1e-8 along the curve) and the state at a rate, at a batch interpolated between two curve
    points, had u = 1.011 at 0.9 of the saturation rate and came out infeasible (2026-12-06)."""
    body = {"model": "meta-llama/Llama-3.1-70B", "engine": "vllm",
            "deployment": {"mode": "aggregated", "gpu": "a100-80gb-sxm", "parallelism": {"tp": 4},
                           "token_budget": 8192},
            "workload": {"input_tokens": 1, "output_tokens": 2,
                         "arrival": {"kind": "poisson", "rate_per_s": 1.0}}}
    sat = X.saturation_rate_per_s(build_problem(EvaluateRequest.model_validate(body), CATALOGS)[0])
    ttft = []
    for fraction in (0.6, 0.8, 0.9, 0.95, 0.99):
        body["workload"]["arrival"]["rate_per_s"] = fraction * sat
        ev = evaluate(build_problem(EvaluateRequest.model_validate(body), CATALOGS)[0])
        assert ev.feasible, fraction
        ttft.append(ev.ttft_s.mean)
    assert all(b >= a * (1 - 1e-3) for a, b in zip(ttft, ttft[1:], strict=False))
    body["workload"]["arrival"]["rate_per_s"] = 1.05 * sat
    assert not evaluate(build_problem(EvaluateRequest.model_validate(body), CATALOGS)[0]).feasible
