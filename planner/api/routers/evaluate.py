"""POST /v1/evaluate: what a benchmark of one deployment under one workload would measure, predicted."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

from fastapi import APIRouter
from fastapi.responses import Response

from planner.api.catalogs import Catalogs, CatalogsDep
from planner.api.problems import problem_responses
from planner.api.responses import model_response, plain
from planner.api.routers.estimate import calibration_of, resolve_dtypes, resolve_engine, resolve_model
from planner.api.schemas import MAX_SAMPLES, MAX_TOKENS, ParallelismIn, ParallelismOut
from planner.api.serving_schemas import (
    AggregatedDeploymentIn,
    AggregatedDeploymentOut,
    ArrivalOut,
    DisaggregatedDeploymentIn,
    DisaggregatedDeploymentOut,
    EvaluateRequest,
    EvaluateResponse,
    HistogramLengthsIn,
    KvTransferEcho,
    LengthsIn,
    LengthSummaryOut,
    LognormalLengthsIn,
    PoolIn,
    PoolOut,
    SampledLengthsIn,
    SloIn,
    SloOut,
    WorkloadIn,
    WorkloadOut,
)
from planner.costs import Parallelism
from planner.diagnose.profile import CalibrationProfile, calibrated_gpu
from planner.errors import InvalidInput, RequestTooLarge, UnknownGpu
from planner.hardware import GpuSpec, find_gpu
from planner.serving.disaggregated import choose_link
from planner.serving.evaluate import evaluate
from planner.serving.types import (
    AggregatedDeployment,
    DisaggregatedDeployment,
    Evaluation,
    PoolSpec,
    ServingProblem,
    Slo,
)
from planner.serving.workload import (
    Arrival,
    LengthDistribution,
    Workload,
    fixed_length,
    histogram_lengths,
    lognormal_lengths,
    sampled_lengths,
)

router = APIRouter(prefix="/evaluate", tags=["evaluate"],
                   responses=problem_responses([400, 404, 413, 422, 500]))

_SCHEDULER_DEFAULTS = {f.name: f.default for f in fields(AggregatedDeployment)}
#: vLLM's ``max_num_seqs`` and ``max_num_batched_tokens`` with chunked prefill (the core's defaults)
DEFAULT_MAX_BATCH_SIZE: int = _SCHEDULER_DEFAULTS["max_batch_size"]
DEFAULT_TOKEN_BUDGET: int = _SCHEDULER_DEFAULTS["token_budget"]
#: without chunked prefill vLLM sets ``max_num_batched_tokens = max(max_model_len, 2048)``
UNCHUNKED_MIN_TOKEN_BUDGET = 2048

_T = TypeVar("_T")


def _at(field: str, build: Callable[[], _T]) -> _T:
    """Run a core constructor, re-raising its ``InvalidInput`` with the request path of ``field``."""
    try:
        return build()
    except InvalidInput as exc:
        inner = exc.extra.get("field")
        path = field if not inner or inner == "tokens" else f"{field}.{inner}"
        raise InvalidInput(exc.detail, **(exc.extra | {"field": path})) from exc


def resolve_gpu(catalogs: Catalogs, gpu_id: str, field: str, profile: CalibrationProfile | None = None) -> GpuSpec:
    """The catalog GPU ``gpu_id`` (404 naming ``field`` when unknown), with ``profile`` applied."""
    try:
        return calibrated_gpu(find_gpu(catalogs.gpus, gpu_id), profile)
    except UnknownGpu as exc:
        raise UnknownGpu(exc.detail, **(exc.extra | {"field": field})) from exc


def _check_count(field: str, count: int) -> None:
    if count > MAX_SAMPLES:
        raise RequestTooLarge(
            f"{field} has {count} entries; the limit is {MAX_SAMPLES}: bin them into a histogram",
            field=field,
            num_entries=count,
            max_entries=MAX_SAMPLES,
        )


def build_lengths(spec: LengthsIn, field: str) -> LengthDistribution:
    if isinstance(spec, int):
        return _at(field, lambda: fixed_length(spec))
    if isinstance(spec, LognormalLengthsIn):
        return _at(
            field,
            lambda: lognormal_lengths(
                mean=spec.mean, median=spec.median, p90=spec.p90, max_tokens=MAX_TOKENS
            ),
        )
    if isinstance(spec, SampledLengthsIn):
        _check_count(f"{field}.samples", len(spec.samples))
        return _at(field, lambda: sampled_lengths(spec.samples))
    assert isinstance(spec, HistogramLengthsIn)
    _check_count(f"{field}.histogram.values", len(spec.histogram.values))
    _check_count(f"{field}.histogram.weights", len(spec.histogram.weights))
    return _at(f"{field}.histogram", lambda: histogram_lengths(spec.histogram.values, spec.histogram.weights))


def build_workload(body: WorkloadIn) -> Workload:
    """The core's ``Workload`` of a request's ``workload`` (distribution constructors of ``workload.py``)."""
    input_tokens = build_lengths(body.input_tokens, "workload.input_tokens")
    output_tokens = build_lengths(body.output_tokens, "workload.output_tokens")
    arrival = _at("workload", lambda: Arrival(**body.arrival.model_dump()))
    return _at(
        "workload",
        lambda: Workload(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            arrival=arrival,
            prefix_cache_hit_fraction=body.prefix_cache_hit_fraction,
        ),
    )


def build_parallelism(body: ParallelismIn) -> Parallelism:
    return Parallelism(**body.model_dump())


def _default_budget(body: AggregatedDeploymentIn, workload: Workload, notes: list[str]) -> int:
    if body.token_budget is not None:
        return body.token_budget
    if body.chunked_prefill:
        return DEFAULT_TOKEN_BUDGET
    longest = math.ceil(workload.input_tokens.max)
    budget = max(longest, UNCHUNKED_MIN_TOKEN_BUDGET)
    notes.append(
        f"chunked_prefill is off: token_budget defaults to {budget}, vLLM's max(max_model_len, "
        f"{UNCHUNKED_MIN_TOKEN_BUDGET}) with the workload's longest prompt ({longest} tokens) standing in "
        "for max_model_len"
    )
    return budget


def build_deployment(
    body: AggregatedDeploymentIn | DisaggregatedDeploymentIn,
    catalogs: Catalogs,
    workload: Workload,
    notes: list[str],
    profile: CalibrationProfile | None = None,
) -> AggregatedDeployment | DisaggregatedDeployment:
    """The core's deployment, with the engine's scheduler defaults filled in (explained in ``notes``)."""
    if isinstance(body, AggregatedDeploymentIn):
        return AggregatedDeployment(
            gpu=resolve_gpu(catalogs, body.gpu, "deployment.gpu", profile),
            parallelism=build_parallelism(body.parallelism),
            replicas=body.replicas,
            max_batch_size=body.max_batch_size or DEFAULT_MAX_BATCH_SIZE,
            token_budget=_default_budget(body, workload, notes),
            chunked_prefill=body.chunked_prefill,
        )

    def pool(spec: PoolIn, name: str) -> PoolSpec:
        return PoolSpec(
            gpu=resolve_gpu(catalogs, spec.gpu, f"deployment.{name}.gpu", profile),
            parallelism=build_parallelism(spec.parallelism),
            workers=spec.workers,
            max_batch_size=spec.max_batch_size or DEFAULT_MAX_BATCH_SIZE,
            token_budget=spec.token_budget or DEFAULT_TOKEN_BUDGET,
        )

    return DisaggregatedDeployment(
        prefill=pool(body.prefill, "prefill"),
        decode=pool(body.decode, "decode"),
        kv_link=body.kv_transfer.link,
    )


def scheduler_defaults_note(body: EvaluateRequest) -> list[str]:
    """For engines other than vLLM the omitted scheduler limits still take vLLM's values: say so."""
    if body.engine == "vllm":
        return []
    dep = body.deployment
    specs = [dep] if isinstance(dep, AggregatedDeploymentIn) else [dep.prefill, dep.decode]
    if all(s.max_batch_size is not None and s.token_budget is not None for s in specs):
        return []
    return [
        f"{body.engine}: omitted max_batch_size / token_budget take vLLM's defaults "
        f"({DEFAULT_MAX_BATCH_SIZE} sequences, {DEFAULT_TOKEN_BUDGET} tokens); give them to match the "
        "engine's launch flags"
    ]


