"""The memory plan of a worker (``planner/costs/memory.py``) against published sizes and hand-computed KV.

Parameter counts are the Hugging Face model pages' (rounded to three significant figures, hence the
tolerances); KV bytes per token follow from each ``config.json``: layers × (K + V) × KV heads × head_dim
× bytes, with KV heads split over TP ranks until each rank holds one, then replicated (vLLM), and MLA's
compressed latent (kv_lora_rank + qk_rope_head_dim) held whole on every rank [DeepSeek-V2,
arXiv:2405.04434, Sec. 2.1; DeepSeek-V3, arXiv:2412.19437].
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs import CostContext, Parallelism, decode_cost, memory_plan, prefill_cost
from planner.costs.memory import kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from planner.engines import find_engine
from planner.errors import ModelDoesNotFit
from planner.hardware import load_catalog
from planner.models import load_model_catalog

GPUS = load_catalog()
MODELS = load_model_catalog()
GIB = 1024**3
LLAMA_8B, LLAMA_70B = "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"
LLAMA_405B = "meta-llama/Llama-3.1-405B"
DEEPSEEK_V3 = "deepseek-ai/DeepSeek-V3"


def context(model: str, gpu: str = "h100-sxm", *, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
            **parallelism: int) -> CostContext:
    return CostContext(model=MODELS.get(model), gpu=GPUS[gpu], engine=find_engine("vllm"),
                       weight_dtype=weight_dtype, kv_dtype=kv_dtype, parallelism=Parallelism(**parallelism))


# --------------------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------------------

#: published total parameters and the half-unit of their last printed digit
PUBLISHED_PARAMS = {LLAMA_8B: (8.03e9, 0.005e9), LLAMA_70B: (70.6e9, 0.05e9)}


@pytest.mark.parametrize("model", sorted(PUBLISHED_PARAMS))
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (4, 2)])
def test_dense_weights_divide_over_tp_and_pp(model, tp, pp):
    params, half_digit = PUBLISHED_PARAMS[model]
    per_gpu = weight_bytes_per_gpu(context(model, tp=tp, pp=pp))
    # bf16: 2 B per parameter; with pp = 2 the first stage holds the embedding, the last the LM head
    assert per_gpu == pytest.approx(2 * params / (tp * pp), abs=2 * half_digit / (tp * pp))


def test_deep_pipelines_put_the_embedding_on_the_first_stage():
    # Llama-3.1-70B (config.json: 80 layers, vocab 128256, hidden 8192, untied): with pp = 4 the first stage
    # holds 20 layers and the whole 128256 × 8192 embedding, more than a quarter of the model
    embedding = 128256 * 8192
    layers = 70.6e9 - 2 * embedding
    expected = 2 * (layers / 4 + embedding) / 2  # bf16, tp = 2
    assert weight_bytes_per_gpu(context(LLAMA_70B, tp=2, pp=4)) == pytest.approx(expected, abs=0.05e9)


def test_fp8_weights_keep_the_embeddings_in_16_bit():
    # Llama-3.1-70B in fp8: the decoder matrices at 1 B, embedding and LM head (2 × 128256 × 8192) at 2 B
    embeddings = 2 * 128256 * 8192
    expected = (70.6e9 - embeddings) * 1 + embeddings * 2
    assert weight_bytes_per_gpu(context(LLAMA_70B, weight_dtype="fp8")) == pytest.approx(expected, abs=0.05e9)


def test_a_tied_embedding_is_held_by_the_first_and_the_last_stage():
    # Qwen3-0.6B (config.json: vocab 151936, hidden 1024, tie_word_embeddings): 0.596B parameters, of
    # which the 151936 × 1024 embedding; with pp = 2 each stage holds half the layers and one full copy
    embedding = 151936 * 1024
    layers = MODELS.get("Qwen/Qwen3-0.6B").total_params - embedding
    assert weight_bytes_per_gpu(context("Qwen/Qwen3-0.6B", pp=2)) >= 2 * (layers / 2 + embedding) * 0.99


# --------------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tp", "kv_heads_per_gpu"), [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1), (32, 1)])
def test_llama_70b_kv_bytes_split_over_tp_until_replicated(tp, kv_heads_per_gpu):
    # 80 layers × (K + V) × KV heads on this GPU × 128 × 2 B: 327,680 B at tp = 1; 8 KV heads cannot split
    # beyond tp = 8, so larger TP replicates them
    expected = 80 * 2 * kv_heads_per_gpu * 128 * 2
    assert kv_bytes_per_token_per_gpu(context(LLAMA_70B, tp=tp)) == expected
    assert kv_bytes_per_token_per_gpu(context(LLAMA_70B, tp=tp, pp=2)) == expected / 2  # 40 layers per stage
    assert kv_bytes_per_token_per_gpu(context(LLAMA_70B, tp=tp, kv_dtype="fp8")) == expected / 2
    assert memory_plan(context(LLAMA_70B, tp=1)).kv_bytes_per_token_per_gpu == 327_680


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize(("kv_dtype", "kv_bytes"), [("bf16", 2), ("fp8", 1)])
def test_deepseek_v3_mla_latent_is_replicated_over_tp(tp, kv_dtype, kv_bytes):
    # 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64): 70,272 B in bf16, whatever the TP degree
    ctx = context(DEEPSEEK_V3, weight_dtype="fp8", kv_dtype=kv_dtype, tp=tp)
    assert kv_bytes_per_token_per_gpu(ctx) == 61 * 576 * kv_bytes


def test_kv_capacity_is_what_remains_after_weights_and_activations():
    plan = memory_plan(context(LLAMA_70B, tp=4))
    used = plan.reserved_bytes_per_gpu + plan.weight_bytes_per_gpu + plan.activation_bytes_per_gpu
    assert plan.fits and plan.memory_bytes == 80 * GIB  # H100 SXM5: 80 GiB of HBM3
    assert used + plan.kv_cache_bytes_per_gpu == pytest.approx(plan.memory_bytes, rel=1e-12)
    tokens = plan.kv_capacity_tokens
    assert tokens * plan.kv_bytes_per_token_per_gpu <= plan.kv_cache_bytes_per_gpu
    assert (tokens + 1) * plan.kv_bytes_per_token_per_gpu > plan.kv_cache_bytes_per_gpu


@settings(max_examples=60, deadline=None, database=None)
@given(model=st.sampled_from([LLAMA_8B, LLAMA_70B, "Qwen/Qwen3-30B-A3B", "openai/gpt-oss-120b"]),
       gpu=st.sampled_from(sorted(GPUS)), extra_gib=st.floats(1.0, 512.0), tp=st.sampled_from([1, 2, 4, 8]))
def test_kv_capacity_grows_with_memory(model, gpu, extra_gib, tp):
    ctx = context(model, gpu, tp=tp)
    bigger = dataclasses.replace(ctx, gpu=dataclasses.replace(ctx.gpu, memory_bytes=ctx.gpu.memory_bytes
                                                              + extra_gib * GIB))
    small, large = memory_plan(ctx), memory_plan(bigger)
    assert large.kv_capacity_tokens >= small.kv_capacity_tokens
    assert large.fits or not small.fits
    if small.fits:  # each GiB more holds GiB / (bytes per token) more tokens, less the 10 % headroom
        grown = 0.9 * extra_gib * GIB / small.kv_bytes_per_token_per_gpu
        assert large.kv_capacity_tokens - small.kv_capacity_tokens == pytest.approx(grown, abs=2)


# --------------------------------------------------------------------------------------------------
# does not fit
# --------------------------------------------------------------------------------------------------


def test_llama_405b_bf16_does_not_fit_one_h100_and_says_by_how_much():
    # 405.9B parameters (Hugging Face: 406B) × 2 B = 812 GB against 80 GiB × 0.9 (vLLM's default
    # gpu_memory_utilization) less the 1 GiB runtime reserve
    ctx = context(LLAMA_405B)
    for call in (lambda: prefill_cost(ctx, prompt_tokens=128), lambda: decode_cost(ctx, batch_size=1,
                                                                                      context_tokens=128)):
        with pytest.raises(ModelDoesNotFit) as raised:
            call()
        extra = raised.value.extra
        assert extra["weight_bytes_per_gpu"] == pytest.approx(2 * 406e9, abs=2 * 0.5e9)
        assert extra["usable_bytes_per_gpu"] == pytest.approx(0.9 * 80 * GIB - GIB, rel=1e-12)
        assert extra["kv_capacity_tokens"] == 0 and extra["needed_kv_tokens"] >= 128


def test_llama_405b_bf16_fits_eight_h200_but_not_eight_h100():
    # 812 GB / 8 = 101.5 GB per GPU: more than 0.9 × 80 GiB, less than 0.9 × 141 GB (H200)
    assert not memory_plan(context(LLAMA_405B, tp=8)).fits
    assert memory_plan(context(LLAMA_405B, "h200-sxm", tp=8)).fits


def test_a_batch_beyond_the_kv_capacity_does_not_fit():
    ctx = context(LLAMA_70B, tp=2)
    capacity = memory_plan(ctx).kv_capacity_tokens
    decode_cost(ctx, batch_size=1, context_tokens=capacity - 1)
    with pytest.raises(ModelDoesNotFit) as raised:
        decode_cost(ctx, batch_size=2, context_tokens=capacity // 2)
    assert raised.value.extra["kv_capacity_tokens"] == capacity
    assert raised.value.extra["needed_kv_tokens"] == 2 * (capacity // 2 + 1)
