"""Achievable-rate cost of single GPU kernels: GEMM, attention, MoE experts, collectives.

Every function is pure and broadcasts over numpy arrays. Each kernel is costed as the slower of its
compute and its memory traffic at *achievable* rates, blended by a soft maximum (load and compute
overlap imperfectly near the ridge point), plus a fixed per-kernel time:

    t = t_fixed + (t_compute**p + t_memory**p) ** (1/p)                                  # Eq. (1)

The achievable rates come from the GPU's datasheet peaks times its family's fitted fractions
(``EfficiencyParams``), reduced by the *shape* of the work:

- tile quantization: an ``m × n`` output is computed in ``tile_m × tile_n`` tiles, so a partly
  filled edge tile costs a whole tile;
- wave quantization: tiles run in waves of ``num_compute_units``; a last, partial wave idles SMs.
  Split-K (stream-K) is assumed where the output alone cannot fill one wave, as cuBLAS and CUTLASS
  do, so a skinny GEMM with a deep reduction still occupies the GPU;
- the main-loop ramp: a tile spends a fixed prologue/epilogue equivalent to ``k_half`` reduction
  steps, so efficiency grows as ``k / (k + k_half)``.

References: NVIDIA, "Matrix Multiplication Background User's Guide" (tile and wave quantization);
Williams, Waterman, Patterson, "Roofline", CACM 52(4), 2009; Osama et al., "Stream-K", PPoPP 2023.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.costs.types import EngineProfile
from planner.hardware import GpuSpec

FloatArray = NDArray[np.float64]

#: tensor-core dtypes whose activations are quantized on the fly before the GEMM
QUANTIZED_COMPUTE = frozenset({"fp8", "int8", "fp4"})



#: a count of tiles or blocks is rounded up from a ratio that can carry rounding error: a row count that is a
#: whole number of tiles in exact arithmetic (the serving tables' fractional decode batches and chunks sum to
#: the token budget) may come out 1e-12 above it, and a plain ceil would add a whole tile (until 2026-12-05:
#: a full-budget chunk beside 7.713407983539961 decodes cost 40.05 ms, beside 7.71340798 38.63 ms)
COUNT_SLACK = 1e-9


def _count(ratio: ArrayLike) -> NDArray[np.float64]:
    """``ceil(ratio)``, with ratios within ``COUNT_SLACK`` above a whole number taken as that number."""
    return np.ceil(np.asarray(ratio, dtype=np.float64) - COUNT_SLACK)

def _soft_max(a: FloatArray, b: FloatArray, p: float) -> FloatArray:
    """Smooth maximum ``(a^p + b^p)^(1/p)`` (p = ``EfficiencyParams.overlap_exponent``)."""
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    # the larger term over itself is exactly 1, and so is 1^p: ``hi / safe`` stands for its power (it is
    # 1, or NaN where the symmetric form is NaN), one power per element fewer, bit for bit the same
    return np.where(hi > 0, safe * (hi / safe + (np.minimum(a, b) / safe) ** p) ** (1.0 / p), 0.0)


def compute_dtype_for(gpu: GpuSpec, weight_dtype: str) -> str:
    """The tensor-core dtype a GEMM with these weights runs at on this GPU.

    fp8/int8/fp4 weights use the matching tensor cores where the GPU has them; otherwise (and for int4,
    which is weight-only in every engine we model) the weights are dequantized and the math is bf16.
    """
    if weight_dtype in ("fp8", "int8", "fp4") and gpu.supports(weight_dtype):
        return weight_dtype
    if weight_dtype == "fp4" and gpu.supports("fp8"):
        return "fp8"  # no FP4 tensor cores: FP4 weights are upcast (e.g. Hopper runs MXFP4 as FP8/BF16)
    if weight_dtype == "fp16" and gpu.supports("fp16"):
        return "fp16"
    return "bf16"


def _peak(gpu: GpuSpec, dtype: str) -> float:
    peak = gpu.peak_flops_per_s.get(dtype, 0.0)
    if peak <= 0.0:
        peak = gpu.peak_flops_per_s.get("bf16", 0.0)
    return float(peak)


def gemm_utilization(gpu: GpuSpec, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> FloatArray:
    """Fraction of the GPU's tensor throughput a GEMM of this shape can use (tile × wave × ramp).

    Parameters
    ----------
    m, n, k : array_like
        Rows (tokens), output features and reduction depth [elements].
    """
    eff = gpu.efficiency
    m = np.maximum(np.asarray(m, dtype=np.float64), 1.0)  # an empty GEMM is costed as a 1-row one
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    num_units = float(gpu.num_compute_units)
    # Hopper's wgmma needs 64 rows: smaller token counts use the narrower tile (CUTLASS heuristics)
    tile_m = np.where(m <= eff.gemm_tile_m / 2, eff.gemm_tile_m / 2, eff.gemm_tile_m)
    tile_n = float(eff.gemm_tile_n)
    tiles_m = _count(m / tile_m)
    tiles_n = _count(n / tile_n)
    tiles = tiles_m * tiles_n
    tile_fill = (m * n) / (tiles * tile_m * tile_n)  # tile quantization
    # at least one full wave of output tiles: data-parallel tiles, wave-quantized
    waves = np.ceil(tiles / num_units)
    wave_fill = tiles / (waves * num_units)
    # fewer tiles than compute units: stream-K splits the reduction across the idle units, continuously,
    # down to chunks of 2·k_half (Osama et al. 2023)
    # np.clip(x, 1, hi) with hi ≥ 1, as the ufuncs it stands for (np.clip's dispatch costs more here)
    split = np.minimum(np.maximum(num_units / tiles, 1.0), np.maximum(1.0, k / (2.0 * eff.gemm_k_half)))
    small = tiles < num_units
    fill = np.where(small, tiles * split / num_units, wave_fill)
    k_chunk = np.where(small, k / split, k)
    ramp = k_chunk / (k_chunk + eff.gemm_k_half)  # main-loop prologue/epilogue
    return tile_fill * fill * ramp


def gemm_hbm_bytes(
    gpu: GpuSpec,
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    *,
    weight_bytes_per_element: float,
    activation_bytes_per_element: float = 2.0,
) -> FloatArray:
    """HBM traffic of a tiled GEMM ``[m×k] · [k×n]``, counting re-reads the L2 cache cannot absorb.

    A wave of ``num_compute_units`` tiles is rasterized in groups of about sqrt(units) rows of tiles
    (the swizzle of CUTLASS/cuBLAS), so the weight matrix is streamed once per
    ``tile_m · sqrt(units)`` tokens, and the activations once per ``tile_n · sqrt(units)`` outputs. When
    an operand fits in half the L2 it is read from HBM once.
    """
    eff = gpu.efficiency
    m = np.asarray(m, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    group = np.sqrt(float(gpu.num_compute_units))
    w_bytes = n * k * weight_bytes_per_element
    a_bytes = m * k * activation_bytes_per_element
    c_bytes = m * n * activation_bytes_per_element
    half_l2 = 0.5 * gpu.l2_cache_bytes
    w_reads = np.where(w_bytes <= half_l2, 1.0, _count(m / (eff.gemm_tile_m * group)))
    a_reads = np.where(a_bytes <= half_l2, 1.0, _count(n / (eff.gemm_tile_n * group)))
    return w_bytes * w_reads + a_bytes * a_reads + c_bytes


def gemm_time_s(
    gpu: GpuSpec,
    *,
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    compute_dtype: str = "bf16",
    weight_bytes_per_element: float = 2.0,
    efficiency_scale: float = 1.0,
    count: ArrayLike = 1.0,
) -> FloatArray:
    """Time of ``count`` independent GEMMs of shape (m, n, k) on one GPU [s], Eq. (1).

    Parameters
    ----------
    gpu : GpuSpec
    m, n, k : array_like
        Tokens, output features, input features.
    compute_dtype : str
        Tensor-core dtype (see :func:`compute_dtype_for`).
    weight_bytes_per_element : float
        Storage width of the weights [bytes] (0.5 for 4-bit).
    efficiency_scale : float
        Engine-specific multiplier of the family's peak fraction (``EngineProfile``).
    count : array_like
        Number of such GEMMs (e.g. layers); each pays its fixed time.
    """
    eff = gpu.efficiency
    m = np.asarray(m, dtype=np.float64)
    flops = 2.0 * m * np.asarray(n, dtype=np.float64) * np.asarray(k, dtype=np.float64)
    peak_fraction = eff.gemm_peak_fraction.get(compute_dtype, eff.gemm_peak_fraction["bf16"])
    rate = _peak(gpu, compute_dtype) * peak_fraction * efficiency_scale
    t_compute = flops / (rate * gemm_utilization(gpu, m, n, k))
    traffic = gemm_hbm_bytes(gpu, m, n, k, weight_bytes_per_element=weight_bytes_per_element)
    bw = gpu.hbm_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction
    t_memory = traffic / bw
    t = eff.kernel_fixed_s + _soft_max(t_compute, t_memory, eff.overlap_exponent)
    if compute_dtype in QUANTIZED_COMPUTE:
        # dynamic activation quantization: one more streaming kernel reads the bf16 input, writes 8 bits
        t = t + eff.kernel_fixed_s + m * np.asarray(k, dtype=np.float64) * 3.0 / bw
    return np.asarray(count, dtype=np.float64) * t


def attention_flops(
    *,
    batch_size: ArrayLike,
    q_tokens: ArrayLike,
    cached_tokens: ArrayLike,
    num_heads: ArrayLike,
    head_dim: ArrayLike,
    v_head_dim: ArrayLike,
    sliding_window: ArrayLike = 0,
    window_block_tokens: float = 0.0,
) -> FloatArray:
    """Causal attention FLOPs of ``q_tokens`` new queries over ``cached_tokens`` earlier ones plus themselves.

    Query ``i`` (0-based among the new ones) sees ``cached + i + 1`` keys, capped by the window:
    ``2·h·(d_qk + d_v)`` FLOPs per (query, key) pair (QKᵀ and PV).
    """
    b = np.asarray(batch_size, dtype=np.float64)
    q = np.asarray(q_tokens, dtype=np.float64)
    c = np.asarray(cached_tokens, dtype=np.float64)
    w = np.asarray(sliding_window, dtype=np.float64)
    pairs_full = q * c + q * (q + 1.0) / 2.0
    # with a window w every query sees at most w keys; a tiled kernel computes whole key blocks, so a
    # block of queries touches the window plus one partial block (FlashAttention's block skipping)
    pairs = np.where(w > 0, np.minimum(pairs_full, q * (w + window_block_tokens)), pairs_full)
    h = np.asarray(num_heads, dtype=np.float64)
    d = np.asarray(head_dim, dtype=np.float64) + np.asarray(v_head_dim, dtype=np.float64)
    return 2.0 * b * h * d * pairs


def prefill_attention_time_s(
    gpu: GpuSpec,
    *,
    batch_size: ArrayLike,
    q_tokens: ArrayLike,
    cached_tokens: ArrayLike = 0,
    num_heads: ArrayLike,
    num_kv_heads: ArrayLike,
    head_dim: ArrayLike,
    v_head_dim: ArrayLike | None = None,
    sliding_window: ArrayLike = 0,
    kv_bytes_per_element: float = 2.0,
    compute_dtype: str = "bf16",
    efficiency_scale: float = 1.0,
    fixed_s: float | None = None,
) -> FloatArray:
    """Flash-attention time of a prefill (or a later chunk) for one layer on one GPU [s].

    Work is split into (batch × head × 128-query) blocks; a partial last block costs a whole one, and each
    block pays a prologue worth ``q_half`` keys (loading Q, softmax state, writing O). The pass takes the
    longer of its total work spread over all compute units and its critical path (the last, longest block
    of a sequence, which sees every earlier key, on one unit). Memory: read Q, K, V (cached part
    included) and write O once.
    """
    eff = gpu.efficiency
    b = np.asarray(batch_size, dtype=np.float64)
    q = np.asarray(q_tokens, dtype=np.float64)
    c = np.asarray(cached_tokens, dtype=np.float64)
    h = np.asarray(num_heads, dtype=np.float64)
    kvh = np.asarray(num_kv_heads, dtype=np.float64)
    d = np.asarray(head_dim, dtype=np.float64)
    dv = d if v_head_dim is None else np.asarray(v_head_dim, dtype=np.float64)
    block_q = 128.0
    flops = attention_flops(
        batch_size=b, q_tokens=q, cached_tokens=c, num_heads=h, head_dim=d, v_head_dim=dv,
        sliding_window=sliding_window, window_block_tokens=block_q,
    )
    # the query heads of a GQA group share their K/V, so the kernel packs them into the rows of one block
    # (FlashAttention-3's PackGQA): a block holds 128 (query, head) rows of one KV head, and a partial last
    # block costs a whole one (masked rows still run)
    group = np.maximum(h / np.maximum(kvh, 1.0), 1.0)
    rows = q * group
    padded_flops = flops * _count(rows / block_q) * block_q / rows
    blocks = b * kvh * _count(rows / block_q)
    per_key = 2.0 * (d + dv) + 2.0 * eff.attention_softmax_dims  # per (query, key) pair and head
    # each block's prologue (loading Q, softmax state, writing O) costs as much as ``q_half`` more keys
    prologue = block_q * eff.attention_q_half * per_key
    peak_fraction = eff.attention_peak_fraction.get(compute_dtype, eff.attention_peak_fraction["bf16"])
    rate = _peak(gpu, compute_dtype) * peak_fraction * efficiency_scale
    total = padded_flops / (2.0 * (d + dv)) * per_key + blocks * prologue
    # critical path: the last (longest) block of a sequence sees every earlier key; with fewer blocks than
    # compute units the pass cannot finish before that block does
    w = np.asarray(sliding_window, dtype=np.float64)
    keys_last = np.where(w > 0, np.minimum(c + q, w + block_q), c + q)
    longest = block_q * keys_last * per_key + prologue
    t_compute = np.maximum(total / rate, longest * gpu.num_compute_units / rate)
    kv_tokens = c + q
    bytes_moved = b * (q * h * (d + dv) * 2.0 + kv_tokens * kvh * (d + dv) * kv_bytes_per_element)
    t_memory = bytes_moved / (gpu.hbm_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction)
    fixed = eff.attention_fixed_s if fixed_s is None else fixed_s
    return fixed + _soft_max(t_compute, t_memory, eff.overlap_exponent)


def decode_attention_bytes(
    *,
    batch_size: ArrayLike,
    context_tokens: ArrayLike,
    num_kv_heads: ArrayLike,
    head_dim: ArrayLike,
    v_head_dim: ArrayLike | None = None,
    sliding_window: ArrayLike = 0,
    kv_bytes_per_element: float = 2.0,
) -> FloatArray:
    """KV-cache bytes one decode step reads for one layer: every cached token's K and V [bytes]."""
    ctx = np.asarray(context_tokens, dtype=np.float64)
    w = np.asarray(sliding_window, dtype=np.float64)
    seen = np.where(w > 0, np.minimum(ctx, w), ctx)
    d = np.asarray(head_dim, dtype=np.float64)
    dv = d if v_head_dim is None else np.asarray(v_head_dim, dtype=np.float64)
    return (
        np.asarray(batch_size, dtype=np.float64) * seen * np.asarray(num_kv_heads, dtype=np.float64)
        * (d + dv) * kv_bytes_per_element
    )


