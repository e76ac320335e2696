"""The H100 serving benchmarks as ``ServingProblem``s, their predictions by ``evaluate`` and the scoring.

Shared by ``scripts/serving_accuracy.py`` and ``tests/reference/test_serving_benchmarks.py`` so that both
score the same thing. Rows come from :func:`planner.validation.datasets.serving_benchmarks` (values typed,
``measured_*_s`` in seconds).

How a row becomes a problem (every reading that is not literal in the CSV is listed here):

- model: ``load_model_catalog().get(row["model"])``; engine: the ``backend`` column's profile;
- weight dtype from ``gemm_quant_mode`` (else ``precision``): ``fp8*`` -> fp8, ``*fp4*`` -> fp4, empty
  -> bf16, as in ``scripts/fit_engines.py``;
- KV dtype: **assumed** ``model.default_kv_dtype(weight)`` (fp8 KV with fp8 weights, bf16 otherwise).
  The CSV does not record the KV-cache dtype; vLLM's and SGLang's ``kv_cache_dtype="auto"`` keeps the
  activations' dtype (bf16) unless the checkpoint carries KV scales, so fp8 rows of those engines may have
  run a bf16 cache;
- GPU: ``h100-sxm`` (the file's only ``system``);
- parallelism: ``tp_size``, ``pp_size``, ``attention_dp_size`` -> dp, ``moe_ep_size`` -> ep (empty or 0 -> 1).
  The planner derives the experts' TP share as ``tp·dp / ep``; a row whose ``moe_tp_size × moe_ep_size``
  contradicts that is refused;
- aggregated rows: one replica; ``max_batch_size = max(batch_size, concurrency)`` (a closed loop of ``c``
  clients never holds more than ``c`` requests; the rows where ``batch_size < concurrency`` record the
  batch of one attention-DP rank: ``batch_size × dp = concurrency`` for MiniMax-M2.5, and for gpt-oss-120b
  on TensorRT-LLM ``batch_size × tp = concurrency`` with ``attention_dp_size`` left empty); token budget
  8192 (vLLM's ``max_num_batched_tokens`` and SGLang's ``chunked_prefill_size`` on 80 GB GPUs, TensorRT-LLM's
  ``max_num_tokens`` default); chunked prefill: see :data:`CHUNKED_PREFILL`;
- disaggregated rows: a prefill and a decode pool from the ``prefill_*`` / ``decode_*`` columns (workers,
  tp, pp, attention dp, ep); the decode pool's batch cap is ``max(decode_batch_size · dp, ⌈c / workers⌉)``;
  KV link ``auto``;
- workload: fixed prompt ``isl``, fixed output ``osl``, a closed loop of ``concurrency`` clients.

Rows that lack what a problem needs (concurrency; the worker counts of a disaggregated row) are refused
with the reason (:class:`RowRefused`); so are rows the planner itself refuses (``ModelDoesNotFit``,
``UnsupportedModel``, ...: their message is the reason). Every row ends as a prediction or a refusal.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from planner.costs.memory import memory_plan
from planner.costs.types import CostContext, EngineProfile, Parallelism
from planner.engines import load_engine_profiles
from planner.errors import PlannerError
from planner.hardware import GpuSpec, find_gpu, load_catalog
from planner.models import ModelArchitecture, ModelCatalog, load_model_catalog
from planner.serving.evaluate import evaluate
from planner.serving.types import (
    AggregatedDeployment,
    DisaggregatedDeployment,
    Evaluation,
    PoolSpec,
    ServingProblem,
)
from planner.serving.workload import Arrival, Workload, fixed_length
from planner.validation.metrics import ErrorSummary, Target, relative_error, summarize, token_bin, verdict

#: the accelerator every row ran on (``system`` = ``h100_sxm``)
BENCHMARK_GPU = "h100-sxm"
#: tokens one iteration may carry: vLLM's ``max_num_batched_tokens`` and SGLang's ``chunked_prefill_size``
#: defaults on 80 GB GPUs, TensorRT-LLM's ``max_num_tokens`` default
TOKEN_BUDGET = 8192
#: chunked prefill per engine. vLLM (V1 scheduler) and SGLang always chunk. TensorRT-LLM's LLM API default
#: is ``enable_chunked_prefill=False``, but its in-flight batching still runs a whole context in the same
#: iteration as the running generations (one fused forward), which is the planner's mixed iteration, not
#: its unchunked mode (a prefill-only iteration the streams wait through, vLLM V0); see
#: :func:`aggregated_deployment` for how the whole prompt is kept in one iteration.
#: SGLang by default (``enable_mixed_chunk`` off) runs prefill batches apart from decode batches; posed in
#: the planner's prefill-only mode its rows fit worse (TTFT −79 %, TPOT +23 % signed against −91 % and
#: +19 % posed as chunked), so chunked it stays; neither reading explains SGLang's TTFT
CHUNKED_PREFILL: Mapping[str, bool] = MappingProxyType({"vllm": True, "sglang": True, "trtllm": True})
#: engines whose scheduler does not split a prompt: the budget is raised to hold a whole prompt and the
#: decodes (TensorRT-LLM without chunked context)
WHOLE_PROMPT_ENGINES = frozenset({"trtllm"})

#: targets of the evaluate endpoint on dense aggregated rows (issue 3, section 6)
TTFT_TARGET = Target(median_fraction=0.20)
TPOT_TARGET = Target(median_fraction=0.10)
#: concurrency buckets: <=8, 9-64, >64
CONCURRENCY_EDGES = (8, 64)
#: prompt-length buckets: <=512, 513-1024, 1025-2048, 2049-4096, >4096
ISL_EDGES = (512, 1024, 2048, 4096)


class RowRefused(Exception):
    """A benchmark row that cannot be posed as a serving problem (the message says what is missing)."""


@dataclass(frozen=True, kw_only=True)
class BenchmarkResult:
    """One row: its prediction (``evaluation``) or the reason it was refused (``refusal``)."""

    row_id: str
    backend: str
    mode: str
    model: str
    #: None when the model is not in the catalog
    is_moe: bool | None
    isl: int | None
    osl: int | None
    concurrency: int | None
    measured_ttft_s: float
    measured_tpot_s: float
    problem: ServingProblem | None = None
    evaluation: Evaluation | None = None
    refusal: str | None = None

    @property
    def answered(self) -> bool:
        return self.evaluation is not None

    @property
    def density(self) -> str:
        return "unknown" if self.is_moe is None else ("MoE" if self.is_moe else "dense")

    @property
    def predicted_ttft_s(self) -> float:
        return float("nan") if self.evaluation is None else self.evaluation.ttft_s.mean

    @property
    def predicted_tpot_s(self) -> float:
        return float("nan") if self.evaluation is None else self.evaluation.tpot_s.mean

    @property
    def ttft_error_fraction(self) -> float:
        """Signed ``(predicted - measured) / measured`` of the mean TTFT (NaN when refused)."""
        return float(relative_error(self.predicted_ttft_s, self.measured_ttft_s))

    @property
    def tpot_error_fraction(self) -> float:
        return float(relative_error(self.predicted_tpot_s, self.measured_tpot_s))


# --------------------------------------------------------------------------------------------------
# row -> problem


def weight_dtype_of(row: Mapping[str, Any]) -> str:
    """The benchmark's weight format as a planner dtype (``gemm_quant_mode``, else ``precision``)."""
    mode = str(row.get("gemm_quant_mode") or row.get("precision") or "").lower()
    if mode.startswith("fp8"):
        return "fp8"
    if "fp4" in mode:
        return "fp4"
    return "bf16"


