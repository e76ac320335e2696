"""Request and response models of the plan endpoints (``/v1/plan/chunked``, ``/v1/plan/disaggregated``,
``/v1/plan``). Constrained types come from ``schemas`` and ``serving_schemas``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from planner.api.schemas import (
    _REQUEST,
    _RESPONSE,
    BatchSize,
    CatalogId,
    FiniteFloat,
    ModelChoice,
    ParallelismIn,
    ParallelismOut,
    RatePerS,
    TpDegree,
    WorkerCount,
)
from planner.api.serving_schemas import (
    MetricsOut,
    ArrivalIn,
    KvTransferIn,
    LatencyStatsOut,
    LengthsIn,
    SloIn,
    SloOut,
    TtftBreakdownOut,
)

#: most entries of a searched list (token budgets, batch limits)
MAX_CANDIDATES = 32
#: most candidate GPUs of a plan
MAX_CANDIDATE_GPUS = 8
#: largest GPU budget a plan accepts [GPUs]
MAX_TOTAL_GPUS = 4096
#: most workers per pool the disaggregated search enumerates
MAX_WORKERS_PER_POOL = 128
#: smallest and largest token budget searched [tokens]
MIN_TOKEN_BUDGET, MAX_TOKEN_BUDGET = 64, 1_048_576

TokenBudget = Annotated[int, Field(ge=MIN_TOKEN_BUDGET, le=MAX_TOKEN_BUDGET, description="[tokens]")]
GpuList = Annotated[list[CatalogId], Field(min_length=1, max_length=MAX_CANDIDATE_GPUS)]
TpList = Annotated[list[TpDegree], Field(min_length=1, max_length=7)]
PriceMap = Annotated[
    dict[str, Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]],
    Field(max_length=64, description="USD per GPU-hour by GPU id; overrides the catalog's on-demand price"),
]

_SLO_EXAMPLE = {"ttft_s": 1.0, "ttft_percentile": 90, "itl_s": 0.05, "itl_percentile": 99}
_WORKLOAD_EXAMPLE = {
    "input_tokens": {"distribution": "lognormal", "median": 1000, "p90": 3000},
    "output_tokens": 300,
}


class PlanWorkloadIn(BaseModel):
    """The workload of a plan: lengths as in evaluate; ``arrival`` is optional. An open-loop arrival's
    ``rate_per_s`` is the target load (the same as ``target_rate_per_s``) and its ``cv`` shapes the queueing;
    without it the plans maximize the load served."""

    model_config = _REQUEST

    input_tokens: LengthsIn
    output_tokens: LengthsIn
    arrival: ArrivalIn | None = None
    prefix_cache_hit_fraction: float = Field(
        0.0, ge=0, lt=1, allow_inf_nan=False, description="Share of prompt tokens found in the prefix cache"
    )


class PlanChunkedRequest(ModelChoice):
    """Which token budget (vLLM max_num_batched_tokens) and max batch size serve the most load within the
    SLO, or, at a target load, give the lowest TTFT within it."""

    model_config = _REQUEST | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-70B",
                    "gpu": "h100-sxm",
                    "parallelism": {"tp": 4},
                    "replicas": 2,
                    "workload": _WORKLOAD_EXAMPLE,
                    "slo": _SLO_EXAMPLE,
                }
            ]
        }
    }

    gpu: CatalogId
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn)
    replicas: WorkerCount = 1
    workload: PlanWorkloadIn
    slo: SloIn
    target_rate_per_s: RatePerS | None = Field(
        None,
        description="Fixed load, all replicas [requests/s]: minimize TTFT within the SLO at it. Default: "
        "the workload's arrival rate; without either, maximize the load",
    )
    token_budgets: list[TokenBudget] | None = Field(
        None,
        min_length=1,
        max_length=MAX_CANDIDATES,
        description="Budgets to search [tokens]. Default: 256, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384",
    )
    max_batch_sizes: list[BatchSize] | None = Field(
        None,
        min_length=1,
        max_length=MAX_CANDIDATES,
        description="Batch limits to search. Default: 8 to 1024",
    )


class PoolCandidatesIn(BaseModel):
    """Candidates of one pool; defaults to the request's ``gpus`` and ``tensor_parallel``."""

    model_config = _REQUEST

    gpus: GpuList | None = None
    tensor_parallel: TpList | None = None
    max_batch_size: BatchSize | None = Field(None, description="Decode pool batch limit. Default: 256")


