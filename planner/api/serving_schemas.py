"""Request and response models of ``POST /v1/evaluate``: a deployment, a workload and an optional SLO.

The constrained types come from ``planner.api.schemas``. Each choice between shapes (``deployment.mode``,
``arrival.kind``, the four forms of a length distribution) is a tagged union whose validation errors are
reported at the field's own path (``deployment.gpu``, not pydantic's ``deployment.aggregated.gpu``), so a
422 names the field the client wrote.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from planner.api.schemas import (
    _REQUEST,
    _RESPONSE,
    MAX_SAMPLES,
    MAX_TOKENS,
    BatchSize,
    CatalogId,
    Concurrency,
    FiniteFloat,
    LatencyTarget,
    ModelChoice,
    ParallelismIn,
    ParallelismOut,
    Percentile,
    RatePerS,
    Tokens,
    WorkerCount,
)

_UNION_TAG_ERRORS = ("union_tag_invalid", "union_tag_not_found")
_CORE_ERROR_TYPES = frozenset(get_args(ErrorType))


def _untag_errors(exc: ValidationError, tags: frozenset[str], discriminator: str | None) -> ValidationError:
    """The errors of ``exc`` with the union's tag dropped from each location.

    A missing or unknown tag is reported at the discriminator field itself (``deployment.mode``).
    """
    details: list[InitErrorDetails] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        if loc and loc[0] in tags:
            loc = loc[1:]
        if err["type"] in _UNION_TAG_ERRORS and discriminator is not None:
            loc = (*loc, discriminator)
        ctx = err.get("ctx")
        error_type: str | PydanticCustomError = err["type"]
        if error_type not in _CORE_ERROR_TYPES:  # one of ours: keep its rendered message and its context
            error_type = PydanticCustomError(err["type"], err["msg"], ctx)
        detail: InitErrorDetails = {"type": error_type, "loc": loc, "input": err.get("input")}
        if ctx:
            detail["ctx"] = ctx
        details.append(detail)
    return ValidationError.from_exception_data(exc.title, details)


def _untagged(tags: Collection[str], discriminator: str | None = None) -> WrapValidator:
    """Validate a tagged union as usual, then report its errors at the field's own paths."""
    tag_set = frozenset(tags)

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            raise _untag_errors(exc, tag_set, discriminator) from None

    return WrapValidator(validate)


# ----------------------------------------------------------------------------------------- deployment


class AggregatedDeploymentIn(BaseModel):
    """``replicas`` identical workers behind a load balancer, each batching prefill and decode together."""

    model_config = _REQUEST

    mode: Literal["aggregated"]
    gpu: CatalogId
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn)
    replicas: WorkerCount = 1
    max_batch_size: BatchSize | None = Field(
        None, description="Most sequences one iteration runs (vLLM max_num_seqs). Default: 256"
    )
    token_budget: Tokens | None = Field(
        None,
        description="Most tokens one iteration processes, decodes plus prefill chunks (vLLM "
        "max_num_batched_tokens). Default: 8192 with chunked prefill; without it, vLLM's "
        "max(max_model_len, 2048) with the workload's longest prompt standing in for max_model_len",
    )
    chunked_prefill: bool = Field(True, description="Split prompts longer than the budget across iterations")


class PoolIn(BaseModel):
    """One pool of a disaggregated deployment: ``workers`` identical workers."""

    model_config = _REQUEST

    gpu: CatalogId
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn)
    workers: WorkerCount = 1
    max_batch_size: BatchSize | None = Field(
        None, description="Most sequences one iteration runs. Default: 256"
    )
    token_budget: Tokens | None = Field(
        None, description="Most tokens one iteration processes. Default: 8192"
    )


class KvTransferIn(BaseModel):
    model_config = _REQUEST

    link: Literal["auto", "nvlink", "rdma", "pcie"] = Field(
        "auto",
        description="How KV caches travel from prefill to decode workers. auto: NVLink when both pools use "
        "the same GPU type and fit in one scale-up domain, else the scale-out RDMA NIC",
    )


class DisaggregatedDeploymentIn(BaseModel):
    """Separate prefill and decode pools; each request's KV cache moves from one to the other."""

    model_config = _REQUEST

    mode: Literal["disaggregated"]
    prefill: PoolIn
    decode: PoolIn
    kv_transfer: KvTransferIn = Field(default_factory=KvTransferIn)


_DEPLOYMENT_TAGS = ("aggregated", "disaggregated")
DeploymentIn = Annotated[
    AggregatedDeploymentIn | DisaggregatedDeploymentIn,
    Field(discriminator="mode"),
    _untagged(_DEPLOYMENT_TAGS, discriminator="mode"),
]


# ------------------------------------------------------------------------------------------- workload

LengthValue = Annotated[float, Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False, description="[tokens]")]
_SAMPLES_SCHEMA = {"maxItems": MAX_SAMPLES}


