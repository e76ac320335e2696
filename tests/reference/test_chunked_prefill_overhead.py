"""Sarathi-Serve's chunked-prefill overhead (published_measurements.csv SS-008).

Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve", OSDI 2024,
Fig. 14 and Sec. 5.4.1: for Yi-34B with TP2 on A100-80GB, prefilling in 512-token chunks costs at most
about 25 % more than one unchunked pass, and the overhead is small at 2048-token chunks. The figure is read
off a plot ("at most ~25 %"), so we allow the 512-token overhead anywhere in 15–35 % at its worst prompt
length and require the 2048-token overhead to stay below 10 %.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs import CostContext, Parallelism, prefill_latency_s
from planner.costs.passes import mixed_step_latency_s
from planner.engines import find_engine
from planner.hardware import find_gpu, load_catalog
from planner.models import load_model_catalog

PROMPTS = (2048, 4096, 8192)


@pytest.fixture(scope="module")
def ctx() -> CostContext:
    model = load_model_catalog().get("01-ai/Yi-34B")
    return CostContext(model=model, gpu=find_gpu(load_catalog(), "a100-80gb-sxm"), engine=find_engine("vllm"),
                       weight_dtype="fp16", kv_dtype="fp16", parallelism=Parallelism(tp=2))


def _chunked_over_unchunked(ctx: CostContext, prompt: int, chunk: int) -> float:
    offsets = np.arange(0, prompt, chunk)
    sizes = np.minimum(chunk, prompt - offsets)
    chunked = float(np.sum(mixed_step_latency_s(ctx, decode_batch=0, decode_context_tokens=0, prefill_tokens=sizes,
                                                prefill_cached_tokens=offsets)))
    return chunked / float(prefill_latency_s(ctx, prompt_tokens=prompt)) - 1.0


def test_512_token_chunks_cost_about_a_quarter_more(ctx: CostContext) -> None:
    worst = max(_chunked_over_unchunked(ctx, p, 512) for p in PROMPTS)
    assert 0.15 <= worst <= 0.35, worst


def test_2048_token_chunks_cost_little(ctx: CostContext) -> None:
    worst = max(_chunked_over_unchunked(ctx, p, 2048) for p in PROMPTS)
    assert 0.0 <= worst < 0.10, worst


def test_smaller_chunks_never_cost_less(ctx: CostContext) -> None:
    for prompt in PROMPTS:
        overheads = [_chunked_over_unchunked(ctx, prompt, c) for c in (2048, 1024, 512, 256)]
        assert overheads == sorted(overheads), (prompt, overheads)
