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
BatchSize = Annotated[
    int, Field(ge=1, le=MAX_BATCH_SIZE, description="Sequences in the batch [sequences]")
]
TpDegree = Annotated[int, Field(ge=1, le=64, description="Tensor-parallel degree")]
PpDegree = Annotated[int, Field(ge=1, le=64, description="Pipeline-parallel degree")]
DpDegree = Annotated[int, Field(ge=1, le=1024, description="Attention data-parallel degree")]
EpDegree = Annotated[int, Field(ge=1, le=1024, description="Expert-parallel degree")]
CatalogId = Annotated[str, Field(min_length=1, max_length=200, description="A catalog id, case-insensitive")]
Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"]
EngineId = Literal["vllm", "sglang", "trtllm"]
#: the ``engine`` field of every request
_ENGINE = (
    "The serving engine whose per-step overheads and kernel-efficiency profile apply: "
    "vllm, sglang or trtllm"
)
#: the ``parallelism`` field of every request that places a model on GPUs
_PARALLELISM = (
    "How one worker splits the model: tensor, pipeline, data and expert degrees; GPUs per worker = tp·pp·dp"
)
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

#: most identical replicas or workers of one pool [workers]
MAX_WORKERS = 100_000
#: most clients of a closed loop [clients]
MAX_CONCURRENCY = 1_000_000
#: slowest and fastest open-loop arrival rates accepted [requests/s]; below the floor (one request in
#: about 12 days) a rate only drives the cost per token and the queueing to overflow
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e6
#: most entries of a list of length samples or histogram bins (longer lists are a 413)
MAX_SAMPLES = 100_000
#: shortest and longest latency targets accepted [s]; no GPU runs a step in under a microsecond, so a
#: target below the floor is as infeasible as the floor itself, and only underflows the searches' grids
MIN_LATENCY_S, MAX_LATENCY_S = 1e-6, 1e6

WorkerCount = Annotated[int, Field(ge=1, le=MAX_WORKERS, description="Identical workers [workers]")]
Concurrency = Annotated[
    int,
    Field(
        ge=1, le=MAX_CONCURRENCY, description="Closed-loop clients, each with one request in flight [clients]"
    ),
]
RatePerS = Annotated[
    float,
    Field(
        ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, allow_inf_nan=False, description="An arrival rate [requests/s]"
    ),
]
Percentile = Annotated[float, Field(gt=0, lt=100, description="A percentile, in (0, 100)")]
LatencyTarget = Annotated[
    float, Field(ge=MIN_LATENCY_S, le=MAX_LATENCY_S, allow_inf_nan=False, description="A latency target [s]")
]

#: requests take exactly the JSON types the spec declares: no ``"5"`` or ``true`` for a number, no ``1`` for
#: a boolean (pydantic's lax mode would coerce them and accept what the spec calls invalid)
_REQUEST = ConfigDict(extra="forbid", strict=True, protected_namespaces=())
_RESPONSE = ConfigDict(protected_namespaces=())