def decode_attention_time_s(
    gpu: GpuSpec,
    *,
    batch_size: ArrayLike,
    context_tokens: ArrayLike,
    num_heads: ArrayLike,
    num_kv_heads: ArrayLike,
    head_dim: ArrayLike,
    v_head_dim: ArrayLike | None = None,
    sliding_window: ArrayLike = 0,
    kv_bytes_per_element: float = 2.0,
    efficiency_scale: float = 1.0,
    fixed_s: float | None = None,
    block_s: float = 0.0,
    blocks_per: str = "kv_head",
) -> FloatArray:
    """Paged/flash-decoding attention time of one decode step for one layer on one GPU [s].

    Memory-bound: it streams every cached K and V once (``context_tokens`` includes the new token).
    Compute (``4·h·d`` FLOPs per cached token) matters only for wide GQA groups or MLA. A third floor is
    the work-unit count: one thread block per (sequence, KV head) or (sequence, query head), each lasting
    at least ``block_s``, spread over the compute units — this is what bounds large batches of short
    contexts.
    """
    eff = gpu.efficiency
    bytes_moved = decode_attention_bytes(
        batch_size=batch_size, context_tokens=context_tokens, num_kv_heads=num_kv_heads,
        head_dim=head_dim, v_head_dim=v_head_dim, sliding_window=sliding_window,
        kv_bytes_per_element=kv_bytes_per_element,
    )
    flops = attention_flops(
        batch_size=batch_size, q_tokens=1.0, cached_tokens=np.asarray(context_tokens) - 1.0,
        num_heads=num_heads, head_dim=head_dim,
        v_head_dim=head_dim if v_head_dim is None else v_head_dim, sliding_window=sliding_window,
    )
    bw = gpu.hbm_bandwidth_bytes_per_s * eff.decode_attention_bandwidth_fraction * efficiency_scale
    t_memory = bytes_moved / bw
    t_compute = flops / (_peak(gpu, "bf16") * eff.attention_peak_fraction["bf16"])
    fixed = eff.attention_fixed_s if fixed_s is None else fixed_s
    heads = np.asarray(num_kv_heads if blocks_per == "kv_head" else num_heads, dtype=np.float64)
    t_blocks = np.asarray(batch_size, dtype=np.float64) * heads * block_s / gpu.num_compute_units
    p = eff.overlap_exponent
    return fixed + _soft_max(_soft_max(t_compute, t_memory, p), t_blocks, p)