def _count(row: Mapping[str, Any], column: str) -> int:
    """A parallel degree: empty or 0 (the CSV's "not used") -> 1."""
    value = row.get(column)
    return int(value) if value else 1


def _parallelism(row: Mapping[str, Any], model: ModelArchitecture, prefix: str = "") -> Parallelism:
    par = Parallelism(tp=_count(row, f"{prefix}tp_size"), pp=_count(row, f"{prefix}pp_size"),
                      dp=_count(row, f"{prefix}attention_dp_size"), ep=_count(row, f"{prefix}moe_ep_size"))
    moe_tp, moe_ep = row.get(f"{prefix}moe_tp_size"), row.get(f"{prefix}moe_ep_size")
    if model.is_moe and moe_tp and moe_ep and moe_tp * moe_ep != par.tp * par.dp:
        raise RowRefused(
            f"{prefix}moe_tp_size × {prefix}moe_ep_size = {moe_tp} × {moe_ep} is not tp·dp = "
            f"{par.tp}·{par.dp}: an expert layout the planner cannot express (it spreads experts over "
            "tp·dp GPUs)")
    return par


def _workload(row: Mapping[str, Any]) -> Workload:
    return Workload(input_tokens=fixed_length(int(row["isl"])), output_tokens=fixed_length(int(row["osl"])),
                    arrival=Arrival(kind="closed_loop", concurrency=int(row["concurrency"])))