class LognormalLengthsIn(BaseModel):
    """A lognormal law given by its p90 and either its mean or its median [tokens]."""

    model_config = _REQUEST

    distribution: Literal["lognormal"]
    mean: LengthValue | None = None
    median: LengthValue | None = None
    p90: LengthValue

    @model_validator(mode="after")
    def _mean_or_median(self) -> LognormalLengthsIn:
        if (self.mean is None) == (self.median is None):
            field = "mean" if self.mean is None else "median"
            raise PydanticCustomError(
                "mean_or_median", "give exactly one of 'mean' and 'median' with the p90", {"field": field}
            )
        return self


class SampledLengthsIn(BaseModel):
    """Observed lengths, each equally likely (at most 100,000; more is a 413)."""

    model_config = _REQUEST

    samples: list[Tokens] = Field(min_length=1, json_schema_extra=_SAMPLES_SCHEMA)


class HistogramIn(BaseModel):
    model_config = _REQUEST

    values: list[LengthValue] = Field(
        min_length=1, json_schema_extra=_SAMPLES_SCHEMA, description="Bin centres [tokens]"
    )
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        min_length=1, json_schema_extra=_SAMPLES_SCHEMA, description="Relative frequencies, one per value"
    )

    @model_validator(mode="after")
    def _matching_weights(self) -> HistogramIn:
        if len(self.weights) != len(self.values):
            raise PydanticCustomError(
                "histogram_shape",
                "weights has {weights} entries but values has {values}: give one weight per value",
                {"field": "weights", "weights": len(self.weights), "values": len(self.values)},
            )
        if sum(self.weights) <= 0:
            raise PydanticCustomError(
                "histogram_weights", "the weights must have a positive sum", {"field": "weights"}
            )
        return self


class HistogramLengthsIn(BaseModel):
    model_config = _REQUEST

    histogram: HistogramIn


_LENGTH_FORMS: dict[str, type[BaseModel]] = {
    "distribution": LognormalLengthsIn,
    "samples": SampledLengthsIn,
    "histogram": HistogramLengthsIn,
}


def _length_form(value: Any) -> str | None:
    """Which form a length takes: the marker key of a dict, else a plain token count."""
    if isinstance(value, BaseModel):
        return next((tag for tag, model in _LENGTH_FORMS.items() if isinstance(value, model)), None)
    if isinstance(value, dict):
        return next((tag for tag in _LENGTH_FORMS if tag in value), None)
    return None if isinstance(value, list | tuple | set) else "tokens"


LengthsIn = Annotated[
    Annotated[Tokens, Tag("tokens")]
    | Annotated[LognormalLengthsIn, Tag("distribution")]
    | Annotated[SampledLengthsIn, Tag("samples")]
    | Annotated[HistogramLengthsIn, Tag("histogram")],
    Discriminator(
        _length_form,
        custom_error_type="length_form",
        custom_error_message="give a token count, {'distribution': 'lognormal', ...}, {'samples': [...]} "
        "or {'histogram': {'values': [...], 'weights': [...]}}",
    ),
    _untagged(("tokens", *_LENGTH_FORMS)),
    Field(description="Tokens per request: a fixed count, a lognormal, samples or a histogram"),
]


class ClosedLoopArrivalIn(BaseModel):
    """``concurrency`` clients, each sending its next request when its previous one completes."""

    model_config = _REQUEST

    kind: Literal["closed_loop"]
    concurrency: Concurrency


class PoissonArrivalIn(BaseModel):
    """Open-loop arrivals at ``rate_per_s`` with exponential inter-arrival times."""

    model_config = _REQUEST

    kind: Literal["poisson"]
    rate_per_s: RatePerS


class GammaArrivalIn(BaseModel):
    """Open-loop arrivals with gamma inter-arrival times of coefficient of variation ``cv`` (bursty > 1)."""

    model_config = _REQUEST

    kind: Literal["gamma"]
    rate_per_s: RatePerS
    cv: float = Field(gt=0, le=100, allow_inf_nan=False, description="Coefficient of variation of gaps")


_ARRIVAL_TAGS = ("closed_loop", "poisson", "gamma")
ArrivalIn = Annotated[
    ClosedLoopArrivalIn | PoissonArrivalIn | GammaArrivalIn,
    Field(discriminator="kind"),
    _untagged(_ARRIVAL_TAGS, discriminator="kind"),
]


class WorkloadIn(BaseModel):
    model_config = _REQUEST

    input_tokens: LengthsIn
    output_tokens: LengthsIn
    arrival: ArrivalIn
    prefix_cache_hit_fraction: float = Field(
        0.0, ge=0, lt=1, allow_inf_nan=False, description="Share of prompt tokens found in the prefix cache"
    )