class ParallelismIn(BaseModel):
    model_config = _REQUEST

    tp: TpDegree = Field(1, description="Tensor-parallel degree: GPUs each layer's weights are split across")
    pp: PpDegree = Field(1, description="Pipeline-parallel degree: stages the layers are split into")
    dp: DpDegree = Field(
        1, description="Attention data-parallel degree: attention replicas within one worker"
    )
    ep: EpDegree = Field(
        1, description="Expert-parallel degree: GPUs the experts of an MoE layer are spread over"
    )


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
        description="Multiplies the reduction depth at which a GEMM reaches half its efficiency: the "
                    "shape of the GEMM efficiency curve [×]")
    memory_efficiency_scale: float = Field(
        1.0, ge=0.25, le=4.0, allow_inf_nan=False,
        description="Multiplies the achieved fraction of HBM bandwidth (streaming kernels, decode "
                    "attention) [×]")
    collective_efficiency_scale: float = Field(
        1.0, ge=0.25, le=4.0, allow_inf_nan=False,
        description="Multiplies the achieved link-bandwidth fraction of collectives and divides their "
                    "latency [×]")
    step_overhead_s: float | None = Field(
        None, ge=0.0, le=0.1, allow_inf_nan=False,
        description="Host time of one scheduler iteration [s]; null keeps the engine's")
    request_overhead_s: float | None = Field(
        None, ge=0.0, le=2.0, allow_inf_nan=False,
        description="Front-end time of one request (HTTP, tokenization, admission) [s]; null keeps the "
                    "engine's")
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
    engine: EngineId = Field("vllm", description=_ENGINE)
    weight_dtype: Dtype | None = Field(None, description="Default: the model's native dtype, else bf16")
    kv_dtype: Dtype | None = Field(None, description="Default: follows the weights (bf16 for 4-bit)")
    calibration: CalibrationIn | None = Field(
        None,
        description="A calibration profile from POST /v1/calibrate, applied to the catalog's GPUs and engine",
    )

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
    gpu: CatalogId = Field(description="Catalog GPU id (h100-sxm, mi300x, ...), case-insensitive")
    engine: EngineId = Field("vllm", description=_ENGINE)
    weight_dtype: Dtype | None = Field(None, description="Default: the model's native dtype, else bf16")
    kv_dtype: Dtype | None = Field(None, description="Default: follows the weights (bf16 for 4-bit)")
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn, description=_PARALLELISM)
    calibration: CalibrationIn | None = Field(
        None,
        description="A calibration profile from POST /v1/calibrate, applied to the catalog's GPU and engine",
    )

    @model_validator(mode="after")
    def _exactly_one_model(self) -> EstimateRequest:
        if (self.model is None) == (self.inline_model_config is None):
            field = "model" if self.model is None else "model_config"
            raise PydanticCustomError(
                "model_choice", "give exactly one of 'model' and 'model_config'", {"field": field}
            )
        return self


class PrefillRequest(EstimateRequest):
    """One prefill pass: ``batch_size`` prompts of ``prompt_tokens`` each, processed together."""

    model_config = _REQUEST | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-70B",
                    "gpu": "h100-sxm",
                    "parallelism": {"tp": 2},
                    "prompt_tokens": 4096,
                }
            ]
        }
    }

    prompt_tokens: Tokens = Field(description="Length of each prompt, cached part included [tokens]")
    batch_size: BatchSize = Field(1, description="Prompts prefilled together in the pass [sequences]")
    cached_tokens: NonNegativeTokens = Field(
        0, description="Leading tokens of each prompt already in the prefix cache, not recomputed [tokens]"
    )

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
    """One decode step: ``batch_size`` sequences each generating one token over ``context_tokens``."""

    model_config = _REQUEST | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "meta-llama/Llama-3.1-70B",
                    "gpu": "h100-sxm",
                    "parallelism": {"tp": 4},
                    "batch_size": 32,
                    "context_tokens": 4096,
                }
            ]
        }
    }

    batch_size: BatchSize = Field(1, description="Sequences decoding together, one token each [sequences]")
    context_tokens: Tokens = Field(description="Tokens already in each sequence's KV cache [tokens]")


class ParallelismOut(BaseModel):
    """The parallel layout of one worker, after defaults were applied."""

    tp: int = Field(description="Tensor-parallel degree")
    pp: int = Field(description="Pipeline-parallel degree")
    dp: int = Field(description="Attention data-parallel degree")
    ep: int = Field(description="Expert-parallel degree")
    num_gpus: int = Field(description="GPUs of one worker, tp·pp·dp [GPUs]")


class OperatorCostOut(BaseModel):
    """One operator (a GEMM, attention, a collective, ...) summed over all layers of the pass, on one GPU."""

    name: str = Field(description="The operator, e.g. attn.q+k+v, attention.decode, ffn.down")
    time_s: FiniteFloat = Field(description="Its time in the pass [s]")
    flops: FiniteFloat = Field(description="Floating-point work on one GPU [FLOP]")
    bytes_moved: FiniteFloat = Field(
        description="HBM traffic on one GPU (or link traffic for a collective) [bytes]"
    )
    bound: Bound = Field(description="What limits it: compute, memory, communication or overhead")
    arithmetic_intensity: FiniteFloat = Field(description="flops / bytes_moved [FLOP/byte]")
    mfu: FiniteFloat = Field(description="Achieved flops over time × dense tensor peak, 0..1")
    mbu: FiniteFloat = Field(description="Achieved bytes over time × HBM bandwidth, 0..1")


