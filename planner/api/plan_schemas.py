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
    ArrivalIn,
    KvTransferIn,
    LengthsIn,
    MetricsOut,
    SloIn,
    SloOut,
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
_GPUS = "Candidate catalog GPU ids (h100-sxm, ...), at most 8"
_TENSOR_PARALLEL = "Candidate tensor-parallel degrees of one worker"
_PRICES = "USD per GPU-hour by GPU id [USD/h]; overrides the catalog's on-demand price"
_PLAN_SLO = "The latency targets every candidate must meet"
_PLAN_WORKLOAD = "Prompt and output lengths, and optionally the arrival process (the target load)"
_STATUS = "optimal: the answer meets the SLO; infeasible: nothing searched does (see binding constraints)"
_NEAREST = "The closest SLO that something searched meets, when this one is infeasible; else null"
_ASSUMPTIONS = "What the search assumed or defaulted, in words"
PriceMap = Annotated[
    dict[str, Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]],
    Field(max_length=64, description=_PRICES),
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

    input_tokens: LengthsIn = Field(
        description="Prompt length per request [tokens]: a fixed count, a lognormal, samples or a histogram"
    )
    output_tokens: LengthsIn = Field(
        description="Generated tokens per request [tokens]: a fixed count, a lognormal, samples or a "
        "histogram"
    )
    arrival: ArrivalIn | None = Field(
        None,
        description="Optional: an open-loop arrival's rate_per_s is the target load, its cv shapes queueing",
    )
    prefix_cache_hit_fraction: float = Field(
        0.0, ge=0, lt=1, allow_inf_nan=False,
        description="Share of prompt tokens found in the prefix cache, 0..1 (below 1)",
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

    gpu: CatalogId = Field(description="Catalog GPU id of every replica (h100-sxm, ...)")
    parallelism: ParallelismIn = Field(
        default_factory=ParallelismIn, description="How one replica splits the model: tp, pp, dp, ep"
    )
    replicas: WorkerCount = Field(1, description="Identical replicas behind the load balancer [workers]")
    workload: PlanWorkloadIn = Field(description=_PLAN_WORKLOAD)
    slo: SloIn = Field(description=_PLAN_SLO)
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
        description="Batch limits to search [sequences]. Default: 8 to 1024",
    )


class PoolCandidatesIn(BaseModel):
    """Candidates of one pool; defaults to the request's ``gpus`` and ``tensor_parallel``."""

    model_config = _REQUEST

    gpus: GpuList | None = Field(
        None, description="Candidate GPU ids of this pool; default: the request's gpus"
    )
    tensor_parallel: TpList | None = Field(
        None, description="Candidate tensor-parallel degrees of this pool; default: the request's"
    )
    max_batch_size: BatchSize | None = Field(
        None, description="Decode pool batch limit [sequences]. Default: 256"
    )


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

    gpus: GpuList = Field(description=_GPUS + ", for both pools unless a pool gives its own")
    tensor_parallel: TpList = Field(default_factory=lambda: [1, 2, 4, 8], description=_TENSOR_PARALLEL)
    prefill: PoolCandidatesIn = Field(
        default_factory=PoolCandidatesIn, description="Candidates of the prefill pool"
    )
    decode: PoolCandidatesIn = Field(
        default_factory=PoolCandidatesIn, description="Candidates of the decode pool"
    )
    total_gpus: Annotated[int, Field(ge=2, le=MAX_TOTAL_GPUS)] | None = Field(
        None, description="GPU budget [GPUs]: maximize goodput within it"
    )
    target_rate_per_s: RatePerS | None = Field(
        None,
        description="Target load [requests/s]: minimize GPUs or cost. Default: the workload's arrival rate",
    )
    workload: PlanWorkloadIn = Field(description=_PLAN_WORKLOAD)
    slo: SloIn = Field(description=_PLAN_SLO)
    kv_transfer: KvTransferIn = Field(
        default_factory=KvTransferIn, description="The link the KV caches travel on"
    )
    minimize: Literal["auto", "gpus", "cost"] = Field(
        "auto", description="With a target rate: auto = cost when every candidate has a price, else GPUs"
    )
    price_per_gpu_hour_usd: PriceMap | None = Field(None, description=_PRICES)
    max_workers_per_pool: Annotated[int, Field(ge=1, le=MAX_WORKERS_PER_POOL)] = Field(
        64, description="Most workers per pool the search enumerates [workers]"
    )