def expected_distinct_experts(
    num_tokens: ArrayLike, num_experts: ArrayLike, experts_per_token: ArrayLike
) -> FloatArray:
    """Expected number of distinct experts that ``num_tokens`` tokens route to (uniform routing).

    Each token picks ``k`` of ``E`` experts; an expert is untouched with probability ``(1 - k/E)^T``.
    """
    t = np.asarray(num_tokens, dtype=np.float64)
    e = np.asarray(num_experts, dtype=np.float64)
    k = np.asarray(experts_per_token, dtype=np.float64)
    return e * (1.0 - (1.0 - k / e) ** t)


def moe_time_s(
    gpu: GpuSpec,
    *,
    num_tokens: ArrayLike,
    hidden_size: ArrayLike,
    intermediate_size: ArrayLike,
    experts_per_token: ArrayLike,
    num_experts: ArrayLike,
    moe_tp: ArrayLike = 1,
    moe_ep: ArrayLike = 1,
    gated: bool = True,
    compute_dtype: str = "bf16",
    weight_bytes_per_element: float = 2.0,
    efficiency_scale: float = 1.0,
    overhead_s: float = 0.0,
) -> FloatArray:
    """Routed-expert computation of one MoE layer on one GPU (grouped GEMMs), excluding communication [s].

    The GPU holds ``E / ep`` experts, each sliced ``1 / tp`` wide. With balanced routing the local experts
    receive ``T·k / ep`` token-slots, spread over the expected number of distinct local experts touched.
    The grouped GEMM is costed as one GEMM with ``m`` = tokens per touched expert, repeated per expert,
    sharing one launch (Eq. (1) with the fixed time paid once per matrix).
    """
    eff = gpu.efficiency
    t = np.asarray(num_tokens, dtype=np.float64)
    e = np.asarray(num_experts, dtype=np.float64)
    k = np.asarray(experts_per_token, dtype=np.float64)
    ep = np.asarray(moe_ep, dtype=np.float64)
    tp = np.asarray(moe_tp, dtype=np.float64)
    h = np.asarray(hidden_size, dtype=np.float64)
    inter = np.asarray(intermediate_size, dtype=np.float64) / tp
    local_experts = e / ep
    touched = expected_distinct_experts(t, e, k) / ep
    touched = np.clip(touched, 1.0, local_experts)
    slots = t * k / ep
    m_per_expert = np.maximum(slots / touched, 1.0)
    up_n = inter * (2.0 if gated else 1.0)
    peak_fraction = eff.gemm_peak_fraction.get(compute_dtype, eff.gemm_peak_fraction["bf16"])
    rate = _peak(gpu, compute_dtype) * peak_fraction * efficiency_scale
    bw = gpu.hbm_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction
    total = np.zeros(np.broadcast(t, h, inter, touched).shape)
    for n_, k_ in ((up_n, h), (h, inter)):
        # the grouped kernel's tiles from all touched experts share the waves
        util = gemm_utilization(gpu, m_per_expert, n_ * touched, k_)
        flops = 2.0 * slots * n_ * k_
        t_compute = flops / (rate * util)
        traffic = touched * n_ * k_ * weight_bytes_per_element + slots * (n_ + k_) * 2.0
        total = total + eff.kernel_fixed_s + _soft_max(t_compute, traffic / bw, eff.overlap_exponent)
    # routing, permutation and the activation between the two GEMMs: streaming kernels
    elementwise_bytes = slots * (up_n + 2.0 * h) * 2.0
    return total + overhead_s + elementwise_bytes / bw


