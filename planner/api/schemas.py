"""Request and response models of the HTTP API. Constrained types are declared once, here.

Request models forbid unknown fields; response models are separate and only carry SI units.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from planner.costs.types import Bound

#: largest token count accepted anywhere [tokens]
MAX_TOKENS = 10_000_000
#: largest batch accepted [sequences]
MAX_BATCH_SIZE = 65_536

Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS, description="A token count [tokens]")]
NonNegativeTokens = Annotated[int, Field(ge=0, le=MAX_TOKENS, description="A token count [tokens]")]
BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE, description="Sequences in the batch")]
TpDegree = Annotated[int, Field(ge=1, le=64, description="Tensor-parallel degree")]
PpDegree = Annotated[int, Field(ge=1, le=64, description="Pipeline-parallel degree")]
DpDegree = Annotated[int, Field(ge=1, le=1024, description="Attention data-parallel degree")]
EpDegree = Annotated[int, Field(ge=1, le=1024, description="Expert-parallel degree")]
CatalogId = Annotated[str, Field(min_length=1, max_length=200, description="A catalog id, case-insensitive")]
Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"]
EngineId = Literal["vllm", "sglang", "trtllm"]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

#: most identical replicas or workers of one pool [workers]
MAX_WORKERS = 100_000
#: most clients of a closed loop [clients]
MAX_CONCURRENCY = 1_000_000
#: fastest open-loop arrival rate accepted [requests/s]
MAX_RATE_PER_S = 1e6
#: most entries of a list of length samples or histogram bins (longer lists are a 413)
MAX_SAMPLES = 100_000
#: longest latency target accepted [s]
MAX_LATENCY_S = 1e6

WorkerCount = Annotated[int, Field(ge=1, le=MAX_WORKERS, description="Identical workers [workers]")]
Concurrency = Annotated[
    int, Field(ge=1, le=MAX_CONCURRENCY, description="Closed-loop clients, each with one request in flight")
]
RatePerS = Annotated[
    float, Field(gt=0, le=MAX_RATE_PER_S, allow_inf_nan=False, description="An arrival rate [requests/s]")
]
Percentile = Annotated[float, Field(gt=0, lt=100, description="A percentile, in (0, 100)")]
LatencyTarget = Annotated[
    float, Field(gt=0, le=MAX_LATENCY_S, allow_inf_nan=False, description="A latency target [s]")
]

_REQUEST = ConfigDict(extra="forbid", protected_namespaces=())
_RESPONSE = ConfigDict(protected_namespaces=())


class ParallelismIn(BaseModel):
    model_config = _REQUEST

    tp: TpDegree = 1
    pp: PpDegree = 1
    dp: DpDegree = 1
    ep: EpDegree = 1


class CalibrationIn(BaseModel):
    """A calibration profile (what ``POST /v1/calibrate`` returns as ``calibration``): corrections to the
    catalog's GPU and engine efficiencies, applied to every GPU of the request. Scales multiply the catalog's
    fitted fractions (1 = unchanged; fractions are capped at the datasheet peak); overheads replace the
    engine's when given."""

    model_config = _REQUEST

    gemm_efficiency_scale: float = Field(
        1.0, ge=0.25, le=4.0, allow_inf_nan=False,
        description="Multiplies the fraction of tensor peak a large GEMM reaches [×]")
    gemm_k_half_scale: float = Field(
        1.0, ge=0.25, le=4.0, allow_inf_nan=False,
        description="Multiplies the reduction depth at which a GEMM reaches half its efficiency: the shape of "
                    "the GEMM efficiency curve [×]")
    memory_efficiency_scale: float = Field(
        1.0, ge=0.25, le=4.0, allow_inf_nan=False,
        description="Multiplies the achieved fraction of HBM bandwidth (streaming kernels, decode attention) [×]")
    collective_efficiency_scale: float = Field(
        1.0, ge=0.25, le=4.0, allow_inf_nan=False,
        description="Multiplies the achieved link-bandwidth fraction of collectives and divides their latency [×]")
    step_overhead_s: float | None = Field(
        None, ge=0.0, le=0.1, allow_inf_nan=False,
        description="Host time of one scheduler iteration [s]; null keeps the engine's")
    request_overhead_s: float | None = Field(
        None, ge=0.0, le=2.0, allow_inf_nan=False,
        description="Front-end time of one request (HTTP, tokenization, admission) [s]; null keeps the engine's")
    fitted_on: str = Field("", max_length=2000, description="What the profile was fitted on (free text)")


class ModelChoice(BaseModel):
    """What runs, without where: a catalog model or an inline config, the engine and the dtypes.

    The same fields and defaults as ``EstimateRequest``, for requests that place the model on GPUs
    elsewhere in their body (``deployment``).
    """

    model_config = _REQUEST

    model: CatalogId | None = Field(None, description="Catalog model id (Hugging Face repo id)")
    inline_model_config: dict[str, Any] | None = Field(
        None, alias="model_config", description="An inline Hugging Face config.json instead of `model`"
    )
    engine: EngineId = "vllm"
    weight_dtype: Dtype | None = Field(None, description="Default: the model's native dtype, else bf16")
    kv_dtype: Dtype | None = Field(None, description="Default: follows the weights (bf16 for 4-bit)")
    calibration: CalibrationIn | None = Field(
        None, description="A calibration profile from POST /v1/calibrate, applied to the catalog's GPUs and engine")

    @model_validator(mode="after")
    def _exactly_one_model(self) -> ModelChoice:
        if (self.model is None) == (self.inline_model_config is None):
            field = "model" if self.model is None else "model_config"
            raise PydanticCustomError(
                "model_choice", "give exactly one of 'model' and 'model_config'", {"field": field}
            )
        return self


