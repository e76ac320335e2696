"""POST /v1/estimate/prefill and /v1/estimate/decode: the cost of one pass on one worker."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Protocol

from fastapi import APIRouter
from fastapi.responses import Response

from planner.api.catalogs import Catalogs, CatalogsDep
from planner.api.limits import MAX_INLINE_CONFIG_BYTES
from planner.api.problems import problem_responses
from planner.api.responses import model_response
from planner.api.schemas import (
    DecodeRequest,
    DecodeResponse,
    EstimateRequest,
    MemoryPlanOut,
    OperatorCostOut,
    ParallelismOut,
    PrefillRequest,
    PrefillResponse,
)
from planner.costs import CostContext, EngineProfile, Parallelism, PassCost, decode_cost, prefill_cost
from planner.diagnose.profile import CalibrationProfile, calibrated_engine, calibrated_gpu
from planner.errors import RequestTooLarge, UnsupportedConfiguration, UnsupportedModel
from planner.hardware import find_gpu
from planner.models import ModelArchitecture, from_hf_config

router = APIRouter(prefix="/estimate", tags=["estimate"],
                   responses=problem_responses([400, 404, 413, 422, 500]))


def _inline_model(config: dict[str, object]) -> ModelArchitecture:
    size_bytes = len(json.dumps(config, separators=(",", ":")).encode())
    if size_bytes > MAX_INLINE_CONFIG_BYTES:
        raise RequestTooLarge(
            f"model_config is {size_bytes} bytes; the limit is {MAX_INLINE_CONFIG_BYTES}",
            field="model_config",
            size_bytes=size_bytes,
            limit_bytes=MAX_INLINE_CONFIG_BYTES,
        )
    try:
        return from_hf_config(config, model_id="inline")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # malformed user input, not a bug
        raise UnsupportedModel(f"model_config could not be read: {exc!r}", field="model_config") from exc


class ModelFields(Protocol):
    """The request fields that say what runs: ``EstimateRequest`` and ``ModelChoice`` both have them."""

    model: str | None
    inline_model_config: dict[str, Any] | None


def resolve_model(body: ModelFields, catalogs: Catalogs) -> ModelArchitecture:
    """The architecture of the catalog ``model`` or of the inline ``model_config`` (exactly one is set)."""
    if body.inline_model_config is not None:
        return _inline_model(body.inline_model_config)
    assert body.model is not None  # the request model guarantees exactly one
    return catalogs.models.get(body.model)


def calibration_of(body: Any) -> CalibrationProfile | None:
    """The request's inline calibration profile (its ``calibration`` field), if any."""
    cal = getattr(body, "calibration", None)
    return None if cal is None else CalibrationProfile(**cal.model_dump())


def resolve_engine(engine_id: str, catalogs: Catalogs, profile: CalibrationProfile | None = None) -> EngineProfile:
    if engine_id not in catalogs.engines:
        raise UnsupportedConfiguration(f"no profile for engine {engine_id!r}", field="engine")
    return calibrated_engine(catalogs.engines[engine_id], profile)


def resolve_dtypes(
    arch: ModelArchitecture, weight_dtype: str | None, kv_dtype: str | None
) -> tuple[str, str]:
    """(weight, KV) dtypes: the weights default to the checkpoint's native dtype (else bf16), the KV
    cache follows the weights (``ModelArchitecture.default_kv_dtype``)."""
    weights = weight_dtype or arch.native_weight_dtype or "bf16"
    return weights, kv_dtype or arch.default_kv_dtype(weights)


def build_context(body: EstimateRequest, catalogs: Catalogs) -> CostContext:
    """Resolve the ids and defaults of a request into a ``CostContext``.

    The weight dtype defaults to the checkpoint's native one (else bf16), the KV dtype follows the
    weights (``ModelArchitecture.default_kv_dtype``).
    """
    arch = resolve_model(body, catalogs)
    profile = calibration_of(body)
    gpu = calibrated_gpu(find_gpu(catalogs.gpus, body.gpu), profile)
    engine = resolve_engine(body.engine, catalogs, profile)
    weight_dtype, kv_dtype = resolve_dtypes(arch, body.weight_dtype, body.kv_dtype)
    ctx = CostContext(
        model=arch,
        gpu=gpu,
        engine=engine,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        parallelism=Parallelism(**body.parallelism.model_dump()),
    )
    return ctx


def _echo(ctx: CostContext, cost: PassCost) -> dict[str, object]:
    par = ctx.parallelism
    warnings = []
    if ctx.gpu.efficiency_inherited:
        warnings.append(
            f"{ctx.gpu.id}: kernel efficiencies were not fitted on this GPU's family; "
            f"they are {ctx.gpu.efficiency_origin}"
        )
    return {
        "model": ctx.model.id,
        "gpu": ctx.gpu.id,
        "engine": ctx.engine.id,
        "weight_dtype": ctx.weight_dtype,
        "kv_dtype": ctx.kv_dtype,
        "parallelism": ParallelismOut(tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep, num_gpus=par.num_gpus),
        "efficiency_origin": ctx.gpu.efficiency_origin,
        "warnings": warnings,
        "bound": cost.bound,
        "flops": cost.flops,
        "bytes_moved": cost.bytes_moved,
        "breakdown": [OperatorCostOut.model_validate(asdict(op)) for op in cost.breakdown],
        "memory": MemoryPlanOut.model_validate(asdict(cost.memory)),
    }


@router.post("/prefill", response_model=PrefillResponse)
def estimate_prefill(body: PrefillRequest, catalogs: CatalogsDep) -> Response:
    """Latency, work and per-operator breakdown of one prefill pass of a batch of prompts."""
    ctx = build_context(body, catalogs)
    cost = prefill_cost(
        ctx, prompt_tokens=body.prompt_tokens, batch_size=body.batch_size, cached_tokens=body.cached_tokens
    )
    return model_response(PrefillResponse.model_validate(
        _echo(ctx, cost)
        | {
            "latency_s": cost.latency_s,
            "tokens_per_s": body.batch_size * body.prompt_tokens / cost.latency_s,
            "prompt_tokens": body.prompt_tokens,
            "cached_tokens": body.cached_tokens,
            "batch_size": body.batch_size,
        }
    ))


@router.post("/decode", response_model=DecodeResponse)
def estimate_decode(body: DecodeRequest, catalogs: CatalogsDep) -> Response:
    """Latency and per-operator breakdown of one decode step (one new token per sequence)."""
    ctx = build_context(body, catalogs)
    cost = decode_cost(ctx, batch_size=body.batch_size, context_tokens=body.context_tokens)
    return model_response(DecodeResponse.model_validate(
        _echo(ctx, cost)
        | {
            "step_latency_s": cost.latency_s,
            "tokens_per_s": body.batch_size / cost.latency_s,
            "batch_size": body.batch_size,
            "context_tokens": body.context_tokens,
        }
    ))