def nccl_allreduce_time_s(gpu: GpuSpec, *, num_gpus: ArrayLike, message_bytes: ArrayLike,
                          link_bandwidth_bytes_per_s: float | None = None) -> FloatArray:
    """NCCL's pipelined ring all-reduce of ``message_bytes`` across ``num_gpus`` GPUs [s].

    ``t = α + α₁·(n − 1) + (√(a·(n − 1)) + √(S / B(n)))²``, with ``S = 2 (n − 1)/n · bytes`` the traffic
    over each GPU's link (Thakur, Rabenseifner, Gropp, IJHPCA 2005) and ``B(n) = β·(n / 2)^γ`` the bus
    bandwidth, n capped at the largest count fitted. The square is the optimum of a pipeline through
    d = n − 1 steps that cuts the buffer into k segments: ``(k + d)·(a + S / (k·B))`` is least at
    ``k = √(d·S / (a·B))``, where it is ``(√(a·d) + √(S / B))²`` (the latency–bandwidth trade-off of
    pipelined collectives, e.g. Sanders and Sibeyn, Inf. Process. Lett. 86, 2003): latency-bound for
    small messages, ``2·√(a·(n − 1)·S / B)`` above the pure bandwidth time in between. On the held-out
    nccl-tests rows it is at 3.3 % median APE (p90 12.7 %), where α + S / B alone was at 22.9 % (p90 83 %):
    the bandwidth a ring reaches grows with the message (``scripts/fit_kernels.py``). With
    ``a = α₁ = γ = 0`` it is the plain α–β ring. One GPU needs no all-reduce."""
    n = np.asarray(num_gpus, dtype=np.float64)
    size = np.asarray(message_bytes, dtype=np.float64)
    return _nccl_ring_s(gpu, n, 2.0 * np.maximum(n - 1.0, 0.0) / np.maximum(n, 1.0) * size,
                        link_bandwidth_bytes_per_s)