def build_slo(body: SloIn | None) -> Slo | None:
    if body is None:
        return None
    return Slo(**body.model_dump())


def inherited_efficiency_notes(gpus: list[GpuSpec]) -> list[str]:
    return [
        f"{gpu.id}: kernel efficiencies were not fitted on this GPU's family; they are "
        f"{gpu.efficiency_origin}"
        for gpu in {gpu.id: gpu for gpu in gpus}.values()
        if gpu.efficiency_inherited
    ]


def parallelism_out(par: Parallelism) -> ParallelismOut:
    return ParallelismOut(tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep, num_gpus=par.num_gpus)


def deployment_echo(
    dep: AggregatedDeployment | DisaggregatedDeployment, resolved_link: str | None = None
) -> dict[str, Any]:
    """The deployment as answered (defaults filled in); ``resolved_link``: the KV link used (default: the
    one ``evaluate`` chooses)."""
    if isinstance(dep, AggregatedDeployment):
        return AggregatedDeploymentOut(
            mode="aggregated",
            gpu=dep.gpu.id,
            parallelism=parallelism_out(dep.parallelism),
            replicas=dep.replicas,
            max_batch_size=dep.max_batch_size,
            token_budget=dep.token_budget,
            chunked_prefill=dep.chunked_prefill,
        ).model_dump()

    def pool(spec: PoolSpec) -> PoolOut:
        return PoolOut(
            gpu=spec.gpu.id,
            parallelism=parallelism_out(spec.parallelism),
            workers=spec.workers,
            max_batch_size=spec.max_batch_size,
            token_budget=spec.token_budget,
        )

    return DisaggregatedDeploymentOut(
        mode="disaggregated",
        prefill=pool(dep.prefill),
        decode=pool(dep.decode),
        kv_transfer=KvTransferEcho(link=dep.kv_link, resolved_link=resolved_link or choose_link(dep).link),
    ).model_dump()


