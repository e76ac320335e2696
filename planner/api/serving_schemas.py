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
    _PARALLELISM,
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

#: the ``parallelism`` of a deployment's worker
_WORKER_PARALLELISM = _PARALLELISM + "; the GPUs of a worker hold one copy of the model"
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

    mode: Literal["aggregated"] = Field(description="aggregated: prefill and decode share every worker")
    gpu: CatalogId = Field(description="Catalog GPU id of every worker (h100-sxm, mi300x, ...)")
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn, description=_WORKER_PARALLELISM)
    replicas: WorkerCount = Field(1, description="Identical workers behind the load balancer [workers]")
    max_batch_size: BatchSize | None = Field(
        None, description="Most sequences one iteration runs (vLLM max_num_seqs) [sequences]. Default: 256"
    )
    token_budget: Tokens | None = Field(
        None,
        description="Most tokens one iteration processes, decodes plus prefill chunks (vLLM "
        "max_num_batched_tokens) [tokens]. Default: 8192 with chunked prefill; without it, vLLM's "
        "max(max_model_len, 2048) with the workload's longest prompt standing in for max_model_len",
    )
    chunked_prefill: bool = Field(True, description="Split prompts longer than the budget across iterations")


class PoolIn(BaseModel):
    """One pool of a disaggregated deployment: ``workers`` identical workers."""

    model_config = _REQUEST

    gpu: CatalogId = Field(description="Catalog GPU id of the pool's workers (h100-sxm, mi300x, ...)")
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn, description=_WORKER_PARALLELISM)
    workers: WorkerCount = Field(1, description="Identical workers in the pool [workers]")
    max_batch_size: BatchSize | None = Field(
        None,
        description="Most sequences one iteration runs [sequences]; in the prefill pool, the most prompts "
        "one pass takes (above 1 its workers prefill every waiting prompt in one pass, up to the token "
        "budget). Default: 256",
    )
    token_budget: Tokens | None = Field(
        None, description="Most tokens one iteration processes [tokens]. Default: 8192"
    )


class KvTransferIn(BaseModel):
    """How the KV caches of a disaggregated deployment move from the prefill to the decode pool."""

    model_config = _REQUEST

    link: Literal["auto", "nvlink", "rdma", "pcie"] = Field(
        "auto",
        description="How KV caches travel from prefill to decode workers. auto: NVLink when both pools use "
        "the same GPU type and fit in one scale-up domain, else the scale-out RDMA NIC",
    )


class DisaggregatedDeploymentIn(BaseModel):
    """Separate prefill and decode pools; each request's KV cache moves from one to the other."""

    model_config = _REQUEST

    mode: Literal["disaggregated"] = Field(
        description="disaggregated: a prefill pool and a decode pool, the KV cache moving between them"
    )
    prefill: PoolIn = Field(description="The pool that runs the prompts' prefill passes")
    decode: PoolIn = Field(description="The pool that generates the output tokens")
    kv_transfer: KvTransferIn = Field(
        default_factory=KvTransferIn, description="The link the KV caches travel on"
    )


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

    distribution: Literal["lognormal"] = Field(description="lognormal: the only parametric law offered")
    mean: LengthValue | None = Field(None, description="Mean length [tokens]; give it or the median")
    median: LengthValue | None = Field(None, description="Median length [tokens]; give it or the mean")
    p90: LengthValue = Field(description="90th-percentile length, above the median [tokens]")

    @model_validator(mode="after")
    def _mean_or_median(self) -> LognormalLengthsIn:
        if (self.mean is None) == (self.median is None):
            field = "mean" if self.mean is None else "median"
            raise PydanticCustomError(
                "mean_or_median", "give exactly one of 'mean' and 'median' with the p90", {"field": field}
            )
        return self


class SampledLengthsIn(BaseModel):
    """Observed lengths, each equally likely (at most 100,000; more is a 413). Beyond 256 distinct lengths
    the model holds them in 256 groups, finer towards the long end, each at its mean (the mean and the
    longest length are kept exactly); the response's ``workload`` echo shows the law as held."""

    model_config = _REQUEST

    samples: list[Tokens] = Field(
        min_length=1, json_schema_extra=_SAMPLES_SCHEMA, description="Observed lengths [tokens]"
    )