class PlanDisaggregatedRequest(ModelChoice):
    """How many prefill and decode workers, of which GPU and tensor-parallel degree each, for a GPU budget
    (the most goodput) or a target rate (the fewest GPUs, or the lowest cost when prices are known)."""

    model_config = _REQUEST | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-70B",
                    "gpus": ["h100-sxm", "h200-sxm"],
                    "total_gpus": 16,
                    "workload": _WORKLOAD_EXAMPLE,
                    "slo": _SLO_EXAMPLE,
                }
            ]
        }
    }

    gpus: GpuList
    tensor_parallel: TpList = Field(default_factory=lambda: [1, 2, 4, 8])
    prefill: PoolCandidatesIn = Field(default_factory=PoolCandidatesIn)
    decode: PoolCandidatesIn = Field(default_factory=PoolCandidatesIn)
    total_gpus: Annotated[int, Field(ge=2, le=MAX_TOTAL_GPUS)] | None = Field(
        None, description="GPU budget [GPUs]: maximize goodput within it"
    )
    target_rate_per_s: RatePerS | None = Field(
        None,
        description="Target load [requests/s]: minimize GPUs or cost. Default: the workload's arrival rate",
    )
    workload: PlanWorkloadIn
    slo: SloIn
    kv_transfer: KvTransferIn = Field(default_factory=KvTransferIn)
    minimize: Literal["auto", "gpus", "cost"] = Field(
        "auto", description="With a target rate: auto = cost when every candidate has a price, else GPUs"
    )
    price_per_gpu_hour_usd: PriceMap | None = None
    max_workers_per_pool: Annotated[int, Field(ge=1, le=MAX_WORKERS_PER_POOL)] = 64


class PlanRequest(ModelChoice):
    """Rank deployments across modes (aggregated chunked and unchunked, disaggregated), GPUs and tensor-parallel
    degrees by an objective, for a GPU budget or a target rate."""

    model_config = _REQUEST | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-70B",
                    "gpus": ["h100-sxm", "h200-sxm", "a100-80gb-sxm", "b200"],
                    "total_gpus": 32,
                    "workload": _WORKLOAD_EXAMPLE,
                    "slo": _SLO_EXAMPLE,
                    "objective": "goodput_per_gpu",
                }
            ]
        }
    }

    gpus: GpuList
    tensor_parallel: TpList = Field(default_factory=lambda: [1, 2, 4, 8])
    modes: list[Literal["aggregated_chunked", "aggregated_unchunked", "disaggregated"]] = Field(
        default_factory=lambda: ["aggregated_chunked", "aggregated_unchunked", "disaggregated"],
        min_length=1,
        max_length=3,
    )
    total_gpus: Annotated[int, Field(ge=1, le=MAX_TOTAL_GPUS)] | None = Field(
        None, description="GPU budget [GPUs]"
    )
    target_rate_per_s: RatePerS | None = Field(
        None, description="Target load [requests/s]. Default: the workload's arrival rate"
    )
    workload: PlanWorkloadIn
    slo: SloIn
    objective: Literal["goodput_per_gpu", "cost_per_million_tokens", "gpus_needed"] = Field(
        "goodput_per_gpu",
        description="goodput_per_gpu: most goodput per GPU of the budget (fewest GPUs for a rate); "
        "cost_per_million_tokens: lowest USD per million output tokens; gpus_needed: fewest GPUs for the rate",
    )
    price_per_gpu_hour_usd: PriceMap | None = None

    @model_validator(mode="after")
    def _unique_modes(self) -> PlanRequest:
        self.modes = list(dict.fromkeys(self.modes))
        return self


# ------------------------------------------------------------------------------------------ responses


class BudgetPointOut(BaseModel):
    """One token budget of the curve, at its best batch limit."""

    model_config = _RESPONSE

    token_budget: int
    max_batch_size: int
    max_rate_per_s: FiniteFloat = Field(
        description="Most load served within the SLO, all replicas [requests/s]"
    )
    rate_per_s: FiniteFloat = Field(
        description="Where the budget is evaluated: its capacity or the target rate"
    )
    ttft_s: FiniteFloat | None = Field(description="TTFT at the SLO's percentile there [s]")
    itl_s: FiniteFloat | None = Field(description="ITL at the SLO's percentile there [s]")
    mean_itl_s: FiniteFloat | None
    throughput_output_tokens_per_s: FiniteFloat
    chunk_overhead_fraction: FiniteFloat = Field(
        description="Prefill time in chunks of this budget over one unchunked pass, minus 1"
    )
    binding_constraint: str
    feasible: bool


