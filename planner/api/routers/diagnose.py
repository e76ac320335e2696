"""``POST /v1/diagnose`` (which phase is slow) and ``POST /v1/calibrate`` (fit the efficiencies)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from planner.api.catalogs import Catalogs, CatalogsDep
from planner.api.diagnose_schemas import (
    CalibrateRequest,
    CalibrateResponse,
    DiagnoseRequest,
    DiagnoseResponse,
    MeasurementsIn,
)
from planner.api.problems import problem_responses
from planner.api.responses import model_response
from planner.api.routers.estimate import calibration_of, resolve_dtypes, resolve_engine, resolve_model
from planner.api.routers.evaluate import (
    build_deployment,
    build_slo,
    build_workload,
    inherited_efficiency_notes,
    scheduler_defaults_note,
)
from planner.diagnose.calibrate import BenchmarkPoint, calibrate
from planner.diagnose.findings import diagnose
from planner.diagnose.measurements import (
    DecodeSample,
    IterationRecord,
    KvTransferRecord,
    Measurements,
    TtftSample,
)
from planner.diagnose.profile import composed
from planner.diagnose.prometheus import parse_metrics_text
from planner.diagnose.vllm_bench import measurements_from_bench_result
from planner.errors import InvalidInput
from planner.serving.types import AggregatedDeployment, ServingProblem
from planner.serving.workload import Arrival, Workload, fixed_length

router = APIRouter(tags=["diagnose"], responses=problem_responses([400, 404, 413, 422, 500]))


def build_measurements(body: MeasurementsIn) -> Measurements:
    """Every source of the request merged into one ``Measurements`` (structured samples win)."""
    out = Measurements()
    if body.metrics_text is not None:
        out = out.merged(parse_metrics_text(body.metrics_text, model_name=body.metrics_model_name,
                                            field="measurements.metrics_text",
                                            model_name_field="measurements.metrics_model_name"))
    if body.vllm_bench_result is not None:
        out = out.merged(measurements_from_bench_result(body.vllm_bench_result,
                                                       field="measurements.vllm_bench_result"))
    kv = body.kv_transfer
    structured = Measurements(
        ttft=tuple(TtftSample(**s.model_dump()) for s in body.ttft_by_prompt),
        decode=tuple(DecodeSample(**s.model_dump()) for s in body.decode_by_context),
        iterations=tuple(IterationRecord(**r.model_dump()) for r in body.iterations),
        kv_transfer=None if kv is None else KvTransferRecord(**kv.model_dump()),
        sources=("request body",) if (body.ttft_by_prompt or body.decode_by_context or body.iterations
                                      or kv is not None) else (),
    )
    if structured.ttft and out.ttft:
        out = Measurements(**{**out.__dict__, "ttft": ()})  # the user's own samples replace the derived ones
    if structured.decode and out.decode:
        out = Measurements(**{**out.__dict__, "decode": ()})
    return out.merged(structured)


def _problem(body: Any, catalogs: Catalogs, workload: Workload, notes: list[str]) -> ServingProblem:
    profile = calibration_of(body)
    arch = resolve_model(body, catalogs)
    engine = resolve_engine(body.engine, catalogs, profile)
    weight_dtype, kv_dtype = resolve_dtypes(arch, body.weight_dtype, body.kv_dtype)
    deployment = build_deployment(body.deployment, catalogs, workload, notes, profile)
    return ServingProblem(model=arch, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                          deployment=deployment, workload=workload, slo=build_slo(getattr(body, "slo", None)))


def _gpus(problem: ServingProblem) -> list:
    dep = problem.deployment
    return [dep.gpu] if isinstance(dep, AggregatedDeployment) else [dep.prefill.gpu, dep.decode.gpu]


@router.post("/diagnose", response_model=DiagnoseResponse)
def diagnose_deployment(body: DiagnoseRequest, catalogs: CatalogsDep) -> Response:
    """Which phase is slow: each symptom the measurements cover (first token later for longer prompts, later
    tokens slower as histories grow, a long prompt interrupting other streams, pools moving state) compared
    with the model's expectation for this deployment and workload, named by phase (queueing, prefill, decode,
    scheduling interference, KV transfer, or outside the model), with the evidence and what to do next.

    A high TTFT with a normal prefill is attributed to queueing or front-end time, never to prefill."""
    measurements = build_measurements(body.measurements)
    if measurements.empty:
        raise InvalidInput("no measurements: give samples, a metrics scrape or a vllm bench result",
                           field="measurements")
    workload = build_workload(body.workload)
    notes = scheduler_defaults_note(body)
    problem = _problem(body, catalogs, workload, notes)
    result = diagnose(problem, measurements)
    expected = None
    if result.expected is not None:
        expected = asdict(result.expected) | {"warnings": list(result.expected.warnings)}
    return model_response(DiagnoseResponse.model_validate({
        "slowest_phase": result.slowest_phase,
        "summary": result.summary,
        "findings": [asdict(f) for f in result.findings],
        "expected": expected,
        "measurement_sources": list(measurements.sources),
        "notes": notes + list(result.notes) + inherited_efficiency_notes(_gpus(problem)),
    }))


@router.post("/calibrate", response_model=CalibrateResponse, tags=["calibrate"])
def calibrate_profile(body: CalibrateRequest, catalogs: CatalogsDep) -> Response:
    """Fit the GEMM efficiency (peak fraction and curve), memory efficiency, per-step and per-request overheads
    and collective efficiency to measurements of one deployment by bounded least squares, and return the
    profile (pass it as ``calibration`` to any other endpoint), the residuals before and after, and which
    parameters the data could not pin down."""
    measurements = build_measurements(body.measurements)
    if measurements.empty and not body.benchmarks:
        raise InvalidInput("nothing to fit: give measurements or benchmarks", field="measurements")
    notes: list[str] = []
    if body.workload is not None:
        workload = build_workload(body.workload)
    else:
        if measurements.iterations:
            raise InvalidInput("iteration records need the workload they ran under (their context length)",
                               field="workload")
        first = body.benchmarks[0] if body.benchmarks else None
        workload = Workload(input_tokens=fixed_length(first.input_tokens if first else 1000),
                            output_tokens=fixed_length(first.output_tokens if first else 100),
                            arrival=Arrival(kind="closed_loop", concurrency=1))
    problem = _problem(body, catalogs, workload, notes)
    points = tuple(BenchmarkPoint(**b.model_dump()) for b in body.benchmarks)
    for i, bp in enumerate(points):
        if bp.concurrency is None and bp.rate_per_s is None:
            raise InvalidInput("a benchmark point needs concurrency or rate_per_s", field=f"benchmarks.{i}")
        if bp.measured_ttft_s is None and bp.measured_tpot_s is None:
            raise InvalidInput("a benchmark point needs measured_ttft_s or measured_tpot_s", field=f"benchmarks.{i}")
    where = "; ".join(dict.fromkeys(g.id for g in _gpus(problem)))
    what = [f"{len(points)} benchmark point(s)"] if points else []
    what += [f"a {s}" if s != "request body" else "samples in the request" for s in measurements.sources]
    fitted_on = f"{problem.model.id} on {where} with {problem.engine.id}: {', '.join(what)}"
    start = calibration_of(body)
    if start is not None:
        fitted_on += "; fitted on top of the calibration given in the request (the profile answered includes it)"
    result = calibrate(problem, measurements, points, fitted_on=fitted_on)
    # the fit is relative to the problem it saw, which already carried the request's profile
    profile = asdict(composed(start, result.profile))
    return model_response(CalibrateResponse.model_validate({
        "status": result.status,
        "message": result.message,
        "calibration": profile,
        "parameters": [asdict(p) for p in result.parameters],
        "could_not_pin_down": [p.name for p in result.parameters if not p.pinned_down],
        "residuals": [asdict(o) | {"error_before_fraction": o.error_before_fraction,
                                   "error_after_fraction": o.error_after_fraction} for o in result.observations],
        "median_abs_error_before_fraction": result.median_abs_error_before_fraction,
        "median_abs_error_after_fraction": result.median_abs_error_after_fraction,
        "num_evaluations": result.num_evaluations,
        "measurement_sources": list(measurements.sources) + (["benchmarks"] if points else []),
        "assumptions": notes + list(result.assumptions),
    }))