def _nccl_ring_s(gpu: GpuSpec, n: FloatArray, traffic: FloatArray, link_bandwidth_bytes_per_s: float | None,
                 ring: bool = True) -> FloatArray:
    """NCCL's pipelined collective moving ``traffic`` bytes over each GPU's link (``nccl_allreduce_time_s``):
    a ring through its n − 1 peers, or (``ring=False``) one step of direct sends to all peers at the
    two-GPU bus bandwidth (an all-to-all: no ring to pipeline, no in-switch reduction)."""
    eff = gpu.efficiency
    bw = gpu.scale_up_bandwidth_bytes_per_s if link_bandwidth_bytes_per_s is None else (
        link_bandwidth_bytes_per_s)
    peers = np.maximum(n - 1.0, 0.0)
    growth = eff.link_bandwidth_exponent if ring else 0.0
    bus = bw * eff.link_bandwidth_fraction * (np.minimum(np.maximum(n, 2.0), float(eff.collective_max_gpus))
                                              / 2.0) ** growth
    depth = peers if ring else np.minimum(peers, 1.0)
    fill = np.sqrt(eff.collective_pipeline_s * depth) + np.sqrt(traffic / bus)
    t = eff.collective_latency_s + eff.collective_latency_per_peer_s * peers + fill * fill
    return np.where(n > 1, t, 0.0)