class HistogramIn(BaseModel):
    """Lengths as a histogram: bin centres and their relative frequencies."""

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
    """Lengths given by a histogram (at most 100,000 bins; more is a 413). Beyond 256 bins the model holds
    them in 256 groups, finer towards the long end, each at its mean (the mean and the longest length are
    kept exactly); the response's ``workload`` echo shows the law as held."""

    model_config = _REQUEST

    histogram: HistogramIn = Field(description="The bins: values and one weight per value")


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
    Field(description="Tokens per request [tokens]: a fixed count, a lognormal, samples or a histogram"),
]


class ClosedLoopArrivalIn(BaseModel):
    """``concurrency`` clients, each sending its next request when its previous one completes."""

    model_config = _REQUEST

    kind: Literal["closed_loop"] = Field(
        description="closed_loop: a fixed number of clients, as benchmarks run"
    )
    concurrency: Concurrency


class PoissonArrivalIn(BaseModel):
    """Open-loop arrivals at ``rate_per_s`` with exponential inter-arrival times."""

    model_config = _REQUEST

    kind: Literal["poisson"] = Field(description="poisson: open-loop, exponential gaps")
    rate_per_s: RatePerS = Field(description="Arrival rate, all replicas together [requests/s]")


class GammaArrivalIn(BaseModel):
    """Open-loop arrivals with gamma inter-arrival times of coefficient of variation ``cv`` (bursty > 1)."""

    model_config = _REQUEST

    kind: Literal["gamma"] = Field(description="gamma: open-loop, gamma-distributed gaps")
    rate_per_s: RatePerS = Field(description="Arrival rate, all replicas together [requests/s]")
    cv: float = Field(
        gt=0, le=100, allow_inf_nan=False,
        description="Coefficient of variation of the gaps (1 = Poisson, above 1 = bursty) [×]",
    )


_INPUT_TOKENS = "Prompt length per request [tokens]: a fixed count, a lognormal, samples or a histogram"
_OUTPUT_TOKENS = "Generated tokens per request [tokens]: a fixed count, a lognormal, samples or a histogram"
_ARRIVAL = "How requests arrive: closed_loop (concurrency), poisson or gamma (rate_per_s)"
_PREFIX_HIT = "Share of prompt tokens found in the prefix cache, 0..1 (below 1)"

_ARRIVAL_TAGS = ("closed_loop", "poisson", "gamma")
ArrivalIn = Annotated[
    ClosedLoopArrivalIn | PoissonArrivalIn | GammaArrivalIn,
    Field(discriminator="kind"),
    _untagged(_ARRIVAL_TAGS, discriminator="kind"),
]


class WorkloadIn(BaseModel):
    """What the clients send: prompt and output lengths and how the requests arrive."""

    model_config = _REQUEST

    input_tokens: LengthsIn = Field(description=_INPUT_TOKENS)
    output_tokens: LengthsIn = Field(description=_OUTPUT_TOKENS)
    arrival: ArrivalIn = Field(description=_ARRIVAL)
    prefix_cache_hit_fraction: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False, description=_PREFIX_HIT)


class SloIn(BaseModel):
    """Latency targets; a request meets the SLO when it meets every target given."""

    model_config = _REQUEST

    ttft_s: LatencyTarget | None = Field(None, description="Time-to-first-token target [s]; null: none")
    ttft_percentile: Percentile = Field(
        90.0, description="Percentile the TTFT target applies to, in (0, 100)"
    )
    itl_s: LatencyTarget | None = Field(None, description="Inter-token latency target [s]; null: none")
    itl_percentile: Percentile = Field(99.0, description="Percentile the ITL target applies to, in (0, 100)")


class EvaluateRequest(ModelChoice):
    """A model on a deployment under a workload: what would a benchmark measure?"""

    model_config = _REQUEST | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-8B",
                    "deployment": {
                        "mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1}, "replicas": 2
                    },
                    "workload": {
                        "input_tokens": {"distribution": "lognormal", "median": 1000, "p90": 3000},
                        "output_tokens": {"distribution": "lognormal", "median": 200, "p90": 600},
                        "arrival": {"kind": "poisson", "rate_per_s": 8},
                    },
                    "slo": {"ttft_s": 0.5, "ttft_percentile": 90, "itl_s": 0.05, "itl_percentile": 99},
                }
            ]
        }
    }

    deployment: DeploymentIn = Field(
        description="Where it runs: aggregated (replicas of one worker) or disaggregated (prefill and "
        "decode pools)"
    )
    workload: WorkloadIn = Field(description="What the clients send, and how often")
    slo: SloIn | None = Field(
        None, description="Latency targets; with them the answer includes SLO attainment"
    )