class MemoryPlanOut(BaseModel):
    """Per-GPU memory budget of the worker, after vLLM's accounting (gpu_memory_utilization 0.9)."""

    memory_bytes: FiniteFloat = Field(description="The GPU's HBM capacity [bytes]")
    weight_bytes_per_gpu: FiniteFloat = Field(
        description="Model weights held by one GPU (its TP and PP share) [bytes]"
    )
    activation_bytes_per_gpu: FiniteFloat = Field(
        description="Peak activation memory of a profiling pass [bytes]"
    )
    reserved_bytes_per_gpu: FiniteFloat = Field(
        description="Memory the engine leaves unused (1 − gpu_memory_utilization) plus the runtime's "
        "reserve [bytes]"
    )
    kv_cache_bytes_per_gpu: FiniteFloat = Field(description="What remains for the KV cache [bytes]")
    kv_bytes_per_token_per_gpu: FiniteFloat = Field(
        description="KV-cache bytes one token adds on one GPU, all layers of its pipeline stage [bytes/token]"
    )
    kv_capacity_tokens: int = Field(description="Tokens of KV cache the worker can hold [tokens]")
    fits: bool = Field(description="Whether the weights, activations and this pass's KV cache fit")


class EstimateEcho(BaseModel):
    """What the estimate was computed for, after defaults were applied."""

    model_config = _RESPONSE

    model: str = Field(description="Catalog id of the model, or inline for a model_config")
    gpu: str = Field(description="Catalog id of the GPU")
    engine: str = Field(description="The engine profile applied")
    weight_dtype: str = Field(description="Dtype of the weights")
    kv_dtype: str = Field(description="Dtype of the KV cache")
    parallelism: ParallelismOut = Field(description="The worker's parallel layout")
    efficiency_origin: str = Field(
        description="Where the GPU's kernel efficiencies come from (fit, rows, script)"
    )
    warnings: list[str] = Field(
        description="Caveats of this estimate, e.g. efficiencies inherited from another family"
    )
    bound: Bound = Field(
        description="What limits the pass as a whole: compute, memory, communication or overhead"
    )
    flops: FiniteFloat = Field(description="Floating-point work of the pass on one GPU [FLOP]")
    bytes_moved: FiniteFloat = Field(description="HBM traffic of the pass on one GPU [bytes]")
    breakdown: list[OperatorCostOut] = Field(description="Per-operator costs, in execution order")
    memory: MemoryPlanOut = Field(description="The per-GPU memory budget")


class PrefillResponse(EstimateEcho):
    """Latency, work and per-operator breakdown of one prefill pass."""

    latency_s: FiniteFloat = Field(description="Time of the prefill pass [s]")
    #: batch_size × prompt_tokens / latency_s
    tokens_per_s: FiniteFloat = Field(description="batch_size × prompt_tokens / latency_s [tokens/s]")
    prompt_tokens: int = Field(description="Length of each prompt [tokens]")
    cached_tokens: int = Field(description="Leading tokens of each prompt found in the prefix cache [tokens]")
    batch_size: int = Field(description="Prompts in the pass [sequences]")


class DecodeResponse(EstimateEcho):
    """Latency and per-operator breakdown of one decode step."""

    step_latency_s: FiniteFloat = Field(description="Time of one decode step, one token per sequence [s]")
    #: batch_size / step_latency_s
    tokens_per_s: FiniteFloat = Field(description="batch_size / step_latency_s [tokens/s]")
    batch_size: int = Field(description="Sequences decoding together [sequences]")
    context_tokens: int = Field(description="Tokens in each sequence's KV cache [tokens]")