class PlanRequest(ModelChoice):
    """Rank deployments across modes (aggregated chunked and unchunked, disaggregated), GPUs and
    tensor-parallel degrees by an objective, for a GPU budget or a target rate."""

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

    gpus: GpuList = Field(description=_GPUS)
    tensor_parallel: TpList = Field(default_factory=lambda: [1, 2, 4, 8], description=_TENSOR_PARALLEL)
    modes: list[Literal["aggregated_chunked", "aggregated_unchunked", "disaggregated"]] = Field(
        default_factory=lambda: ["aggregated_chunked", "aggregated_unchunked", "disaggregated"],
        min_length=1,
        max_length=3,
        description="Serving modes to compare: aggregated with or without chunked prefill, disaggregated",
    )
    total_gpus: Annotated[int, Field(ge=1, le=MAX_TOTAL_GPUS)] | None = Field(
        None, description="GPU budget [GPUs]"
    )
    target_rate_per_s: RatePerS | None = Field(
        None, description="Target load [requests/s]. Default: the workload's arrival rate"
    )
    workload: PlanWorkloadIn = Field(description=_PLAN_WORKLOAD)
    slo: SloIn = Field(description=_PLAN_SLO)
    objective: Literal["goodput_per_gpu", "cost_per_million_tokens", "gpus_needed"] = Field(
        "goodput_per_gpu",
        description="goodput_per_gpu: most goodput per GPU of the budget (fewest GPUs for a rate); "
        "cost_per_million_tokens: lowest USD per million output tokens; gpus_needed: fewest GPUs for the "
        "rate",
    )
    price_per_gpu_hour_usd: PriceMap | None = Field(None, description=_PRICES)

    @model_validator(mode="after")
    def _unique_modes(self) -> PlanRequest:
        self.modes = list(dict.fromkeys(self.modes))
        return self


# ------------------------------------------------------------------------------------------ responses


class BudgetPointOut(BaseModel):
    """One token budget of the curve, at its best batch limit."""

    model_config = _RESPONSE

    token_budget: int = Field(description="The budget: most tokens one iteration processes [tokens]")
    max_batch_size: int = Field(description="Its best batch limit [sequences]")
    max_rate_per_s: FiniteFloat = Field(
        description="Most load served within the SLO, all replicas [requests/s]"
    )
    rate_per_s: FiniteFloat = Field(
        description="Where the budget is evaluated: its capacity or the target rate [requests/s]"
    )
    ttft_s: FiniteFloat | None = Field(description="TTFT at the SLO's percentile there [s]")
    itl_s: FiniteFloat | None = Field(description="ITL at the SLO's percentile there [s]")
    mean_itl_s: FiniteFloat | None = Field(
        description="Mean ITL there [s]; null when the rate is not sustained"
    )
    throughput_output_tokens_per_s: FiniteFloat = Field(
        description="Output tokens generated per second there, all replicas [tokens/s]"
    )
    chunk_overhead_fraction: FiniteFloat = Field(
        description="Prefill time of the mean prompt in chunks of this budget over one unchunked pass, "
        "minus 1, in 0..∞ (0 = no overhead)"
    )
    binding_constraint: str = Field(
        description="What stops more load: ttft, itl, prefill_saturation or batch_capacity; "
        "ttft_at_zero_load or itl_at_zero_load when not even a lone request meets the SLO"
    )
    feasible: bool = Field(description="Whether this budget meets the SLO at some load (at the target rate)")


class PlanChunkedResponse(BaseModel):
    """The chosen token budget and batch limit, their predicted metrics, and the whole budget curve."""

    model_config = _RESPONSE

    status: Literal["optimal", "infeasible"] = Field(description=_STATUS)
    objective: Literal["max_rate", "min_ttft"] = Field(
        description="max_rate: the most load within the SLO; min_ttft: the lowest TTFT at the target rate"
    )
    message: str = Field(description="The answer in one sentence")
    model: str = Field(description="Catalog id of the model, or inline for a model_config")
    engine: str = Field(description="The engine profile applied")
    gpu: str = Field(description="Catalog GPU id of every replica")
    parallelism: ParallelismOut = Field(description="The parallel layout of one replica")
    replicas: int = Field(description="Identical replicas [workers]")
    token_budget: int | None = Field(description="The chosen budget [tokens]; null when infeasible")
    max_batch_size: int | None = Field(description="The chosen batch limit [sequences]; null when infeasible")
    rate_per_s: FiniteFloat = Field(description="Rate the chosen configuration is evaluated at [requests/s]")
    binding_constraint: str = Field(description="What stops more load at the chosen budget (as in the curve)")
    metrics: MetricsOut | None = Field(
        description="evaluate's prediction at rate_per_s; null when infeasible"
    )
    curve: list[BudgetPointOut] = Field(description="Every budget searched, each at its best batch limit")
    slo: SloOut = Field(description="The SLO, after defaults")
    nearest_feasible_slo: SloOut | None = Field(description=_NEAREST)
    assumptions: list[str] = Field(description=_ASSUMPTIONS)


