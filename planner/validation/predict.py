"""The cost model's predictions for the validation data: published step rows and kernel-table rows.

Shared by ``scripts/accuracy_report.py`` and the reference tests so that both score the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from planner.costs import decode_cost, prefill_cost
from planner.costs import kernels as K
from planner.costs.types import CostContext, EngineProfile, Parallelism
from planner.hardware import GpuSpec
from planner.validation.datasets import StepRow, TableKey
from planner.validation.metrics import step_tolerance_fraction

#: engine profile used for every published row: all of them ran vLLM or a vLLM-derived prototype
PUBLISHED_ENGINE = "vllm"
#: operator names (prefixes) of a pass breakdown that Vidur's "linear ops" sum covers
VIDUR_LINEAR_PREFIXES = ("attn.", "mlp.")


def step_context(row: StepRow, *, model: Any, gpu: GpuSpec, engine: EngineProfile) -> CostContext:
    """The cost context of a published row: fp16 weights and KV cache, the row's TP and PP."""
    return CostContext(
        model=model,
        gpu=gpu,
        engine=engine,
        weight_dtype="fp16",
        kv_dtype="fp16",
        parallelism=Parallelism(tp=row.tp, pp=row.pp),
    )


def predict_step_s(row: StepRow, *, model: Any, gpu: GpuSpec, engine: EngineProfile) -> float:
    """Predicted time of one published row [s], comparable with ``row.value_s``.

    - prefill / decode: ``PassCost.latency_s`` of the row's pass, divided by ``pp`` for rows that time
      one pipeline stage (``row.per_stage``);
    - operator (Vidur's linear ops of one layer on one TP shard): the ``attn.*`` and ``mlp.*`` operators
      of a prefill of ``num_tokens`` tokens, divided by the number of layers;
    - allreduce: :func:`planner.costs.kernels.allreduce_time_s` with the family's NCCL latency (Vidur called
      NCCL through torch.distributed, not a custom all-reduce).

    Raises whatever the cost model raises (``ModelDoesNotFit``, ``UnsupportedConfiguration``).
    """
    if row.phase == "allreduce":
        return float(K.allreduce_time_s(gpu, num_gpus=row.num_gpus, message_bytes=row.message_bytes))
    ctx = step_context(row, model=model, gpu=gpu, engine=engine)
    if row.phase == "operator":
        cost = prefill_cost(ctx, prompt_tokens=row.num_tokens, batch_size=1)
        linear_s = sum(op.time_s for op in cost.breakdown if op.name.startswith(VIDUR_LINEAR_PREFIXES))
        num_layers = sum(group.num_layers for group in model.layer_groups)
        return float(linear_s / num_layers)
    if row.phase == "prefill":
        cost = prefill_cost(ctx, prompt_tokens=row.prompt_tokens, batch_size=row.batch_size)
    else:
        cost = decode_cost(ctx, batch_size=row.batch_size, context_tokens=row.context_tokens)
    return float(cost.latency_s / (row.pp if row.per_stage else 1))


# --------------------------------------------------------------------------------------------------
# kernel tables

#: table dtype -> (compute dtype, weight bytes per element)
_GEMM_DTYPES = {
    "bf16": ("bf16", 2.0),
    "fp8": ("fp8", 1.0),
    "fp8-block": ("fp8", 1.0),
    "w4a16-mxfp4": ("bf16", 0.5),
    "int4-wo": ("bf16", 0.5),
}


