"""Per-kernel cost functions (``planner/costs/kernels.py``): first-principles counts and properties.

Reference values come from the definition of each operation, derived in the test: the causal
(query, key) pairs of attention enumerated one query at a time, the KV bytes of a decode step from the
head count and width, uniform top-k routing simulated with a fixed seed, the ring all-reduce's
``2 (n-1)/n`` traffic (Thakur, Rabenseifner, Gropp, IJHPCA 2005), and the roofline: no kernel runs faster
than its FLOPs at the datasheet peak or its compulsory HBM traffic at the datasheet bandwidth
(Williams, Waterman, Patterson, CACM 52(4), 2009).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs import kernels as K
from planner.hardware import GpuSpec, load_catalog

CATALOG = load_catalog()
GPUS = sorted(CATALOG)
H100 = CATALOG["h100-sxm"]
PROPERTY = settings(max_examples=100, deadline=None, database=None)

gpus = st.sampled_from(GPUS).map(CATALOG.__getitem__)
dims = st.integers(1, 32_768)
factors = st.floats(1.0, 16.0)


def _peak(gpu: GpuSpec, dtype: str) -> float:
    return gpu.peak_flops_per_s.get(dtype) or gpu.peak_flops_per_s["bf16"]


def _scaled(gpu: GpuSpec, *, bandwidth: float = 1.0, flops: float = 1.0) -> GpuSpec:
    return dataclasses.replace(
        gpu,
        hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * bandwidth,
        peak_flops_per_s={dtype: peak * flops for dtype, peak in gpu.peak_flops_per_s.items()},
    )


# --------------------------------------------------------------------------------------------------
# GEMM
# --------------------------------------------------------------------------------------------------


@PROPERTY
@given(gpu=gpus, m=dims, n=dims, k=dims, weight_dtype=st.sampled_from(["bf16", "fp8", "int4"]))
def test_gemm_is_never_faster_than_its_roofline(gpu, m, n, k, weight_dtype):
    # each operand crosses HBM at least once: weights n·k, activations m·k and output m·n in bf16
    width = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}[weight_dtype]
    dtype = K.compute_dtype_for(gpu, weight_dtype)
    t = float(K.gemm_time_s(gpu, m=m, n=n, k=k, compute_dtype=dtype, weight_bytes_per_element=width))
    compulsory = n * k * width + m * k * 2.0 + m * n * 2.0
    assert float(K.gemm_hbm_bytes(gpu, m, n, k, weight_bytes_per_element=width)) >= compulsory
    assert t >= 2.0 * m * n * k / _peak(gpu, dtype)
    assert t >= compulsory / gpu.hbm_bandwidth_bytes_per_s
    assert 0.0 < float(K.gemm_utilization(gpu, m, n, k)) <= 1.0


@PROPERTY
@given(gpu=gpus, m=dims, n=dims, k=dims, extra=st.integers(1, 4096))
def test_gemm_is_monotone_in_tokens_and_output_features(gpu, m, n, k, extra):
    t = float(K.gemm_time_s(gpu, m=m, n=n, k=k))
    assert float(K.gemm_time_s(gpu, m=m + extra, n=n, k=k)) >= t
    assert float(K.gemm_time_s(gpu, m=m, n=n + extra, k=k)) >= t


def test_gemm_is_monotone_in_reduction_depth():
    # m = n = 128 is one output tile: split-K decides how many SMs share the reduction
    k = np.arange(16, 8192, 16)
    t = K.gemm_time_s(H100, m=128, n=128, k=k)
    assert np.all(np.diff(t) >= 0.0), f"k={k[1:][np.diff(t) < 0][:4]} are faster than the k before them"


@PROPERTY
@given(gpu=gpus, m=dims, n=dims, k=dims, bandwidth=factors, flops=factors)
def test_more_bandwidth_or_flops_never_slows_a_gemm(gpu, m, n, k, bandwidth, flops):
    t = float(K.gemm_time_s(gpu, m=m, n=n, k=k))
    assert float(K.gemm_time_s(_scaled(gpu, bandwidth=bandwidth), m=m, n=n, k=k)) <= t
    assert float(K.gemm_time_s(_scaled(gpu, flops=flops), m=m, n=n, k=k)) <= t


def test_compute_dtype_follows_the_tensor_cores_the_gpu_has():
    # A100 has no FP8 tensor cores (NVIDIA A100 datasheet); Hopper has FP8 but no FP4 (H100 datasheet)
    assert K.compute_dtype_for(CATALOG["a100-80gb-sxm"], "fp8") == "bf16"
    assert K.compute_dtype_for(H100, "fp8") == "fp8"
    assert K.compute_dtype_for(H100, "fp4") == "fp8"
    assert K.compute_dtype_for(CATALOG["b200"], "fp4") == "fp4"
    assert K.compute_dtype_for(H100, "int4") == "bf16"  # weight-only: dequantized to bf16


# --------------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------------


def _enumerated_pairs(q: int, cached: int, window: int = 0) -> int:
    """Causal (query, key) pairs: new query i (0-based) sees the cached keys and itself, at most `window`."""
    seen = cached + np.arange(q) + 1
    return int(np.minimum(seen, window).sum() if window else seen.sum())


@PROPERTY
@given(q=st.integers(1, 3000), cached=st.integers(0, 3000), heads=st.integers(1, 128),
       batch=st.integers(1, 8))
def test_attention_flops_count_every_causal_pair(q, cached, heads, batch):
    # QKᵀ and PV are 2·d_qk and 2·d_v FLOPs per (query, key) pair and head (DeepSeek-V3 MLA: 192 and 128)
    flops = K.attention_flops(batch_size=batch, q_tokens=q, cached_tokens=cached, num_heads=heads,
                              head_dim=192, v_head_dim=128)
    assert float(flops) == 2.0 * batch * heads * (192 + 128) * _enumerated_pairs(q, cached)


@PROPERTY
@given(q=st.integers(1, 20_000), cached=st.integers(0, 20_000), window=st.integers(1, 4096))
def test_sliding_window_caps_attention_flops(q, cached, window):
    block = 128.0  # a tiled kernel computes whole key blocks: at most one partial block more per query
    kwargs = dict(batch_size=1, q_tokens=q, cached_tokens=cached, num_heads=1, head_dim=64, v_head_dim=64)
    full = float(K.attention_flops(**kwargs))
    capped = float(K.attention_flops(**kwargs, sliding_window=window, window_block_tokens=block))
    per_pair = 2.0 * (64 + 64)
    assert per_pair * _enumerated_pairs(q, cached, window) <= capped <= full
    assert capped <= per_pair * q * (window + block)
    if window >= cached + q:  # the window never binds
        assert capped == full


def test_decode_attention_reads_the_kv_cache_once():
    # Llama-3.1-70B, one layer, one GPU: 8 KV heads × (128 + 128) elements × 2 B = 4096 B per cached token
    per_token = 8 * (128 + 128) * 2
    full = K.decode_attention_bytes(batch_size=3, context_tokens=4096, num_kv_heads=8, head_dim=128)
    assert float(full) == 3 * 4096 * per_token
    windowed = K.decode_attention_bytes(batch_size=3, context_tokens=4096, num_kv_heads=8, head_dim=128,
                                        sliding_window=1024)
    assert float(windowed) == 3 * 1024 * per_token
    fp8 = K.decode_attention_bytes(batch_size=3, context_tokens=4096, num_kv_heads=8, head_dim=128,
                                   kv_bytes_per_element=1.0)
    assert float(fp8) == float(full) / 2


@PROPERTY
@given(gpu=gpus, batch=st.integers(1, 64), q=st.integers(1, 16_384), cached=st.integers(0, 16_384),
       heads=st.sampled_from([8, 16, 32, 64]), group=st.sampled_from([1, 4, 8]))
def test_attention_is_never_faster_than_its_roofline(gpu, batch, q, cached, heads, group):
    kvh = heads // group
    prefill = float(K.prefill_attention_time_s(gpu, batch_size=batch, q_tokens=q, cached_tokens=cached,
                                               num_heads=heads, num_kv_heads=kvh, head_dim=128))
    flops = K.attention_flops(batch_size=batch, q_tokens=q, cached_tokens=cached, num_heads=heads,
                              head_dim=128, v_head_dim=128)
    # Q in, O out (bf16), and every K and V of the sequence read once
    io_bytes = batch * (q * heads * 256 * 2 + (q + cached) * kvh * 256 * 2)
    assert prefill >= float(flops) / gpu.peak_flops_per_s["bf16"]
    assert prefill >= io_bytes / gpu.hbm_bandwidth_bytes_per_s
    decode = float(K.decode_attention_time_s(gpu, batch_size=batch, context_tokens=cached + 1,
                                             num_heads=heads, num_kv_heads=kvh, head_dim=128))
    assert decode >= batch * (cached + 1) * kvh * 256 * 2 / gpu.hbm_bandwidth_bytes_per_s


@PROPERTY
@given(gpu=gpus, batch=st.integers(1, 512), context=st.integers(1, 65_536), more=st.integers(1, 4096),
       block_s=st.sampled_from([0.0, 1e-6, 4e-6]), blocks_per=st.sampled_from(["kv_head", "head"]))
def test_decode_attention_is_monotone_in_context_and_batch(gpu, batch, context, more, block_s, blocks_per):
    def t(b: int, c: int) -> float:
        return float(K.decode_attention_time_s(gpu, batch_size=b, context_tokens=c, num_heads=64,
                                               num_kv_heads=8, head_dim=128, block_s=block_s,
                                               blocks_per=blocks_per))

    assert t(batch, context + more) >= t(batch, context)
    assert t(batch + more, context) >= t(batch, context)


@PROPERTY
@given(gpu=gpus, batch=st.integers(1, 16), q=st.integers(1, 16_384), heads=st.sampled_from([8, 16, 32, 64]))
def test_doubling_the_prompt_never_makes_prefill_attention_cheaper(gpu, batch, q, heads):
    def t(tokens: int) -> float:
        return float(K.prefill_attention_time_s(gpu, batch_size=batch, q_tokens=tokens, num_heads=heads,
                                                num_kv_heads=max(1, heads // 8), head_dim=128))

    assert t(2 * q) >= t(q)


def test_prefill_attention_is_monotone_in_prompt_tokens():
    # Mixtral-8x7B at tp=2 on one H100: 16 query heads and 4 KV heads of width 128 per GPU
    q = np.arange(1, 4097)
    t = K.prefill_attention_time_s(H100, batch_size=1, q_tokens=q, num_heads=16, num_kv_heads=4, head_dim=128)
    assert np.all(np.diff(t) >= 0.0), f"q={q[1:][np.diff(t) < 0][:4]} are cheaper than the q before them"


# --------------------------------------------------------------------------------------------------
# MoE routing
# --------------------------------------------------------------------------------------------------


def _simulated_distinct_experts(tokens: int, experts: int, top_k: int, trials: int, seed: int):
    """Mean and standard error of the distinct experts hit when each token picks top_k of them uniformly."""
    rng = np.random.default_rng(seed)
    keys = rng.random((trials, tokens, experts))
    picks = np.argpartition(keys, top_k - 1, axis=-1)[..., :top_k]  # a uniform top_k-subset per token
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    distinct = hit.sum(axis=1)
    return distinct.mean(), distinct.std(ddof=1) / np.sqrt(trials)


@pytest.mark.parametrize(
    ("tokens", "experts", "top_k"),
    [(1, 8, 2), (3, 8, 2), (10, 8, 2), (4, 128, 8), (32, 128, 8), (8, 256, 8), (64, 256, 8), (200, 256, 8)],
)
def test_expected_distinct_experts_matches_a_simulation(tokens, experts, top_k):
    # (Mixtral 8 experts top-2, Qwen3-30B-A3B 128 top-8, DeepSeek-V3 256 top-8)
    mean, stderr = _simulated_distinct_experts(tokens, experts, top_k, trials=400, seed=tokens * experts)
    predicted = float(K.expected_distinct_experts(tokens, experts, top_k))
    assert abs(predicted - mean) <= 4.0 * stderr + 1e-9


def test_expected_distinct_experts_limits():
    # one token touches exactly its k experts; very many tokens touch all E; never more than T·k
    assert float(K.expected_distinct_experts(1, 256, 8)) == pytest.approx(8.0, rel=1e-12)
    assert float(K.expected_distinct_experts(1_000_000, 256, 8)) == pytest.approx(256.0, rel=1e-12)
    tokens = np.arange(1, 2000)
    distinct = K.expected_distinct_experts(tokens, 128, 8)
    assert np.all(np.diff(distinct) >= 0) and np.all(distinct <= np.minimum(128, 8 * tokens) + 1e-9)


@PROPERTY
@given(gpu=gpus, tokens=st.integers(1, 16_384), extra=st.integers(1, 16_384),
       shape=st.sampled_from([(7168, 2048, 8, 256), (2048, 768, 8, 128), (4096, 14336, 2, 8)]),
       ep=st.sampled_from([1, 2, 8]))
def test_moe_time_is_monotone_in_tokens(gpu, tokens, extra, shape, ep):
    # (hidden, expert width, top-k, experts) of DeepSeek-V3, Qwen3-30B-A3B and Mixtral-8x7B
    hidden, inter, top_k, experts = shape

    def t(n: int) -> float:
        return float(K.moe_time_s(gpu, num_tokens=n, hidden_size=hidden, intermediate_size=inter,
                                  experts_per_token=top_k, num_experts=experts, moe_ep=min(ep, experts)))

    assert t(tokens + extra) >= t(tokens) > 0.0


# --------------------------------------------------------------------------------------------------
# collectives and streaming
# --------------------------------------------------------------------------------------------------


def _alpha_beta(gpu: GpuSpec) -> GpuSpec:
    eff = dataclasses.replace(gpu.efficiency, collective_latency_per_peer_s=0.0, collective_pipeline_s=0.0,
                              link_bandwidth_exponent=0.0)
    return dataclasses.replace(gpu, efficiency=eff)


def test_without_pipeline_terms_the_ring_is_alpha_beta():
    plain = _alpha_beta(H100)
    eff = plain.efficiency
    for n, size in ((2, 1e3), (4, 3e6), (8, 256 * 2**20)):
        want = eff.collective_latency_s + 2 * (n - 1) / n * size / (
            H100.scale_up_bandwidth_bytes_per_s * eff.link_bandwidth_fraction)
        assert float(K.nccl_allreduce_time_s(plain, num_gpus=n, message_bytes=size)) == pytest.approx(want)
    assert float(K.allreduce_time_s(H100, num_gpus=1, message_bytes=2**20)) == 0.0


def test_the_pipelined_ring_pays_its_fill_between_latency_and_bandwidth():
    eff = H100.efficiency
    bw = H100.scale_up_bandwidth_bytes_per_s
    for n in (2, 4, 8):
        peers = n - 1
        bus = bw * eff.link_bandwidth_fraction * (n / 2) ** eff.link_bandwidth_exponent
        fixed = eff.collective_latency_s + eff.collective_latency_per_peer_s * peers
        for size in (2.0, 2**16, 2**22, 2**28):
            traffic = 2 * peers / n * size
            t = float(K.nccl_allreduce_time_s(H100, num_gpus=n, message_bytes=size))
            cross = 2 * np.sqrt(eff.collective_pipeline_s * peers * traffic / bus)
            assert t == pytest.approx(fixed + eff.collective_pipeline_s * peers + traffic / bus + cross)
        # a tiny message costs the latencies and the pipeline's fill
        tiny = float(K.nccl_allreduce_time_s(H100, num_gpus=n, message_bytes=2))
        assert tiny == pytest.approx(fixed + eff.collective_pipeline_s * peers, rel=1e-2)


def test_the_bus_bandwidth_grows_with_the_gpus_only_as_far_as_the_fit_saw():
    eff = H100.efficiency
    big = 2.0**34  # bandwidth-bound
    per_byte = {n: float(K.nccl_allreduce_time_s(H100, num_gpus=n, message_bytes=big))
                / (2 * (n - 1) / n * big) for n in (2, 8, 16, 64)}
    assert per_byte[2] / per_byte[8] == pytest.approx(4.0 ** eff.link_bandwidth_exponent, rel=0.02)
    assert per_byte[16] == pytest.approx(per_byte[8], rel=0.02) == per_byte[64]
    assert eff.collective_max_gpus == 8


def test_an_all_to_all_is_one_step_at_the_two_gpu_bandwidth():
    eff = H100.efficiency
    big = 2.0**34
    t2, t8 = (float(K.all_to_all_time_s(H100, num_gpus=n, message_bytes=big)) for n in (2, 8))
    # (n − 1)/n of the bytes leave each GPU, over one step: 7/8 against 1/2, no growth of the bandwidth
    assert t8 / t2 == pytest.approx(1.75, rel=0.01)
    tiny = float(K.all_to_all_time_s(H100, num_gpus=8, message_bytes=2))
    assert tiny == pytest.approx(eff.collective_latency_s + 7 * eff.collective_latency_per_peer_s
                                 + eff.collective_pipeline_s, rel=1e-2)


def test_an_engine_all_reduce_takes_the_faster_custom_kernel_up_to_its_switch():
    args = dict(latency_s=4e-6, custom_bandwidth_fraction=0.6, custom_max_bytes=8 * 2**20,
                two_shot_bandwidth_fraction=0.75, two_shot_latency_s=5e-6)
    bw = H100.scale_up_bandwidth_bytes_per_s
    for n, size in ((2, 2**12), (8, 2**16), (8, 2**22), (4, 8 * 2**20)):
        one = 4e-6 + (n - 1) * size / (0.6 * bw)
        two = 9e-6 + 2 * (n - 1) / n * size / (0.75 * bw)
        got = float(K.allreduce_time_s(H100, num_gpus=n, message_bytes=size, **args))
        assert got == pytest.approx(min(one, two))
    # one shot for small messages on many GPUs would read 7 peers' buffers: two shots win at 4 MiB
    one_shot = 4e-6 + 7 * 2**22 / (0.6 * bw)
    assert float(K.allreduce_time_s(H100, num_gpus=8, message_bytes=2**22, **args)) < one_shot
    above = float(K.allreduce_time_s(H100, num_gpus=8, message_bytes=64 * 2**20, **args))
    assert above == pytest.approx(float(K.nccl_allreduce_time_s(H100, num_gpus=8, message_bytes=64 * 2**20)))


@PROPERTY
@given(gpu=gpus, nbytes=st.floats(0.0, 1e12), count=st.integers(1, 200))
def test_streaming_kernels_are_bandwidth_bound(gpu, nbytes, count):
    t = float(K.streaming_time_s(gpu, bytes_moved=nbytes, count=count))
    assert t >= nbytes / gpu.hbm_bandwidth_bytes_per_s
    assert t >= count * gpu.efficiency.kernel_fixed_s


def test_a_whole_tile_count_carried_with_rounding_error_is_not_rounded_up() -> None:
    """A row count that is a whole number of tiles in exact arithmetic can arrive 1e-12 above it (the serving
    tables' fractional decode batches and chunks sum to the token budget); it must not cost an extra tile.
    Until 2026-12-05 a full-budget chunk beside 7.713407983539961 decodes (Qwen3-30B-A3B, B200 tp4, a row
    of its mixed-step table) cost 40.05 ms and beside 7.71340798 decodes 38.63 ms."""
    whole = K._count(np.array([64.0, 4.0, 1.0]))
    np.testing.assert_array_equal(K._count(np.array([64.0, 4.0, 1.0]) * (1 + 1e-15)), whole)
    np.testing.assert_array_equal(K._count(np.array([64.3, 4.000001, 1.5])), [65.0, 5.0, 2.0])