class PoolChoiceOut(BaseModel):
    """The chosen size and shape of one pool."""

    model_config = _RESPONSE

    gpu: str = Field(description="Catalog GPU id of the pool's workers")
    parallelism: ParallelismOut = Field(description="The parallel layout of one worker")
    workers: int = Field(description="Workers in the pool [workers]")
    max_batch_size: int = Field(description="Most sequences one iteration runs [sequences]")
    capacity_per_s: FiniteFloat = Field(description="The pool's SLO capacity at this size [requests/s]")
    utilization: FiniteFloat = Field(description="The pool's busy fraction at the operating rate, 0..1")


class KvTransferLoadOut(BaseModel):
    """The KV-transfer traffic at the operating rate against the link's bandwidth."""

    model_config = _RESPONSE

    link: str = Field(description="nvlink, rdma or pcie")
    bytes_per_s: FiniteFloat = Field(
        description="KV-cache traffic from the prefill to the decode pool [bytes/s]"
    )
    link_bandwidth_bytes_per_s: FiniteFloat = Field(
        description="What the link carries from all prefill workers [bytes/s]"
    )
    utilization: FiniteFloat = Field(description="bytes_per_s / link_bandwidth_bytes_per_s, 0..1")


class PlanDisaggregatedResponse(BaseModel):
    """The chosen prefill and decode pools, their predicted metrics, the KV-transfer load and what limits."""

    model_config = _RESPONSE

    status: Literal["optimal", "infeasible"] = Field(description=_STATUS)
    objective: Literal["max_goodput", "min_gpus", "min_cost", "min_cost_per_token"] = Field(
        description="max_goodput within total_gpus; at a target rate min_gpus or min_cost (USD per hour), or "
        "min_cost_per_token"
    )
    message: str = Field(description="The answer in one sentence")
    model: str = Field(description="Catalog id of the model, or inline for a model_config")
    engine: str = Field(description="The engine profile applied")
    prefill: PoolChoiceOut | None = Field(description="The prefill pool; null when infeasible")
    decode: PoolChoiceOut | None = Field(description="The decode pool; null when infeasible")
    num_gpus: int = Field(description="GPUs of both pools [GPUs]")
    rate_per_s: FiniteFloat = Field(description="The rate the chosen pools are evaluated at [requests/s]")
    capacity_per_s: FiniteFloat = Field(
        description="The most load the chosen pools serve within the SLO [requests/s]"
    )
    goodput_per_gpu_per_s: FiniteFloat = Field(description="rate_per_s / num_gpus [requests/s per GPU]")
    cost_per_hour_usd: FiniteFloat | None = Field(
        description="Price of the GPUs [USD/h]; null when a GPU has no price"
    )
    limiting_pool: str = Field(description="The pool that runs out first: prefill, decode or kv_link (none)")
    kv_transfer: KvTransferLoadOut | None = Field(description="The KV-transfer load; null when infeasible")
    metrics: MetricsOut | None = Field(
        description="evaluate's prediction at rate_per_s; null when infeasible"
    )
    binding_constraints: list[str] = Field(description="Why nothing meets the SLO; empty when optimal")
    slo: SloOut = Field(description="The SLO, after defaults")
    nearest_feasible_slo: SloOut | None = Field(description=_NEAREST)
    assumptions: list[str] = Field(description=_ASSUMPTIONS)
    alternatives: list[dict[str, str | int | float]] = Field(
        description="The next-best pool splits: GPU, tp and workers of each pool, capacity [requests/s], GPUs"
    )


