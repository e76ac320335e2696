"""Shared fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from planner.engines import load_engine_profiles
from planner.hardware import find_gpu, load_catalog
from planner.models import load_model_catalog
from planner.serving.types import AggregatedDeployment, ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length


@pytest.fixture(scope="session")
def llama_8b_on_h100() -> Callable[[Arrival], ServingProblem]:
    """``llama_8b_on_h100(arrival)``: Llama-3.1-8B (bf16, vLLM) on one H100 with a 2048-token budget, serving
    2000-token prompts and 300-token outputs as they arrive."""
    gpu = find_gpu(load_catalog(), "h100-sxm")
    model = load_model_catalog().get("meta-llama/Llama-3.1-8B")
    engine = load_engine_profiles()["vllm"]

    def make(arrival: Arrival) -> ServingProblem:
        return ServingProblem(
            model=model, engine=engine, weight_dtype="bf16", kv_dtype="bf16",
            deployment=AggregatedDeployment(gpu=gpu, token_budget=2048),
            workload=Workload(input_tokens=fixed_length(2000), output_tokens=fixed_length(300), arrival=arrival))

    return make
