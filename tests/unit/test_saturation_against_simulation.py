"""The closed form's saturation rate against what the reference simulation serves when offered more.

The crosscheck grid places its Poisson loads at fractions of the closed form's own saturation rate, so it
never asks whether that rate is right: a closed form that saturated early would still pass at ρ = 0.9.
Here the simulation is offered twice the closed form's saturation rate, and what it serves (its queue
growing) is its capacity. Measured when written (2026-12-06; 8000 requests, 2000 of warm-up, seed 0): the
grid's lognormal scenarios, closed-form saturation and simulated capacity in requests/s,

- Llama-3.1-8B (H100 tp1): chunked 16.35 / 16.49, unchunked 14.93 / 15.65, disaggregated 29.00 / 29.40;
- Qwen3-32B (H100 tp2): chunked 8.82 / 8.92, unchunked 7.84 / 8.45, disaggregated 12.56 / 12.98.

Unchunked, the simulated scheduler prefills the prompts that wait together in one pass, which costs less
than one pass each (weights are read once); the closed form costed each prompt its own pass, 4-8 % of
capacity with prompts of ~1000 tokens and most of it with short ones. Since 2026-12-07 an open loop's lane
shares its passes (``aggregated._shared_lane``): unchunked 15.13 / 15.57 and 8.07 / 8.42, and the short
prompts' test below."""

from __future__ import annotations

import dataclasses

import numpy as np
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


def test_short_unchunked_prompts_share_their_passes_as_the_simulation_does() -> None:
    """Lognormal prompts of median 32 tokens (p90 64), 64-token outputs. The scheduler prefills the prompts
    that wait in one pass, at 0.51 of two passes for two of them; until 2026-12-07 the closed form costs each
    its own and saturated at 74.0 requests/s. With shared passes (``aggregated._shared_lane``) it saturates
    at 100.4, where its decode batch reaches max_num_seqs (256); the state at 0.9 of that is the simulation's
    (when written: lane busy 0.398 / 0.396, batch 193 / 196, TTFT mean 39.7 / 40.1 ms, ITL mean 33.9 / 33.7,
    p99 78.5 / 73.4 ms). Past the cap the simulation still serves more (139 requests/s offered three times
    the rate): its fixed-length streams, admitted together as places free, finish together and refill
    the batch in cohorts whose prompts share a pass, a regime the steady state does not describe."""
    base = X.scenario_cases(_scenario("aggregated_unchunked"))[0].problem
    work = dataclasses.replace(base.workload, input_tokens=lognormal_lengths(median=32, p90=64),
                               output_tokens=fixed_length(64))
    problem = dataclasses.replace(base, workload=work)
    sat = X.saturation_rate_per_s(problem)
    assert sat >= 90.0  # one pass per prompt: 74
    arrival = dataclasses.replace(problem.workload.arrival, rate_per_s=0.9 * sat)
    q = dataclasses.replace(problem, workload=dataclasses.replace(problem.workload, arrival=arrival))
    ev = evaluate(q)
    sim = simulate(q, num_requests=6000, warmup_requests=1500, seed=0,
                   step_time=X.StepTimeMemos().for_problem(q), kv_watermark=X.KV_WATERMARK)
    assert ev.feasible
    assert ev.utilization["prefill_lane"] == pytest.approx(sim.utilization["prefill_lane"], rel=0.05)
    assert ev.mean_decode_batch == pytest.approx(sim.mean_decode_batch, rel=0.08)
    assert ev.ttft_s.mean == pytest.approx(float(np.mean(sim.ttft_s)), rel=0.10)
    assert ev.itl_s.mean == pytest.approx(float(np.mean(sim.itl_s)), rel=0.10)
    assert ev.itl_s.p99 == pytest.approx(float(np.quantile(sim.itl_s, 0.99)), rel=0.25)
    assert sat <= _capacity(problem, 2.0 * sat, requests=6000)


def _evaluate(prompt: int, arrival: dict, chunked: bool = False) -> Evaluation:
    body = {"model": "meta-llama/Llama-3.1-8B",
            "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1},
                           "chunked_prefill": chunked, "token_budget": 8192},
            "workload": {"input_tokens": prompt, "output_tokens": 64, "arrival": arrival}}
    return evaluate(build_problem(EvaluateRequest.model_validate(body), CATALOGS)[0])


def _warned(ev: Evaluation) -> bool:
    head = "without chunked prefill the engine prefills the prompts that wait"
    return any(w.startswith(head) for w in ev.warnings)


def test_a_busy_unchunked_closed_loop_of_short_prompts_says_its_throughput_is_understated() -> None:
    """A closed loop's unchunked lane still costs each prompt its own pass: warned where that matters. An
    open loop's lane shares its passes in the closed form (``aggregated._shared_lane``): not warned."""
    closed = {"kind": "closed_loop", "concurrency": 200}
    ev = _evaluate(32, closed)
    assert ev.utilization["prefill_lane"] >= 0.5 or not ev.feasible
    assert _warned(ev)
    assert not _warned(_evaluate(32, closed, chunked=True))  # chunked: the lane takes every waiting prompt
    busy_open = _evaluate(32, {"kind": "poisson", "rate_per_s": 600.0})
    assert not busy_open.feasible and not _warned(busy_open)


def test_no_shared_pass_warning_for_an_idle_lane_or_long_prompts() -> None:
    idle = _evaluate(32, {"kind": "closed_loop", "concurrency": 2})
    assert idle.utilization["prefill_lane"] < 0.5 and not _warned(idle)
    long = _evaluate(2000, {"kind": "closed_loop", "concurrency": 64})  # two passes cost 0.98 of two
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
