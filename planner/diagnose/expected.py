"""What the cost model expects a deployment to measure, per measurement shape (vectorized).

The diagnosis compares these with what the user measured; the calibration fits the efficiency parameters
so that they agree. Each function takes the serving problem (model, engine, dtypes, deployment) and
arrays of the measurement's coordinates.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.costs.passes import mixed_step_latency_s
from planner.costs.types import CostContext
from planner.diagnose.profile import CalibrationProfile, calibrated_engine, calibrated_gpu
from planner.serving.disaggregated import choose_link, kv_transfer_s
from planner.serving.types import AggregatedDeployment, DisaggregatedDeployment, PoolSpec, ServingProblem
from planner.units import DTYPE_BYTES

FloatArray = NDArray[np.float64]
#: prompt chunks an idle engine needs at most for one prompt (bounds the vectorized chunk loop)
MAX_CHUNKS = 4096


def calibrated_problem(problem: ServingProblem, profile: CalibrationProfile | None) -> ServingProblem:
    """``problem`` with the profile applied to its engine and to every GPU of its deployment."""
    if profile is None or profile.is_identity:
        return problem
    dep = problem.deployment
    if isinstance(dep, AggregatedDeployment):
        dep = replace(dep, gpu=calibrated_gpu(dep.gpu, profile))
    else:
        dep = replace(dep, prefill=replace(dep.prefill, gpu=calibrated_gpu(dep.prefill.gpu, profile)),
                      decode=replace(dep.decode, gpu=calibrated_gpu(dep.decode.gpu, profile)))
    return replace(problem, engine=calibrated_engine(problem.engine, profile), deployment=dep)


def _ctx(problem: ServingProblem, pool: PoolSpec | AggregatedDeployment) -> CostContext:
    return CostContext(model=problem.model, gpu=pool.gpu, engine=problem.engine, weight_dtype=problem.weight_dtype,
                       kv_dtype=problem.kv_dtype, parallelism=pool.parallelism)


def prefill_side(problem: ServingProblem) -> tuple[CostContext, int, bool]:
    """(cost context, token budget, chunked?) of the GPUs that prefill."""
    dep = problem.deployment
    if isinstance(dep, AggregatedDeployment):
        return _ctx(problem, dep), dep.token_budget, dep.chunked_prefill
    return _ctx(problem, dep.prefill), dep.prefill.token_budget, True


def decode_side(problem: ServingProblem) -> CostContext:
    dep = problem.deployment
    return _ctx(problem, dep if isinstance(dep, AggregatedDeployment) else dep.decode)


def prefill_time_s(problem: ServingProblem, prompt_tokens: ArrayLike, cached_tokens: ArrayLike = 0.0, *,
                   decode_batch: float = 0.0, decode_context_tokens: float = 0.0) -> FloatArray:
    """Prefill time of each prompt [s]: its chunks run one iteration each, alongside ``decode_batch`` running
    decodes (each with ``decode_context_tokens`` cached) that take their share of the token budget first, every
    chunk attending to the KV of the chunks before it (chunked prefill); a prompt that is not chunked is one
    prefill-only pass (the decodes wait). ``cached_tokens`` (a prefix-cache hit) are skipped. The default,
    no running decodes, is an idle engine."""
    ctx, budget, chunked = prefill_side(problem)
    p = np.atleast_1d(np.asarray(prompt_tokens, dtype=np.float64))
    hit = np.broadcast_to(np.asarray(cached_tokens, dtype=np.float64), p.shape)
    work = np.maximum(p - hit, 1.0)
    if not chunked:
        return mixed_step_latency_s(ctx, decode_batch=0.0, decode_context_tokens=0.0, prefill_tokens=work,
                                    prefill_cached_tokens=hit)
    b = float(min(max(decode_batch, 0.0), budget - 1.0))
    left = budget - b  # what the running decodes leave of each iteration's budget
    n_chunks = np.ceil(work / left)
    k = np.arange(int(min(np.max(n_chunks), MAX_CHUNKS)), dtype=np.float64)[:, None]  # chunk index
    done = k * left
    tokens = np.clip(work[None, :] - done, 0.0, left)
    t = mixed_step_latency_s(ctx, decode_batch=b, decode_context_tokens=decode_context_tokens,
                             prefill_tokens=tokens, prefill_cached_tokens=hit[None, :] + done)
    return np.sum(np.where(tokens > 0, t, 0.0), axis=0)


def decode_step_s(problem: ServingProblem, context_tokens: ArrayLike, batch_size: ArrayLike) -> FloatArray:
    """One decode-only iteration of ``batch_size`` sequences, each with ``context_tokens`` cached [s]."""
    return mixed_step_latency_s(decode_side(problem), decode_batch=np.maximum(np.asarray(batch_size, float), 1.0),
                                decode_context_tokens=context_tokens, prefill_tokens=0.0)


def iteration_s(problem: ServingProblem, *, decode_tokens: ArrayLike, prefill_tokens: ArrayLike,
                num_prefill: ArrayLike, context_tokens: float, prefill_cached_tokens: ArrayLike = 0.0) -> FloatArray:
    """One scheduler iteration with ``decode_tokens`` decoding sequences (``context_tokens`` cached each) and
    ``prefill_tokens`` prompt tokens over ``num_prefill`` sequences [s] (the aggregated engine's GPUs)."""
    ctx, _, _ = prefill_side(problem)
    return mixed_step_latency_s(ctx, decode_batch=decode_tokens, decode_context_tokens=context_tokens,
                                prefill_tokens=prefill_tokens, prefill_cached_tokens=prefill_cached_tokens,
                                prefill_sequences=np.maximum(np.asarray(num_prefill, float), 1.0))


def kv_bytes_per_token(problem: ServingProblem) -> float:
    return float(problem.model.kv_cache_bytes_per_token(DTYPE_BYTES[problem.kv_dtype]))


def kv_transfer(problem: ServingProblem, prompt_tokens: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray, float]:
    """(bytes, whole transfer time [s], time not hidden behind the prefill [s], link bandwidth [bytes/s]) of
    each prompt's KV cache from the prefill to the decode pool (disaggregated deployments only)."""
    dep = problem.deployment
    if not isinstance(dep, DisaggregatedDeployment):
        raise TypeError("KV transfer exists only between the pools of a disaggregated deployment")
    link = choose_link(dep)
    p = np.atleast_1d(np.asarray(prompt_tokens, dtype=np.float64))
    kv = p * kv_bytes_per_token(problem)
    whole, exposed = kv_transfer_s(kv, link.bandwidth_bytes_per_s, prefill_time_s(problem, p),
                                   problem.model.num_layers)
    return kv, whole, exposed, link.bandwidth_bytes_per_s