class EfficiencyOut(BaseModel):
    """The fitted kernel efficiencies of the GPU's family, as fractions of the datasheet peaks. Further
    parameters (attention, collectives, GEMM tiles) are additional members."""

    model_config = ConfigDict(extra="allow")

    gemm_peak_fraction: dict[str, float] = Field(
        description="Best fraction of dense tensor peak a large GEMM reaches, by compute dtype, 0..1"
    )
    memory_bandwidth_fraction: float = Field(
        description="Fraction of HBM bandwidth a streaming kernel reaches, 0..1"
    )
    kernel_fixed_s: float = Field(description="Fixed time of one kernel (launch, prologue, epilogue) [s]")
    fitted_on: str = Field("", description="What these numbers were fitted on (files, rows, script)")


class GpuOut(BaseModel):
    """One catalog accelerator: datasheet figures in SI units, each with its source."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="Catalog id, e.g. h100-sxm")
    vendor: str = Field(description="Manufacturer, e.g. NVIDIA")
    name: str = Field(description="Product name, e.g. H100 SXM5 80GB")
    family: str = Field(description="Architecture family whose kernel efficiencies apply, e.g. hopper")
    memory_bytes: float = Field(description="HBM capacity [bytes]")
    hbm_bandwidth_bytes_per_s: float = Field(description="HBM bandwidth [bytes/s]")
    peak_flops_per_s: dict[str, float] = Field(description="Dense (non-sparse) tensor peak by dtype [FLOP/s]")
    scale_up_bandwidth_bytes_per_s: float = Field(
        description="Scale-up (NVLink, Infinity Fabric, ICI) bandwidth per GPU, per direction [bytes/s]"
    )
    efficiency: EfficiencyOut = Field(description="The family's fitted kernel efficiencies")
    efficiency_origin: str = Field(description="Where the efficiencies come from (fit, rows, script)")
    efficiency_inherited: bool = Field(description="True when they were fitted on another family's GPU")
    sources: dict[str, str] = Field(description="Field name → citation of every datasheet figure")


class GpuList(BaseModel):
    """The accelerator catalog."""

    gpus: list[GpuOut] = Field(description="Every catalog accelerator, by id")


class LayerGroupOut(BaseModel):
    """A run of identical decoder layers; ``attention`` and ``ffn`` mirror the core dataclasses."""

    num_layers: int = Field(description="Consecutive layers of this shape [layers]")
    attention: dict[str, Any] = Field(
        description="The attention block: kind, heads, head dimensions, window, ..."
    )
    ffn: dict[str, Any] = Field(description="The feed-forward block: dense or MoE, sizes, experts, ...")


class ModelSummary(BaseModel):
    """One catalog model and its size."""

    model_config = _RESPONSE

    id: str = Field(description="Catalog id: the Hugging Face repo id")
    model_type: str = Field(description="The config's model_type, e.g. llama, qwen3_moe, deepseek_v3")
    aliases: list[str] = Field(description="Other ids that name it (case-insensitive)")
    num_layers: int = Field(description="Decoder layers [layers]")
    hidden_size: int = Field(description="Width of the residual stream [elements]")
    vocab_size: int = Field(description="Vocabulary entries [tokens]")
    total_params: int = Field(description="All parameters, every expert included [parameters]")
    active_params: int = Field(
        description="Parameters one token uses (the routed experts only for MoE) [parameters]"
    )
    native_weight_dtype: str | None = Field(description="Dtype the checkpoint ships in; null when not stated")
    source: str = Field(description="Where the architecture comes from (the config.json file)")


class ModelList(BaseModel):
    """The model catalog."""

    models: list[ModelSummary] = Field(description="Every catalog model, by id")


class ModelDetail(ModelSummary):
    """One catalog model: its layers, weight bytes per dtype and KV-cache bytes per token."""

    layer_groups: list[LayerGroupOut] = Field(description="The decoder layers as runs of identical layers")
    #: weight bytes of the whole model per weight dtype [bytes]
    weight_bytes: dict[str, float] = Field(
        description="Weight bytes of the whole model by weight dtype [bytes]"
    )
    default_weight_dtype: str = Field(description="The weight dtype used when a request gives none")
    default_kv_dtype: str = Field(description="The KV-cache dtype used when a request gives none")
    #: KV-cache bytes one token adds, all layers, for ``default_kv_dtype`` [bytes]
    kv_cache_bytes_per_token: float = Field(
        description="KV-cache bytes one token adds, all layers, in default_kv_dtype [bytes/token]"
    )