class SloIn(BaseModel):
    """Latency targets; a request meets the SLO when it meets every target given."""

    model_config = _REQUEST

    ttft_s: LatencyTarget | None = None
    ttft_percentile: Percentile = 90.0
    itl_s: LatencyTarget | None = None
    itl_percentile: Percentile = 99.0


class EvaluateRequest(ModelChoice):
    """A model on a deployment under a workload: what would a benchmark measure?"""

    deployment: DeploymentIn
    workload: WorkloadIn
    slo: SloIn | None = None


# ------------------------------------------------------------------------------------------ responses


class LatencyStatsOut(BaseModel):
    """Mean and percentiles of one latency metric [s]."""

    mean: FiniteFloat
    p50: FiniteFloat
    p90: FiniteFloat
    p99: FiniteFloat


class TtftBreakdownOut(BaseModel):
    """Mean TTFT decomposed [s]."""

    queue: FiniteFloat
    prefill: FiniteFloat
    kv_transfer: FiniteFloat
    #: tokenization, scheduling and first-token delivery
    overheads: FiniteFloat


class AggregatedDeploymentOut(BaseModel):
    mode: Literal["aggregated"]
    gpu: str
    parallelism: ParallelismOut
    replicas: int
    max_batch_size: int
    token_budget: int
    chunked_prefill: bool


class PoolOut(BaseModel):
    gpu: str
    parallelism: ParallelismOut
    workers: int
    max_batch_size: int
    token_budget: int


class KvTransferEcho(BaseModel):
    #: as requested ("auto" unless given)
    link: Literal["auto", "nvlink", "rdma", "pcie"]
    #: the link the KV caches travel on once "auto" is decided
    resolved_link: Literal["nvlink", "rdma", "pcie"]


class DisaggregatedDeploymentOut(BaseModel):
    mode: Literal["disaggregated"]
    prefill: PoolOut
    decode: PoolOut
    kv_transfer: KvTransferEcho


DeploymentOut = Annotated[AggregatedDeploymentOut | DisaggregatedDeploymentOut, Field(discriminator="mode")]


class LengthSummaryOut(BaseModel):
    """A length distribution as the model holds it [tokens]."""

    kind: str
    mean: FiniteFloat
    p50: FiniteFloat
    p90: FiniteFloat
    p99: FiniteFloat
    max: FiniteFloat


class ArrivalOut(BaseModel):
    kind: Literal["closed_loop", "poisson", "gamma"]
    concurrency: int | None = None
    rate_per_s: FiniteFloat | None = None
    cv: FiniteFloat | None = None


class WorkloadOut(BaseModel):
    input_tokens: LengthSummaryOut
    output_tokens: LengthSummaryOut
    arrival: ArrivalOut
    prefix_cache_hit_fraction: FiniteFloat


class SloOut(BaseModel):
    ttft_s: FiniteFloat | None
    ttft_percentile: FiniteFloat
    itl_s: FiniteFloat | None
    itl_percentile: FiniteFloat


class MetricsOut(BaseModel):
    """What ``evaluate`` predicts for a deployment under a workload, in steady state."""

    model_config = _RESPONSE

    num_gpus: int
    ttft_s: LatencyStatsOut
    itl_s: LatencyStatsOut
    tpot_s: LatencyStatsOut
    e2e_latency_s: LatencyStatsOut
    ttft_breakdown_s: TtftBreakdownOut
    requests_per_s: FiniteFloat
    throughput_output_tokens_per_s: FiniteFloat
    throughput_output_tokens_per_s_per_gpu: FiniteFloat
    output_tokens_per_s_per_user: FiniteFloat
    utilization: dict[str, FiniteFloat] = Field(
        description="Busy fraction of each resource, 0..1: prefill_lane, decode_batch, kv_cache (aggregated); "
        "prefill_pool, decode_pool, kv_link (disaggregated)"
    )
    mean_decode_batch: FiniteFloat = Field(description="Mean running decode batch per (decode) worker")
    feasible: bool = Field(description="False when the offered load exceeds what the deployment serves")
    limiting_resource: str = Field(description="What saturates first as load grows")
    kv_transfer: dict[str, FiniteFloat] | None = Field(
        description="KV-transfer figures; null when aggregated"
    )
    slo_attainment_fraction: FiniteFloat | None = Field(
        description="Share of requests meeting the SLO; null without slo"
    )
    goodput_requests_per_s: FiniteFloat | None = Field(
        description="Requests meeting the SLO per second; null without slo"
    )
    warnings: list[str]


class EvaluateResponse(MetricsOut):
    """Predicted steady-state metrics of the deployment under the workload, and the inputs they are for."""

    model_config = _RESPONSE

    model: str
    engine: str
    weight_dtype: str
    kv_dtype: str
    deployment: DeploymentOut
    workload: WorkloadOut
    slo: SloOut | None

    mode: Literal["aggregated", "disaggregated"]