def allreduce_time_s(
    gpu: GpuSpec,
    *,
    num_gpus: ArrayLike,
    message_bytes: ArrayLike,
    latency_s: float | None = None,
    link_bandwidth_bytes_per_s: float | None = None,
    custom_bandwidth_fraction: float | None = None,
    custom_max_bytes: float | None = None,
    two_shot_bandwidth_fraction: float | None = None,
    two_shot_latency_s: float = 0.0,
) -> FloatArray:
    """All-reduce of ``message_bytes`` across ``num_gpus`` GPUs [s]: NCCL's (``nccl_allreduce_time_s``), or
    an engine's.

    An engine's CUDA-graph custom all-reduce (vLLM, SGLang, TensorRT-LLM) reads its peers' buffers over
    NVLink directly, without NCCL's pipeline, in one of two kernels: one shot, each GPU reading all n − 1
    peers' whole buffers, ``latency_s + (n − 1)·bytes / (f₁·bw)``; or two shots, a reduce-scatter and an
    all-gather with one barrier more, ``latency_s + c₂ + 2 (n − 1)/n · bytes / (f₂·bw)``. The engine takes
    the faster (vLLM's 1-stage and 2-stage kernels, chosen by size and GPU count), up to
    ``custom_max_bytes``; larger messages go to NCCL. Fitted on each engine's kernel table
    (``scripts/fit_kernels.py``). Without a two-shot fraction, the one-shot form alone; given ``latency_s``
    alone, the engine's latency replaces NCCL's fixed part."""
    if latency_s is None or custom_bandwidth_fraction is None or custom_max_bytes is None:
        nccl = nccl_allreduce_time_s(gpu, num_gpus=num_gpus, message_bytes=message_bytes,
                                     link_bandwidth_bytes_per_s=link_bandwidth_bytes_per_s)
        if latency_s is None:
            return nccl
        eff = gpu.efficiency
        n = np.asarray(num_gpus, dtype=np.float64)
        fixed = eff.collective_latency_s + eff.collective_latency_per_peer_s * np.maximum(n - 1.0, 0.0)
        return np.where(n > 1, nccl - fixed + latency_s, 0.0)
    n = np.asarray(num_gpus, dtype=np.float64)
    size = np.asarray(message_bytes, dtype=np.float64)
    peers = np.maximum(n - 1.0, 0.0)
    bw = gpu.scale_up_bandwidth_bytes_per_s if link_bandwidth_bytes_per_s is None else link_bandwidth_bytes_per_s
    custom = latency_s + peers * size / (bw * custom_bandwidth_fraction)
    if two_shot_bandwidth_fraction is not None:
        two = latency_s + two_shot_latency_s + 2.0 * peers / np.maximum(n, 1.0) * size / (
            bw * two_shot_bandwidth_fraction)
        custom = np.minimum(custom, two)
    large = size > custom_max_bytes
    if large.any():  # NCCL's time only where some message needs it (decode never does)
        nccl = nccl_allreduce_time_s(gpu, num_gpus=num_gpus, message_bytes=message_bytes,
                                     link_bandwidth_bytes_per_s=link_bandwidth_bytes_per_s)
        custom = np.where(large, nccl, custom)
    return np.where(n > 1, custom, 0.0)


