"""POST /v1/plan/chunked, /v1/plan/disaggregated and /v1/plan: the searches of ``planner.optimize``.

An SLO nothing meets is an answer (200, ``status: "infeasible"``, the binding constraints and the nearest
SLO that something meets), not an error.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from planner.api.catalogs import Catalogs, CatalogsDep
from planner.api.deadline import deadline_checkpoint
from planner.api.plan_schemas import (
    MetricsOut,
    PlanChunkedRequest,
    PlanChunkedResponse,
    PlanDisaggregatedRequest,
    PlanDisaggregatedResponse,
    PlanRequest,
    PlanResponse,
    PlanWorkloadIn,
)
from planner.api.problems import problem_responses
from planner.api.responses import model_response, plain
from planner.api.routers.estimate import calibration_of, resolve_dtypes, resolve_engine, resolve_model
from planner.api.routers.evaluate import (
    DEFAULT_MAX_BATCH_SIZE,
    build_lengths,
    build_parallelism,
    inherited_efficiency_notes,
    parallelism_out,
    resolve_gpu,
)
from planner.api.settings import Settings, app_settings
from planner.costs import Parallelism
from planner.errors import InvalidInput
from planner.hardware import GpuSpec
from planner.optimize.chunked import (
    DEFAULT_MAX_BATCH_SIZES,
    DEFAULT_TOKEN_BUDGETS,
    ChunkedSearch,
    plan_chunked,
)
from planner.optimize.disaggregated import DisaggregatedSearch, PoolCandidate, plan_disaggregated
from planner.optimize.plan import PlanSearch, plan
from planner.serving.types import AggregatedDeployment, Evaluation, ServingProblem, Slo
from planner.serving.workload import Arrival, Workload

router = APIRouter(prefix="/plan", tags=["plan"], responses=problem_responses([400, 404, 413, 422, 500, 503]))
SettingsDep = Annotated[Settings, Depends(app_settings)]


def _workload(body: PlanWorkloadIn) -> tuple[Workload, float | None, float]:
    """(workload, the arrival's rate or None, the arrival's coefficient of variation)."""
    arrival = body.arrival
    if arrival is not None and arrival.kind == "closed_loop":
        raise InvalidInput(
            "the plans search open-loop load: give a poisson or gamma arrival (its rate is the "
            "target), or none to maximize the load; evaluate a closed loop with /v1/evaluate",
            field="workload.arrival.kind",
        )
    rate = None if arrival is None else float(arrival.rate_per_s)
    cv = 1.0 if arrival is None or arrival.kind == "poisson" else float(arrival.cv)
    workload = Workload(
        input_tokens=build_lengths(body.input_tokens, "workload.input_tokens"),
        output_tokens=build_lengths(body.output_tokens, "workload.output_tokens"),
        # the searches set their own rates; this one only fills the field
        arrival=Arrival(kind="poisson", rate_per_s=1.0),
        prefix_cache_hit_fraction=body.prefix_cache_hit_fraction,
    )
    return workload, rate, cv


def _target(explicit: float | None, from_arrival: float | None) -> float | None:
    if (
        explicit is not None
        and from_arrival is not None
        and not math.isclose(explicit, from_arrival, rel_tol=1e-9)
    ):
        raise InvalidInput(
            f"target_rate_per_s ({explicit:g}) and workload.arrival.rate_per_s ({from_arrival:g}) "
            "disagree: give one",
            field="target_rate_per_s",
        )
    return explicit if explicit is not None else from_arrival


def _slo(body: Any) -> Slo:
    slo = Slo(**body.model_dump())
    if slo.ttft_s is None and slo.itl_s is None:
        raise InvalidInput("give at least one of slo.ttft_s and slo.itl_s", field="slo")
    return slo


def _fields_of(obj: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """``plain(obj)`` without the fields in ``exclude``, which are never converted (converting would walk
    a configuration's whole evaluation before it is dropped)."""
    out = {}
    for f in fields(obj):
        if f.name not in exclude:
            v = getattr(obj, f.name)
            out[f.name] = plain(v) if is_dataclass(v) and not isinstance(v, type) else v
    return out


def _slo_out(slo: Slo | None) -> dict[str, Any] | None:
    return None if slo is None else plain(slo)


def _metrics(ev: Evaluation | None, notes: list[str]) -> MetricsOut | None:
    if ev is None:
        return None
    out = plain(ev)
    out["warnings"] = notes + list(ev.warnings)
    return MetricsOut.model_validate(out)


def _problem(
    body: Any, catalogs: Catalogs, workload: Workload, deployment: AggregatedDeployment
) -> ServingProblem:
    """The shared fields resolved; ``deployment`` is where the search starts (it replaces it)."""
    arch = resolve_model(body, catalogs)
    engine = resolve_engine(body.engine, catalogs, calibration_of(body))
    weight_dtype, kv_dtype = resolve_dtypes(arch, body.weight_dtype, body.kv_dtype)
    return ServingProblem(
        model=arch,
        engine=engine,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        deployment=deployment,
        workload=workload,
    )


@router.post("/chunked", response_model=PlanChunkedResponse)
def plan_chunk_budget(body: PlanChunkedRequest, catalogs: CatalogsDep, settings: SettingsDep) -> Response:
    """The token budget and max batch size that serve the most load within the SLO (or, at a target load,
    give the lowest TTFT within it), with the whole budget → TTFT, ITL, throughput, chunk-overhead curve."""
    workload, arrival_rate, cv = _workload(body.workload)
    target = _target(body.target_rate_per_s, arrival_rate)
    gpu = resolve_gpu(catalogs, body.gpu, "gpu", calibration_of(body))
    dep = AggregatedDeployment(
        gpu=gpu, parallelism=build_parallelism(body.parallelism), replicas=body.replicas
    )
    problem = _problem(body, catalogs, workload, dep)
    slo = _slo(body.slo)
    result = plan_chunked(
        ChunkedSearch(
            problem=problem,
            slo=slo,
            arrival_cv=cv,
            target_rate_per_s=target,
            token_budgets=tuple(body.token_budgets or DEFAULT_TOKEN_BUDGETS),
            max_batch_sizes=tuple(body.max_batch_sizes or DEFAULT_MAX_BATCH_SIZES),
            checkpoint=deadline_checkpoint(settings.search_deadline_s),
        )
    )
    return model_response(PlanChunkedResponse.model_validate(
        {
            "status": result.status,
            "objective": result.objective,
            "message": result.message,
            "model": problem.model.id,
            "engine": problem.engine.id,
            "gpu": gpu.id,
            "parallelism": parallelism_out(dep.parallelism),
            "replicas": dep.replicas,
            "token_budget": result.token_budget,
            "max_batch_size": result.max_batch_size,
            "rate_per_s": result.rate_per_s,
            "binding_constraint": result.binding_constraint,
            "metrics": _metrics(result.evaluation, inherited_efficiency_notes([gpu])),
            "curve": [plain(p) for p in result.curve],
            "slo": _slo_out(slo),
            "nearest_feasible_slo": _slo_out(result.nearest_feasible_slo),
            "assumptions": list(result.assumptions),
        }
    ))


def _candidates(
    catalogs: Catalogs, ids: list[str], tps: list[int], field: str, max_batch: int | None, body: Any
) -> tuple[PoolCandidate, ...]:
    profile = calibration_of(body)
    gpus: list[GpuSpec] = [resolve_gpu(catalogs, g, f"{field}.gpus", profile) for g in dict.fromkeys(ids)]
    return tuple(
        PoolCandidate(
            gpu=g, parallelism=Parallelism(tp=tp), max_batch_size=max_batch or DEFAULT_MAX_BATCH_SIZE
        )
        for g in gpus
        for tp in dict.fromkeys(tps)
    )


@router.post("/disaggregated", response_model=PlanDisaggregatedResponse)
def plan_pool_split(body: PlanDisaggregatedRequest, catalogs: CatalogsDep, settings: SettingsDep) -> Response:
    """Prefill and decode worker counts, GPU and tensor-parallel degree per pool: the most goodput within a GPU
    budget, or the fewest GPUs (lowest cost with prices) for a target rate; pool utilizations, the KV-transfer
    load against the link, and which pool limits."""
    workload, arrival_rate, cv = _workload(body.workload)
    target = _target(body.target_rate_per_s, arrival_rate)
    if body.total_gpus is None and target is None:
        raise InvalidInput(
            "give total_gpus (the most goodput within it) or a target rate (target_rate_per_s or "
            "the workload's arrival rate)",
            field="total_gpus",
        )
    pre = _candidates(
        catalogs,
        body.prefill.gpus or body.gpus,
        body.prefill.tensor_parallel or body.tensor_parallel,
        "prefill",
        body.prefill.max_batch_size,
        body,
    )
    dec = _candidates(
        catalogs,
        body.decode.gpus or body.gpus,
        body.decode.tensor_parallel or body.tensor_parallel,
        "decode",
        body.decode.max_batch_size,
        body,
    )
    problem = _problem(body, catalogs, workload, AggregatedDeployment(gpu=pre[0].gpu))
    slo = _slo(body.slo)
    result = plan_disaggregated(
        DisaggregatedSearch(
            problem=problem,
            slo=slo,
            prefill_candidates=pre,
            decode_candidates=dec,
            total_gpus=body.total_gpus,
            target_rate_per_s=target,
            arrival_cv=cv,
            kv_link=body.kv_transfer.link,
            max_workers_per_pool=body.max_workers_per_pool,
            price_per_gpu_hour_usd=body.price_per_gpu_hour_usd,
            minimize=body.minimize,
            checkpoint=deadline_checkpoint(settings.search_deadline_s),
        )
    )
    ev = result.evaluation
    kv = None
    if ev is not None and ev.kv_transfer is not None and result.kv_link is not None:
        kv = {
            "link": result.kv_link,
            "bytes_per_s": ev.kv_transfer["bytes_per_s"],
            "link_bandwidth_bytes_per_s": ev.kv_transfer["link_bandwidth_bytes_per_s"],
            "utilization": ev.utilization.get("kv_link", 0.0),
        }

    def pool(choice: Any) -> dict[str, Any] | None:
        if choice is None:
            return None
        return plain(choice) | {"parallelism": parallelism_out(choice.parallelism)}

    gpus = [c.gpu for c in pre + dec]
    return model_response(PlanDisaggregatedResponse.model_validate(
        {
            "status": result.status,
            "objective": result.objective,
            "message": result.message,
            "model": problem.model.id,
            "engine": problem.engine.id,
            "prefill": pool(result.prefill),
            "decode": pool(result.decode),
            "num_gpus": result.num_gpus,
            "rate_per_s": result.rate_per_s,
            "capacity_per_s": result.capacity_per_s,
            "goodput_per_gpu_per_s": result.goodput_per_gpu_per_s,
            "cost_per_hour_usd": result.cost_per_hour_usd,
            "limiting_pool": result.limiting_pool,
            "kv_transfer": kv,
            "metrics": _metrics(ev, inherited_efficiency_notes(gpus)),
            "binding_constraints": list(result.binding_constraints),
            "slo": _slo_out(slo),
            "nearest_feasible_slo": _slo_out(result.nearest_feasible_slo),
            "assumptions": list(result.assumptions),
            "alternatives": list(result.alternatives),
        }
    ))


@router.post("", response_model=PlanResponse)
def plan_deployment(body: PlanRequest, catalogs: CatalogsDep, settings: SettingsDep) -> Response:
    """Ranked configurations across aggregated (chunked, unchunked) and disaggregated modes, GPUs and
    tensor-parallel degrees by the objective, the Pareto frontier of throughput per GPU against tokens per
    second per user, and a recommendation with its reasons."""
    workload, arrival_rate, cv = _workload(body.workload)
    target = _target(body.target_rate_per_s, arrival_rate)
    gpus = [resolve_gpu(catalogs, g, "gpus", calibration_of(body)) for g in dict.fromkeys(body.gpus)]
    problem = _problem(body, catalogs, workload, AggregatedDeployment(gpu=gpus[0]))
    slo = _slo(body.slo)
    result = plan(
        PlanSearch(
            problem=problem,
            slo=slo,
            gpus=tuple(gpus),
            tensor_parallel=tuple(dict.fromkeys(body.tensor_parallel)),
            modes=tuple(body.modes),
            total_gpus=body.total_gpus,
            target_rate_per_s=target,
            objective=body.objective,
            arrival_cv=cv,
            price_per_gpu_hour_usd=body.price_per_gpu_hour_usd,
            checkpoint=deadline_checkpoint(settings.search_deadline_s),
        )
    )
    notes = inherited_efficiency_notes(gpus)
    configs = []
    for rank, cfg in enumerate(result.configurations, start=1):
        row = _fields_of(cfg, exclude=("evaluation", "score"))
        for key in ("parallelism", "prefill_parallelism", "decode_parallelism"):
            par = getattr(cfg, key)
            row[key] = None if par is None else parallelism_out(par)
        row |= {"rank": rank, "label": cfg.label, "metrics": _metrics(cfg.evaluation, [])}
        configs.append(row)
    return model_response(PlanResponse.model_validate(
        {
            "status": result.status,
            "objective": result.objective,
            "recommendation": result.recommendation,
            "reasons": list(result.reasons),
            "model": problem.model.id,
            "engine": problem.engine.id,
            "configurations": configs,
            "pareto_frontier": [plain(p) for p in result.pareto_frontier],
            "binding_constraints": list(result.binding_constraints),
            "slo": _slo_out(slo),
            "nearest_feasible_slo": _slo_out(result.nearest_feasible_slo),
            "assumptions": list(result.assumptions) + notes,
            "skipped": list(result.skipped),
        }
    ))