def aggregated_deployment(row: Mapping[str, Any], *, model: ModelArchitecture, gpu: GpuSpec,
                          chunked_prefill: Mapping[str, bool] = CHUNKED_PREFILL) -> AggregatedDeployment:
    """One replica with the row's parallel layout (see the module docstring)."""
    concurrency = int(row["concurrency"])
    backend = str(row["backend"])
    budget = TOKEN_BUDGET
    chunked = chunked_prefill.get(backend, True)
    if chunked and backend in WHOLE_PROMPT_ENGINES:
        # no chunking: a whole prompt rides in one iteration with the running decodes
        budget = max(TOKEN_BUDGET, int(row["isl"]) + concurrency)
    return AggregatedDeployment(
        gpu=gpu, parallelism=_parallelism(row, model), replicas=1,
        max_batch_size=max(int(row.get("batch_size") or 0), concurrency), token_budget=budget,
        chunked_prefill=chunked,
    )


def disaggregated_deployment(row: Mapping[str, Any], *, model: ModelArchitecture,
                             gpu: GpuSpec) -> DisaggregatedDeployment:
    """Prefill and decode pools from the ``prefill_*`` / ``decode_*`` columns."""
    missing = [c for c in ("prefill_num_workers", "decode_num_workers") if not row.get(c)]
    if missing:
        raise RowRefused(f"disaggregated row without {' and '.join(missing)}: the pool sizes are unknown")
    concurrency = int(row["concurrency"])
    pools = {}
    for name in ("prefill", "decode"):
        par = _parallelism(row, model, prefix=f"{name}_")
        workers = int(row[f"{name}_num_workers"])
        batch = int(row.get(f"{name}_batch_size") or 0) * par.dp
        if name == "decode":
            batch = max(batch, math.ceil(concurrency / workers))
        pools[name] = PoolSpec(gpu=gpu, parallelism=par, workers=workers,
                               max_batch_size=batch if batch > 0 else PoolSpec.max_batch_size,
                               token_budget=TOKEN_BUDGET)
    return DisaggregatedDeployment(prefill=pools["prefill"], decode=pools["decode"], kv_link="auto")


def benchmark_problem(row: Mapping[str, Any], *, model: ModelArchitecture, gpu: GpuSpec,
                      engines: Mapping[str, EngineProfile],
                      chunked_prefill: Mapping[str, bool] = CHUNKED_PREFILL) -> ServingProblem:
    """The serving problem a row measured.

    Raises
    ------
    RowRefused
        The row lacks a figure the problem needs.
    planner.errors.PlannerError
        The planner refuses the configuration.
    """
    if not row.get("concurrency"):
        raise RowRefused("no concurrency: the closed loop's client count is unknown (batch_size alone does "
                         "not fix it: the engine may queue requests beyond its batch)")
    if not row.get("isl") or not row.get("osl"):
        raise RowRefused("no isl/osl")
    backend = str(row["backend"])
    if backend not in engines:
        raise RowRefused(f"no engine profile for backend {backend!r}")
    weight = weight_dtype_of(row)
    if row["mode"] == "disagg":
        deployment: AggregatedDeployment | DisaggregatedDeployment = disaggregated_deployment(
            row, model=model, gpu=gpu)
    else:
        deployment = aggregated_deployment(row, model=model, gpu=gpu, chunked_prefill=chunked_prefill)
    return ServingProblem(model=model, engine=engines[backend], weight_dtype=weight,
                          kv_dtype=model.default_kv_dtype(weight), deployment=deployment,
                          workload=_workload(row))