def engine_allreduce_time_s(gpu: GpuSpec, engine: EngineProfile, *, num_gpus: ArrayLike,
                            message_bytes: ArrayLike) -> FloatArray:
    """:func:`allreduce_time_s` with ``engine``'s custom all-reduce fields (NCCL's where it has none)."""
    return allreduce_time_s(gpu, num_gpus=num_gpus, message_bytes=message_bytes,
                            latency_s=engine.allreduce_latency_s,
                            custom_bandwidth_fraction=engine.allreduce_bandwidth_fraction,
                            custom_max_bytes=engine.allreduce_custom_max_bytes,
                            two_shot_bandwidth_fraction=engine.allreduce_two_shot_bandwidth_fraction,
                            two_shot_latency_s=engine.allreduce_two_shot_latency_s)


def all_gather_time_s(
    gpu: GpuSpec, *, num_gpus: ArrayLike, message_bytes: ArrayLike, link_bandwidth_bytes_per_s: float | None = None
) -> FloatArray:
    """Ring all-gather (or reduce-scatter) producing ``message_bytes`` per GPU: NCCL's pipelined ring
    (``nccl_allreduce_time_s``) moving (n−1)/n · bytes over each link, half the traffic of an all-reduce
    (a reduce-scatter followed by an all-gather), with the all-reduce's fitted latencies and bandwidth."""
    n = np.asarray(num_gpus, dtype=np.float64)
    size = np.asarray(message_bytes, dtype=np.float64)
    traffic = np.maximum(n - 1.0, 0.0) / np.maximum(n, 1.0) * size
    return _nccl_ring_s(gpu, n, traffic, link_bandwidth_bytes_per_s)