class PlanChunkedResponse(BaseModel):
    model_config = _RESPONSE

    status: Literal["optimal", "infeasible"]
    objective: Literal["max_rate", "min_ttft"]
    message: str
    model: str
    engine: str
    gpu: str
    parallelism: ParallelismOut
    replicas: int
    token_budget: int | None
    max_batch_size: int | None
    rate_per_s: FiniteFloat = Field(description="Rate the chosen configuration is evaluated at [requests/s]")
    binding_constraint: str
    metrics: MetricsOut | None
    curve: list[BudgetPointOut]
    slo: SloOut
    nearest_feasible_slo: SloOut | None
    assumptions: list[str]


class PoolChoiceOut(BaseModel):
    model_config = _RESPONSE

    gpu: str
    parallelism: ParallelismOut
    workers: int
    max_batch_size: int
    capacity_per_s: FiniteFloat = Field(description="The pool's SLO capacity at this size [requests/s]")
    utilization: FiniteFloat


class KvTransferLoadOut(BaseModel):
    model_config = _RESPONSE

    link: str
    bytes_per_s: FiniteFloat
    link_bandwidth_bytes_per_s: FiniteFloat
    utilization: FiniteFloat


class PlanDisaggregatedResponse(BaseModel):
    model_config = _RESPONSE

    status: Literal["optimal", "infeasible"]
    objective: Literal["max_goodput", "min_gpus", "min_cost", "min_cost_per_token"]
    message: str
    model: str
    engine: str
    prefill: PoolChoiceOut | None
    decode: PoolChoiceOut | None
    num_gpus: int
    rate_per_s: FiniteFloat
    capacity_per_s: FiniteFloat
    goodput_per_gpu_per_s: FiniteFloat
    cost_per_hour_usd: FiniteFloat | None
    limiting_pool: str
    kv_transfer: KvTransferLoadOut | None
    metrics: MetricsOut | None
    binding_constraints: list[str]
    slo: SloOut
    nearest_feasible_slo: SloOut | None
    assumptions: list[str]
    alternatives: list[dict[str, str | int | float]]


class ConfigurationOut(BaseModel):
    model_config = _RESPONSE

    rank: int
    mode: Literal["aggregated_chunked", "aggregated_unchunked", "disaggregated"]
    label: str
    num_gpus: int
    rate_per_s: FiniteFloat
    capacity_per_s: FiniteFloat
    goodput_per_gpu_per_s: FiniteFloat
    throughput_output_tokens_per_s_per_gpu: FiniteFloat
    output_tokens_per_s_per_user: FiniteFloat
    cost_per_hour_usd: FiniteFloat | None
    cost_per_million_output_tokens_usd: FiniteFloat | None
    binding_constraint: str
    gpu: str | None = None
    parallelism: ParallelismOut | None = None
    replicas: int | None = None
    token_budget: int | None = None
    max_batch_size: int | None = None
    prefill_gpu: str | None = None
    prefill_parallelism: ParallelismOut | None = None
    prefill_workers: int | None = None
    decode_gpu: str | None = None
    decode_parallelism: ParallelismOut | None = None
    decode_workers: int | None = None
    kv_link: str | None = None
    verified: bool = Field(description="Checked by a full evaluation at rate_per_s (then metrics is set)")
    metrics: MetricsOut | None = None


class FrontierPointOut(BaseModel):
    model_config = _RESPONSE

    throughput_output_tokens_per_s_per_gpu: FiniteFloat
    output_tokens_per_s_per_user: FiniteFloat
    mode: str
    label: str


class PlanResponse(BaseModel):
    model_config = _RESPONSE

    status: Literal["optimal", "infeasible"]
    objective: Literal["goodput_per_gpu", "cost_per_million_tokens", "gpus_needed"]
    recommendation: str
    reasons: list[str]
    model: str
    engine: str
    configurations: list[ConfigurationOut]
    pareto_frontier: list[FrontierPointOut]
    binding_constraints: list[str]
    slo: SloOut
    nearest_feasible_slo: SloOut | None
    assumptions: list[str]
    skipped: list[str]