def _measured(row: Mapping[str, Any], metric: str) -> float:
    value = row.get(f"measured_{metric}_s")
    return float("nan") if value is None else float(value)


def evaluate_row(row: Mapping[str, Any], *, models: ModelCatalog, gpu: GpuSpec,
                 engines: Mapping[str, EngineProfile],
                 chunked_prefill: Mapping[str, bool] = CHUNKED_PREFILL) -> BenchmarkResult:
    """Predict one row, or record why it is refused (never raises a ``PlannerError``)."""
    base: dict[str, Any] = dict(
        row_id=str(row["id"]), backend=str(row["backend"]), mode=str(row["mode"]), model=str(row["model"]),
        isl=row.get("isl"), osl=row.get("osl"), concurrency=row.get("concurrency"),
        measured_ttft_s=_measured(row, "ttft"), measured_tpot_s=_measured(row, "tpot"), is_moe=None,
    )
    try:
        model = models.get(str(row["model"]))
    except PlannerError as error:
        return BenchmarkResult(**base, refusal=f"{type(error).__name__}: {error.detail}")
    base["is_moe"] = model.is_moe
    if not (np.isfinite(base["measured_ttft_s"]) and np.isfinite(base["measured_tpot_s"])):
        return BenchmarkResult(**base, refusal="RowRefused: no measured TTFT or TPOT")
    try:
        problem = benchmark_problem(row, model=model, gpu=gpu, engines=engines,
                                    chunked_prefill=chunked_prefill)
    except RowRefused as error:
        return BenchmarkResult(**base, refusal=f"RowRefused: {error}")
    except PlannerError as error:
        return BenchmarkResult(**base, refusal=f"{type(error).__name__}: {error.detail}")
    try:
        evaluation = evaluate(problem)
    except PlannerError as error:
        return BenchmarkResult(**base, problem=problem, refusal=f"{type(error).__name__}: {error.detail}")
    return BenchmarkResult(**base, problem=problem, evaluation=evaluation)


def evaluate_rows(rows: Iterable[Mapping[str, Any]],
                  chunked_prefill: Mapping[str, bool] = CHUNKED_PREFILL) -> list[BenchmarkResult]:
    """:func:`evaluate_row` over ``rows`` with the built-in catalogs, in order, single-process."""
    models = load_model_catalog()
    gpu = find_gpu(load_catalog(), BENCHMARK_GPU)
    engines = load_engine_profiles()
    return [evaluate_row(row, models=models, gpu=gpu, engines=engines, chunked_prefill=chunked_prefill)
            for row in rows]


# --------------------------------------------------------------------------------------------------
# scoring


@dataclass(frozen=True, kw_only=True)
class SliceScore:
    """TTFT and TPOT errors of one slice of answered rows, and the verdicts where a target applies."""

    dimension: str
    label: str
    ttft: ErrorSummary
    tpot: ErrorSummary
    ttft_verdict: str
    tpot_verdict: str
    num_refused: int


def concurrency_bucket(concurrency: int | None) -> str:
    if concurrency is None:
        return "unknown"
    return str(token_bin(np.array([concurrency]), CONCURRENCY_EDGES)[0])


def isl_bucket(isl: int | None) -> str:
    if isl is None:
        return "unknown"
    return str(token_bin(np.array([isl]), ISL_EDGES)[0])


