"""End-to-end percentiles of empirical lengths: the prompt law re-binned before the prompt × output grid
(``batch.E2E_MARGINAL_POINTS``) gives the percentiles of the whole grid, at a fraction of its sorting."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs import Parallelism
from planner.engines import find_engine
from planner.hardware import find_gpu, load_catalog
from planner.models import load_model_catalog
from planner.serving import batch
from planner.serving import evaluate as evaluate_module
from planner.serving.evaluate import evaluate
from planner.serving.types import AggregatedDeployment, ServingProblem
from planner.serving.workload import Arrival, Workload, sampled_lengths

_RNG = np.random.default_rng(7)
#: a trace-like workload: ~1000 distinct prompt and output lengths each (heavy-tailed, as real traces are)
_PROMPTS = sampled_lengths(np.clip(_RNG.lognormal(7.0, 0.9, 5000), 1, 7000).astype(int).tolist())
_OUTPUTS = sampled_lengths(np.clip(_RNG.lognormal(5.0, 0.8, 5000), 2, 4000).astype(int).tolist())


def _problem(arrival: Arrival, chunked: bool) -> ServingProblem:
    dep = AggregatedDeployment(gpu=find_gpu(load_catalog(), "h100-sxm"), parallelism=Parallelism(tp=1),
                               token_budget=8192, chunked_prefill=chunked)
    return ServingProblem(model=load_model_catalog().get("meta-llama/Llama-3.1-8B"), engine=find_engine("vllm"),
                          weight_dtype="bf16", kv_dtype="bf16", deployment=dep,
                          workload=Workload(input_tokens=_PROMPTS, output_tokens=_OUTPUTS, arrival=arrival))


@pytest.mark.parametrize("arrival", [Arrival(kind="poisson", rate_per_s=3.0),
                                     Arrival(kind="closed_loop", concurrency=32)], ids=["poisson", "closed"])
def test_rebinned_prompt_law_keeps_the_e2e_percentiles(arrival: Arrival, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _PROMPTS.values.size > batch.E2E_MARGINAL_POINTS  # the re-binning is exercised
    problem = _problem(arrival, chunked=True)
    rebinned = evaluate(problem).e2e_latency_s
    # the whole prompt × output grid, as before the re-binning
    monkeypatch.setattr(batch, "E2E_MARGINAL_POINTS", 10**6)
    monkeypatch.setattr(evaluate_module, "E2E_MARGINAL_POINTS", 10**6)
    whole = evaluate(problem).e2e_latency_s
    assert rebinned.mean == whole.mean
    for q in ("p50", "p90", "p99"):
        assert getattr(rebinned, q) == pytest.approx(getattr(whole, q), rel=1e-3)