def all_to_all_time_s(
    gpu: GpuSpec,
    *,
    num_gpus: ArrayLike,
    message_bytes: ArrayLike,
    link_bandwidth_bytes_per_s: float | None = None,
) -> FloatArray:
    """All-to-all where each GPU sends ``message_bytes`` in total, (n-1)/n of it to peers [s].

    Each GPU moves the same (n−1)/n share of its bytes over its link as in an all-gather, but straight to
    each peer: one pipelined step, not a ring of n − 1, at the two-GPU bus bandwidth (the all-reduce's
    growth with n is NVLink SHARP's in-switch reduction). On the nccl-tests rows (2026-12-02) this is at 9 %
    median APE (p90 36 %), where the ring law would be at 16 % (p90 59 %)."""
    n = np.asarray(num_gpus, dtype=np.float64)
    size = np.asarray(message_bytes, dtype=np.float64)
    traffic = np.maximum(n - 1.0, 0.0) / np.maximum(n, 1.0) * size
    return _nccl_ring_s(gpu, n, traffic, link_bandwidth_bytes_per_s, ring=False)


def p2p_time_s(gpu: GpuSpec, *, message_bytes: ArrayLike, link_bandwidth_bytes_per_s: float) -> FloatArray:
    """Point-to-point send of activations between pipeline stages [s]."""
    eff = gpu.efficiency
    size = np.asarray(message_bytes, dtype=np.float64)
    return eff.collective_latency_s + size / (link_bandwidth_bytes_per_s * eff.link_bandwidth_fraction)


def streaming_time_s(gpu: GpuSpec, *, bytes_moved: ArrayLike, count: ArrayLike = 1.0) -> FloatArray:
    """Elementwise kernels (norms, activations, residual adds, rotary): pure HBM streaming [s]."""
    eff = gpu.efficiency
    b = np.asarray(bytes_moved, dtype=np.float64)
    return np.asarray(count, dtype=np.float64) * eff.kernel_fixed_s + b / (
        gpu.hbm_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction
    )