def _kv_bytes(table: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.where(table["kv_cache_dtype"] == "fp8", 1.0, 2.0)


def _gemm(
    gpu: GpuSpec, key: TableKey, t: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    dtype, width = _GEMM_DTYPES[key[2]]
    return K.gemm_time_s(
        gpu,
        m=t["m"],
        n=t["n"],
        k=t["k"],
        compute_dtype=dtype,
        weight_bytes_per_element=width,
        efficiency_scale=1.0 if engine is None else engine.gemm_efficiency_scale,
    )


def _by_kv_dtype(
    t: Mapping[str, np.ndarray], predict: Callable[[np.ndarray, float], np.ndarray]
) -> np.ndarray:
    """Evaluate ``predict(rows, kv_bytes)`` once per KV dtype (the kernel functions take a scalar width)."""
    out = np.empty(len(t["latency_ms"]))
    widths = _kv_bytes(t)
    for width in np.unique(widths):
        rows = np.flatnonzero(widths == width)
        out[rows] = predict(rows, float(width))
    return out


def _context_attention(
    gpu: GpuSpec, key: TableKey, t: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    dtype = "fp8" if key[2] == "fp8" else "bf16"
    scale = 1.0 if engine is None else engine.attention_efficiency_scale
    return _by_kv_dtype(
        t,
        lambda r, width: K.prefill_attention_time_s(
            gpu,
            batch_size=t["batch_size"][r],
            q_tokens=t["seq_len"][r],
            num_heads=t["num_heads"][r],
            num_kv_heads=t["num_key_value_heads"][r],
            head_dim=t["head_dim"][r],
            sliding_window=t["window_size"][r],
            kv_bytes_per_element=width,
            compute_dtype=dtype,
            efficiency_scale=scale,
            fixed_s=None if engine is None else engine.attention_fixed_s,
        ),
    )


def _generation_attention(
    gpu: GpuSpec, key: TableKey, t: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    scale = 1.0 if engine is None else engine.attention_efficiency_scale
    return _by_kv_dtype(
        t,
        lambda r, width: K.decode_attention_time_s(
            gpu,
            batch_size=t["batch_size"][r],
            context_tokens=t["kv_cached"][r] + 1.0,
            num_heads=t["num_heads"][r],
            num_kv_heads=t["num_key_value_heads"][r],
            head_dim=t["head_dim"][r],
            sliding_window=t["window_size"][r],
            kv_bytes_per_element=width,
            efficiency_scale=scale,
            fixed_s=None if engine is None else engine.attention_fixed_s,
            block_s=0.0 if engine is None else engine.decode_attention_block_s,
            blocks_per="kv_head" if engine is None else engine.decode_attention_blocks_per,
        ),
    )


def _moe(
    gpu: GpuSpec, key: TableKey, t: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    dtype, width = _GEMM_DTYPES[key[2]]
    gated = np.asarray(["nongated" not in str(s) for s in t["kernel_source"]])
    out = np.empty(len(t["latency_ms"]))
    for flag in (True, False):
        r = np.flatnonzero(gated == flag)
        if r.size:
            out[r] = K.moe_time_s(
                gpu,
                num_tokens=t["num_tokens"][r],
                hidden_size=t["hidden_size"][r],
                intermediate_size=t["inter_size"][r],
                experts_per_token=t["topk"][r],
                num_experts=t["num_experts"][r],
                moe_tp=t["moe_tp_size"][r],
                moe_ep=t["moe_ep_size"][r],
                gated=flag,
                compute_dtype=dtype,
                weight_bytes_per_element=width,
                efficiency_scale=1.0 if engine is None else engine.gemm_efficiency_scale * engine.moe_efficiency_scale,
                overhead_s=0.0 if engine is None else engine.moe_overhead_s,
            )
    return out


def _custom_allreduce(
    gpu: GpuSpec, key: TableKey, t: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    if engine is None:
        return K.allreduce_time_s(gpu, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])
    return K.engine_allreduce_time_s(gpu, engine, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])


def _nccl(
    gpu: GpuSpec, key: TableKey, t: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    if key[1] == "all_reduce":
        return K.allreduce_time_s(gpu, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])
    if key[1] == "alltoall":
        return K.all_to_all_time_s(gpu, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])
    if key[1] in ("all_gather", "reduce_scatter"):
        return K.all_gather_time_s(gpu, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])
    raise NotImplementedError(f"no cost function for nccl {key[1]}")


_KERNEL_PREDICTORS = {
    "gemm": _gemm,
    "context_attention": _context_attention,
    "generation_attention": _generation_attention,
    "moe": _moe,
    "custom_allreduce": _custom_allreduce,
}


def predict_kernel_s(
    gpu: GpuSpec, key: TableKey, table: Mapping[str, np.ndarray], engine: EngineProfile | None
) -> np.ndarray:
    """Predicted ``latency`` of every row of a kernel table [s], in one vectorized call per dtype group.

    Raises ``NotImplementedError`` (or ``AttributeError`` while a kernel function is missing) for
    tables the cost model has no function for.
    """
    predictor = _nccl if key[0] == "nccl" else _KERNEL_PREDICTORS.get(key[1])
    if predictor is None:
        raise NotImplementedError(f"no cost function for {key[1]}")
    return np.asarray(predictor(gpu, key, table, engine), dtype=float)


#: the column whose value is "the token dimension" of each kind, for slicing errors
TOKEN_COLUMN = {
    "gemm": "m",
    "context_attention": "seq_len",
    "generation_attention": "batch_size",
    "moe": "num_tokens",
}


def tolerance_fraction(row: StepRow) -> float:
    """Allowed ``|predicted / measured - 1|`` of a published row (see ``metrics.step_tolerance_fraction``).

    Vidur's "derived" operator sums are exact sums of stated medians and get no widening for it.
    """
    return step_tolerance_fraction(row.flags, lossy_derivation=row.phase != "operator")