class ConfigurationOut(BaseModel):
    """One ranked configuration: a mode, GPU and layout, its load within the SLO and what it costs."""

    model_config = _RESPONSE

    rank: int = Field(description="Position by the objective, from 1")
    mode: Literal["aggregated_chunked", "aggregated_unchunked", "disaggregated"] = Field(
        description="aggregated_chunked, aggregated_unchunked or disaggregated"
    )
    label: str = Field(description="A short name, e.g. aggregated chunked 8× b200 tp4, budget 1024")
    num_gpus: int = Field(description="GPUs of the configuration [GPUs]")
    rate_per_s: FiniteFloat = Field(
        description="Where it is evaluated: its SLO capacity, or the target rate [requests/s]"
    )
    capacity_per_s: FiniteFloat = Field(description="The most load it serves within the SLO [requests/s]")
    goodput_per_gpu_per_s: FiniteFloat = Field(description="rate_per_s / num_gpus [requests/s per GPU]")
    throughput_output_tokens_per_s_per_gpu: FiniteFloat = Field(
        description="Output tokens per second per GPU at rate_per_s [tokens/s per GPU]"
    )
    output_tokens_per_s_per_user: FiniteFloat = Field(
        description="1 / mean ITL at the operating rate: the decode speed one user sees [tokens/s]"
    )
    cost_per_hour_usd: FiniteFloat | None = Field(
        description="Price of its GPUs [USD/h]; null when a GPU has no price"
    )
    cost_per_million_output_tokens_usd: FiniteFloat | None = Field(
        description="GPU cost of a million output tokens at rate_per_s [USD]; null when a GPU has no price"
    )
    binding_constraint: str = Field(description="What stops more load: the SLO target or resource that binds")
    gpu: str | None = Field(None, description="Catalog GPU id (aggregated); null when disaggregated")
    parallelism: ParallelismOut | None = Field(None, description="One replica's layout (aggregated)")
    replicas: int | None = Field(None, description="Identical replicas (aggregated) [workers]")
    token_budget: int | None = Field(
        None, description="Most tokens one iteration processes (aggregated) [tokens]"
    )
    max_batch_size: int | None = Field(None, description="Most sequences one iteration runs [sequences]")
    prefill_gpu: str | None = Field(None, description="Catalog GPU id of the prefill pool (disaggregated)")
    prefill_parallelism: ParallelismOut | None = Field(
        None, description="One prefill worker's layout (disaggregated)"
    )
    prefill_workers: int | None = Field(None, description="Prefill workers (disaggregated) [workers]")
    decode_gpu: str | None = Field(None, description="Catalog GPU id of the decode pool (disaggregated)")
    decode_parallelism: ParallelismOut | None = Field(
        None, description="One decode worker's layout (disaggregated)"
    )
    decode_workers: int | None = Field(None, description="Decode workers (disaggregated) [workers]")
    kv_link: str | None = Field(
        None, description="The KV-transfer link (disaggregated): nvlink, rdma or pcie"
    )
    verified: bool = Field(description="Checked by a full evaluation at rate_per_s (then metrics is set)")
    metrics: MetricsOut | None = Field(
        None, description="evaluate's prediction at rate_per_s when verified; else null"
    )


class FrontierPointOut(BaseModel):
    """A configuration on the Pareto frontier of throughput per GPU against speed per user."""

    model_config = _RESPONSE

    throughput_output_tokens_per_s_per_gpu: FiniteFloat = Field(
        description="Output tokens per second per GPU [tokens/s per GPU]"
    )
    output_tokens_per_s_per_user: FiniteFloat = Field(
        description="Decode speed one user sees, 1 / mean ITL [tokens/s]"
    )
    mode: str = Field(description="aggregated_chunked, aggregated_unchunked or disaggregated")
    label: str = Field(description="The configuration's short name")


class PlanResponse(BaseModel):
    """Configurations ranked across modes, GPUs and layouts, the Pareto frontier, and a recommendation."""

    model_config = _RESPONSE

    status: Literal["optimal", "infeasible"] = Field(description=_STATUS)
    objective: Literal["goodput_per_gpu", "cost_per_million_tokens", "gpus_needed"] = Field(
        description="What the configurations are ranked by, as requested"
    )
    recommendation: str = Field(description="The best configuration and why, in one sentence")
    reasons: list[str] = Field(description="For each mode, its best configuration and what binds it")
    model: str = Field(description="Catalog id of the model, or inline for a model_config")
    engine: str = Field(description="The engine profile applied")
    configurations: list[ConfigurationOut] = Field(
        description="Ranked by the objective; the top ones verified by a full evaluation"
    )
    pareto_frontier: list[FrontierPointOut] = Field(
        description="Configurations no other beats on both throughput per GPU and speed per user"
    )
    binding_constraints: list[str] = Field(description="Why nothing meets the SLO; empty when optimal")
    slo: SloOut = Field(description="The SLO, after defaults")
    nearest_feasible_slo: SloOut | None = Field(description=_NEAREST)
    assumptions: list[str] = Field(description=_ASSUMPTIONS)
    skipped: list[str] = Field(description="Candidates left out, and why (the model does not fit, ...)")