# ------------------------------------------------------------------------------------------ responses


class LatencyStatsOut(BaseModel):
    """Mean and percentiles of one latency metric [s]."""

    mean: FiniteFloat = Field(description="Mean [s]")
    p50: FiniteFloat = Field(description="Median [s]")
    p90: FiniteFloat = Field(description="90th percentile [s]")
    p99: FiniteFloat = Field(description="99th percentile [s]")


class TtftBreakdownOut(BaseModel):
    """Mean TTFT decomposed [s]."""

    queue: FiniteFloat = Field(description="Waiting for the prefill lane or a prefill worker [s]")
    prefill: FiniteFloat = Field(description="Computing the prompt, every chunk's iteration included [s]")
    kv_transfer: FiniteFloat = Field(
        description="KV transfer not hidden behind the prefill; 0 when aggregated [s]"
    )
    #: tokenization, scheduling and first-token delivery
    overheads: FiniteFloat = Field(
        description="The engine's front-end time: tokenization, scheduling and first-token delivery [s]"
    )


class AggregatedDeploymentOut(BaseModel):
    """An aggregated deployment, after defaults were applied."""

    mode: Literal["aggregated"] = Field(description="aggregated: prefill and decode share every worker")
    gpu: str = Field(description="Catalog GPU id of every worker")
    parallelism: ParallelismOut = Field(description="The parallel layout of one worker")
    replicas: int = Field(description="Identical workers behind the load balancer [workers]")
    max_batch_size: int = Field(description="Most sequences one iteration runs [sequences]")
    token_budget: int = Field(description="Most tokens one iteration processes [tokens]")
    chunked_prefill: bool = Field(
        description="Whether prompts longer than the budget are split across iterations"
    )


class PoolOut(BaseModel):
    """One pool of a disaggregated deployment, after defaults were applied."""

    gpu: str = Field(description="Catalog GPU id of the pool's workers")
    parallelism: ParallelismOut = Field(description="The parallel layout of one worker")
    workers: int = Field(description="Identical workers in the pool [workers]")
    max_batch_size: int = Field(description="Most sequences one iteration runs [sequences]")
    token_budget: int = Field(description="Most tokens one iteration processes [tokens]")


class KvTransferEcho(BaseModel):
    """The KV-transfer link as requested and as decided."""

    #: as requested ("auto" unless given)
    link: Literal["auto", "nvlink", "rdma", "pcie"] = Field(description='As requested ("auto" unless given)')
    #: the link the KV caches travel on once "auto" is decided
    resolved_link: Literal["nvlink", "rdma", "pcie"] = Field(
        description='The link the KV caches travel on once "auto" is decided'
    )


class DisaggregatedDeploymentOut(BaseModel):
    """A disaggregated deployment, after defaults were applied."""

    mode: Literal["disaggregated"] = Field(description="disaggregated: separate prefill and decode pools")
    prefill: PoolOut = Field(description="The prefill pool")
    decode: PoolOut = Field(description="The decode pool")
    kv_transfer: KvTransferEcho = Field(description="The link between them")


DeploymentOut = Annotated[AggregatedDeploymentOut | DisaggregatedDeploymentOut, Field(discriminator="mode")]


class LengthSummaryOut(BaseModel):
    """A length distribution as the model holds it [tokens]."""

    kind: str = Field(description="The form it was given in: fixed, lognormal, samples or histogram")
    mean: FiniteFloat = Field(description="Mean [tokens]")
    p50: FiniteFloat = Field(description="Median [tokens]")
    p90: FiniteFloat = Field(description="90th percentile [tokens]")
    p99: FiniteFloat = Field(description="99th percentile [tokens]")
    max: FiniteFloat = Field(description="Longest length the model considers [tokens]")


class ArrivalOut(BaseModel):
    """The arrival process, as requested."""

    kind: Literal["closed_loop", "poisson", "gamma"] = Field(description="closed_loop, poisson or gamma")
    concurrency: int | None = Field(None, description="Closed-loop clients; null when open-loop [clients]")
    rate_per_s: FiniteFloat | None = Field(
        None, description="Open-loop arrival rate; null for a closed loop [requests/s]"
    )
    cv: FiniteFloat | None = Field(
        None, description="Coefficient of variation of the gaps; null unless gamma [×]"
    )