class EstimateRequest(BaseModel):
    """Fields shared by the estimate endpoints: what runs, on what, how it is split."""

    model_config = _REQUEST

    model: CatalogId | None = Field(None, description="Catalog model id (Hugging Face repo id)")
    inline_model_config: dict[str, Any] | None = Field(
        None, alias="model_config", description="An inline Hugging Face config.json instead of `model`"
    )
    gpu: CatalogId
    engine: EngineId = "vllm"
    weight_dtype: Dtype | None = Field(None, description="Default: the model's native dtype, else bf16")
    kv_dtype: Dtype | None = Field(None, description="Default: follows the weights (bf16 for 4-bit)")
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn)
    calibration: CalibrationIn | None = Field(
        None, description="A calibration profile from POST /v1/calibrate, applied to the catalog's GPU and engine")

    @model_validator(mode="after")
    def _exactly_one_model(self) -> EstimateRequest:
        if (self.model is None) == (self.inline_model_config is None):
            field = "model" if self.model is None else "model_config"
            raise PydanticCustomError(
                "model_choice", "give exactly one of 'model' and 'model_config'", {"field": field}
            )
        return self


class PrefillRequest(EstimateRequest):
    prompt_tokens: Tokens
    batch_size: BatchSize = 1
    cached_tokens: NonNegativeTokens = Field(0, description="Prompt tokens already in the prefix cache")

    @model_validator(mode="after")
    def _cached_below_prompt(self) -> PrefillRequest:
        if self.cached_tokens >= self.prompt_tokens:
            raise PydanticCustomError(
                "cached_tokens_too_large",
                "cached_tokens ({cached}) must be below prompt_tokens ({prompt})",
                {"field": "cached_tokens", "cached": self.cached_tokens, "prompt": self.prompt_tokens},
            )
        return self


class DecodeRequest(EstimateRequest):
    batch_size: BatchSize = 1
    context_tokens: Tokens = Field(description="Tokens already in each sequence's KV cache")


class ParallelismOut(BaseModel):
    tp: int
    pp: int
    dp: int
    ep: int
    num_gpus: int


class OperatorCostOut(BaseModel):
    name: str
    time_s: FiniteFloat
    flops: FiniteFloat
    bytes_moved: FiniteFloat
    bound: Bound
    arithmetic_intensity: FiniteFloat
    mfu: FiniteFloat
    mbu: FiniteFloat


class MemoryPlanOut(BaseModel):
    memory_bytes: FiniteFloat
    weight_bytes_per_gpu: FiniteFloat
    activation_bytes_per_gpu: FiniteFloat
    reserved_bytes_per_gpu: FiniteFloat
    kv_cache_bytes_per_gpu: FiniteFloat
    kv_bytes_per_token_per_gpu: FiniteFloat
    kv_capacity_tokens: int
    fits: bool


class EstimateEcho(BaseModel):
    """What the estimate was computed for, after defaults were applied."""

    model_config = _RESPONSE

    model: str
    gpu: str
    engine: str
    weight_dtype: str
    kv_dtype: str
    parallelism: ParallelismOut
    efficiency_origin: str
    warnings: list[str]
    bound: Bound
    flops: FiniteFloat
    bytes_moved: FiniteFloat
    breakdown: list[OperatorCostOut]
    memory: MemoryPlanOut


class PrefillResponse(EstimateEcho):
    latency_s: FiniteFloat
    #: batch_size × prompt_tokens / latency_s
    tokens_per_s: FiniteFloat
    prompt_tokens: int
    cached_tokens: int
    batch_size: int


class DecodeResponse(EstimateEcho):
    step_latency_s: FiniteFloat
    #: batch_size / step_latency_s
    tokens_per_s: FiniteFloat
    batch_size: int
    context_tokens: int


class EfficiencyOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    gemm_peak_fraction: dict[str, float]
    memory_bandwidth_fraction: float
    kernel_fixed_s: float
    fitted_on: str = ""


class GpuOut(BaseModel):
    """One catalog accelerator: datasheet figures in SI units, each with its source."""

    model_config = ConfigDict(extra="allow")

    id: str
    vendor: str
    name: str
    family: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    peak_flops_per_s: dict[str, float]
    scale_up_bandwidth_bytes_per_s: float
    efficiency: EfficiencyOut
    efficiency_origin: str
    efficiency_inherited: bool
    sources: dict[str, str]


class GpuList(BaseModel):
    gpus: list[GpuOut]


class LayerGroupOut(BaseModel):
    """A run of identical decoder layers; ``attention`` and ``ffn`` mirror the core dataclasses."""

    num_layers: int
    attention: dict[str, Any]
    ffn: dict[str, Any]


class ModelSummary(BaseModel):
    model_config = _RESPONSE

    id: str
    model_type: str
    aliases: list[str]
    num_layers: int
    hidden_size: int
    vocab_size: int
    total_params: int
    active_params: int
    native_weight_dtype: str | None
    source: str


class ModelList(BaseModel):
    models: list[ModelSummary]


class ModelDetail(ModelSummary):
    layer_groups: list[LayerGroupOut]
    #: weight bytes of the whole model per weight dtype [bytes]
    weight_bytes: dict[str, float]
    default_weight_dtype: str
    default_kv_dtype: str
    #: KV-cache bytes one token adds, all layers, for ``default_kv_dtype`` [bytes]
    kv_cache_bytes_per_token: float