def _length_summary(dist: LengthDistribution) -> LengthSummaryOut:
    p50, p90, p99 = (float(v) for v in dist.quantiles([0.5, 0.9, 0.99]))
    return LengthSummaryOut(kind=dist.kind, mean=dist.mean, p50=p50, p90=p90, p99=p99, max=dist.max)


def _workload_echo(workload: Workload) -> WorkloadOut:
    arrival = workload.arrival
    return WorkloadOut(
        input_tokens=_length_summary(workload.input_tokens),
        output_tokens=_length_summary(workload.output_tokens),
        arrival=ArrivalOut(
            kind=arrival.kind,
            concurrency=arrival.concurrency,
            rate_per_s=arrival.rate_per_s,
            cv=arrival.cv if arrival.kind == "gamma" else None,
        ),
        prefix_cache_hit_fraction=workload.prefix_cache_hit_fraction,
    )


def _metrics(evaluation: Evaluation) -> dict[str, Any]:
    out = plain(evaluation)
    out["warnings"] = list(evaluation.warnings)
    return out


def build_problem(body: EvaluateRequest, catalogs: Catalogs) -> tuple[ServingProblem, list[str]]:
    """The serving problem of an evaluate body, and the notes on the defaults it filled in."""
    arch = resolve_model(body, catalogs)
    profile = calibration_of(body)
    engine = resolve_engine(body.engine, catalogs, profile)
    weight_dtype, kv_dtype = resolve_dtypes(arch, body.weight_dtype, body.kv_dtype)
    workload = build_workload(body.workload)
    notes = scheduler_defaults_note(body)
    deployment = build_deployment(body.deployment, catalogs, workload, notes, profile)
    return ServingProblem(model=arch, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                          deployment=deployment, workload=workload, slo=build_slo(body.slo)), notes


def evaluation_response(problem: ServingProblem, evaluation: Evaluation, notes: list[str]) -> EvaluateResponse:
    """The evaluate answer: the evaluation, the resolved inputs echoed, and every note and warning."""
    deployment, slo = problem.deployment, problem.slo
    gpus = (
        [deployment.gpu]
        if isinstance(deployment, AggregatedDeployment)
        else [deployment.prefill.gpu, deployment.decode.gpu]
    )
    metrics = _metrics(evaluation)
    metrics["warnings"] = notes + inherited_efficiency_notes(gpus) + metrics["warnings"]
    return EvaluateResponse.model_validate(
        metrics
        | {
            "model": problem.model.id,
            "engine": problem.engine.id,
            "weight_dtype": problem.weight_dtype,
            "kv_dtype": problem.kv_dtype,
            "deployment": deployment_echo(deployment),
            "workload": _workload_echo(problem.workload),
            "slo": None if slo is None else SloOut.model_validate(plain(slo)),
            "mode": "aggregated" if isinstance(deployment, AggregatedDeployment) else "disaggregated",
        }
    )


@router.post("", response_model=EvaluateResponse)
def evaluate_deployment(body: EvaluateRequest, catalogs: CatalogsDep) -> Response:
    """Predicted TTFT, ITL, TPOT and end-to-end latency (mean, p50, p90, p99), throughput, utilization
    and the TTFT breakdown of a deployment under a workload, in steady state.

    An overloaded deployment is an answer (``feasible: false``), not an error.
    """
    problem, notes = build_problem(body, catalogs)
    return model_response(evaluation_response(problem, evaluate(problem), notes))