class WorkloadOut(BaseModel):
    """The workload as the model holds it."""

    input_tokens: LengthSummaryOut = Field(description="Prompt lengths [tokens]")
    output_tokens: LengthSummaryOut = Field(description="Generated tokens per request [tokens]")
    arrival: ArrivalOut = Field(description="How requests arrive")
    prefix_cache_hit_fraction: FiniteFloat = Field(
        description="Share of prompt tokens found in the prefix cache, 0..1"
    )


class SloOut(BaseModel):
    """Latency targets, after defaults were applied."""

    ttft_s: FiniteFloat | None = Field(description="Time-to-first-token target [s]; null: none")
    ttft_percentile: FiniteFloat = Field(description="Percentile the TTFT target applies to, in (0, 100)")
    itl_s: FiniteFloat | None = Field(description="Inter-token latency target [s]; null: none")
    itl_percentile: FiniteFloat = Field(description="Percentile the ITL target applies to, in (0, 100)")


class MetricsOut(BaseModel):
    """What ``evaluate`` predicts for a deployment under a workload, in steady state."""

    model_config = _RESPONSE

    num_gpus: int = Field(description="GPUs of the whole deployment [GPUs]")
    ttft_s: LatencyStatsOut = Field(
        description="Time to first token, queueing and front-end time included [s]"
    )
    itl_s: LatencyStatsOut = Field(description="Inter-token latency: the gaps between a request's tokens [s]")
    tpot_s: LatencyStatsOut = Field(
        description="Time per output token after the first, per request (as benchmarks report it) [s]"
    )
    e2e_latency_s: LatencyStatsOut = Field(description="From arrival to the last token [s]")
    ttft_breakdown_s: TtftBreakdownOut = Field(description="The mean TTFT decomposed [s]")
    requests_per_s: FiniteFloat = Field(description="Requests served per second, all replicas [requests/s]")
    throughput_output_tokens_per_s: FiniteFloat = Field(
        description="Output tokens generated per second, all replicas [tokens/s]"
    )
    throughput_output_tokens_per_s_per_gpu: FiniteFloat = Field(
        description="throughput_output_tokens_per_s / num_gpus [tokens/s per GPU]"
    )
    output_tokens_per_s_per_user: FiniteFloat = Field(
        description="Decode speed one request sees, 1 / mean TPOT [tokens/s]"
    )
    utilization: dict[str, FiniteFloat] = Field(
        description="Busy fraction of each resource, 0..1: prefill_lane, decode_batch, kv_cache "
        "(aggregated); prefill_pool, decode_pool, kv_link (disaggregated)"
    )
    mean_decode_batch: FiniteFloat = Field(
        description="Mean running decode batch per (decode) worker [sequences]"
    )
    feasible: bool = Field(description="False when the offered load exceeds what the deployment serves")
    limiting_resource: str = Field(
        description="What saturates first as load grows: prefill, decode, kv_capacity or kv_link"
    )
    kv_transfer: dict[str, FiniteFloat] | None = Field(
        description="KV-transfer figures, SI units in their names: bytes_per_request [bytes]; bytes_per_s, the "
        "whole prefill pool's KV traffic at this load [bytes/s]; link_bandwidth_bytes_per_s, what the pool's "
        "links carry together (each prefill worker's GPUs sending in parallel, at the datasheet bandwidth "
        "times the GPU family's link fraction) [bytes/s]; transfer_s_mean, one request's whole transfer, and "
        "exposed_s_mean, the part its prefill does not hide [s]. Null when aggregated"
    )
    slo_attainment_fraction: FiniteFloat | None = Field(
        description="Share of requests meeting the SLO, 0..1; null without slo"
    )
    goodput_requests_per_s: FiniteFloat | None = Field(
        description="Requests meeting the SLO per second [requests/s]; null without slo"
    )
    warnings: list[str] = Field(description="Caveats: defaults applied, inherited efficiencies, overload")


class EvaluateResponse(MetricsOut):
    """Predicted steady-state metrics of the deployment under the workload, and the inputs they are for."""

    model_config = _RESPONSE

    model: str = Field(description="Catalog id of the model, or inline for a model_config")
    engine: str = Field(description="The engine profile applied")
    weight_dtype: str = Field(description="Dtype of the weights")
    kv_dtype: str = Field(description="Dtype of the KV cache")
    deployment: DeploymentOut = Field(description="The deployment, after defaults were applied")
    workload: WorkloadOut = Field(description="The workload as the model holds it")
    slo: SloOut | None = Field(description="The SLO, after defaults; null without one")

    mode: Literal["aggregated", "disaggregated"] = Field(description="The deployment's mode")