def group_of(result: BenchmarkResult) -> str:
    """``"dense agg"``, ``"MoE agg"``, ``"dense disagg"``, ``"MoE disagg"``."""
    return f"{result.density} {result.mode}"


#: slice dimensions: name -> key of a row
DIMENSIONS: dict[str, Any] = {
    "group": lambda r: (group_of(r),),
    "backend · mode · dense/MoE": lambda r: (r.backend, r.mode, r.density),
    "model · backend · mode": lambda r: (r.model, r.backend, r.mode),
    "group · concurrency": lambda r: (group_of(r), f"c {concurrency_bucket(r.concurrency)}"),
    "group · ISL": lambda r: (group_of(r), f"isl {isl_bucket(r.isl)}"),
    "backend · group · concurrency": lambda r: (r.backend, group_of(r),
                                                f"c {concurrency_bucket(r.concurrency)}"),
    "backend · group · ISL": lambda r: (r.backend, group_of(r), f"isl {isl_bucket(r.isl)}"),
}


def has_target(key: Sequence[Hashable]) -> bool:
    """Targets apply to slices made only of dense aggregated rows."""
    return "dense agg" in key or ("agg" in key and "dense" in key)


def score(results: Sequence[BenchmarkResult],
          dimensions: Mapping[str, Any] | None = None) -> list[SliceScore]:
    """One :class:`SliceScore` per slice of each dimension, keys in sorted order."""
    dims = DIMENSIONS if dimensions is None else dimensions
    out = []
    for name, key_of in dims.items():
        groups: dict[tuple[Hashable, ...], list[BenchmarkResult]] = {}
        for r in results:
            groups.setdefault(tuple(key_of(r)), []).append(r)
        for key in sorted(groups, key=str):
            members = groups[key]
            answered = [r for r in members if r.answered]
            ttft = summarize(np.array([r.ttft_error_fraction for r in answered], dtype=float))
            tpot = summarize(np.array([r.tpot_error_fraction for r in answered], dtype=float))
            target = has_target(key)
            out.append(SliceScore(
                dimension=name, label=" · ".join(str(k) for k in key), ttft=ttft, tpot=tpot,
                ttft_verdict=verdict(ttft, TTFT_TARGET if target else None),
                tpot_verdict=verdict(tpot, TPOT_TARGET if target else None),
                num_refused=len(members) - len(answered),
            ))
    return out


def kv_demand_fraction(result: BenchmarkResult) -> float:
    """KV tokens the closed loop holds when every request is at full length, over the KV capacity.

    ``c · (isl + osl)`` against the capacity of one aggregated replica (or ``⌈c / D⌉ · (isl + osl)``
    against one decode worker's). In steady state with random phases a sequence holds ``isl + osl/2``
    tokens on average (what ``evaluate`` assumes); clients that stay in phase (fixed lengths) all reach
    ``isl + osl`` together, so above 1 the engine must preempt or hold requests back. NaN when refused.
    """
    if result.problem is None or result.concurrency is None or result.isl is None or result.osl is None:
        return float("nan")
    problem = result.problem
    dep = problem.deployment
    if isinstance(dep, AggregatedDeployment):
        gpu, par, clients = dep.gpu, dep.parallelism, float(result.concurrency) / dep.replicas
    else:
        gpu, par = dep.decode.gpu, dep.decode.parallelism
        clients = math.ceil(result.concurrency / dep.decode.workers)
    ctx = CostContext(model=problem.model, gpu=gpu, engine=problem.engine, weight_dtype=problem.weight_dtype,
                      kv_dtype=problem.kv_dtype, parallelism=par)
    full = result.isl + result.osl
    capacity = memory_plan(ctx, max_context_tokens=full).kv_capacity_tokens
    return clients * full / capacity if capacity > 0 else float("inf")


def dense_aggregated(results: Iterable[BenchmarkResult]) -> list[BenchmarkResult]:
    """The answered rows the targets are stated on."""
    return [r for r in results if r.answered and r.mode == "agg" and r.is_moe is False]
