"""Inputs and outputs of the cost model: frozen, keyword-built, SI units."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.hardware import GpuSpec
from planner.models import ModelArchitecture

Bound = Literal["compute", "memory", "communication", "overhead"]


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    """Tensor, pipeline, attention-data and expert parallel degrees. GPUs per worker = tp·pp·dp."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True, kw_only=True)
class EngineProfile:
    """Per-engine costs that are not kernels: scheduling, launch, sampling (fitted, see fitted_on)."""

    id: str
    #: CPU/host time of one scheduler iteration that the GPU does not hide [s]
    step_overhead_s: float
    #: extra host time per sequence in the batch per iteration (sampling, detokenization) [s]
    per_sequence_overhead_s: float
    #: kernel-efficiency multipliers of this engine's kernels against the family fit (1 = same)
    gemm_efficiency_scale: float = 1.0
    attention_efficiency_scale: float = 1.0
    #: custom all-reduce latency for small messages [s]
    allreduce_latency_s: float | None = None
    #: the custom all-reduce (``kernels.allreduce_time_s``): its one-shot kernel's fraction of the scale-up
    #: link bandwidth, its two-shot kernel's fraction and extra latency [s], and the largest message it
    #: takes (larger ones go to NCCL) [bytes]; None: NCCL's bandwidth terms after ``allreduce_latency_s``
    allreduce_bandwidth_fraction: float | None = None
    allreduce_two_shot_bandwidth_fraction: float | None = None
    allreduce_two_shot_latency_s: float = 0.0
    allreduce_custom_max_bytes: float | None = None
    #: fixed time of this engine's attention kernels (None: the GPU family's) [s]
    attention_fixed_s: float | None = None
    #: decode attention runs one thread block per (sequence, KV head) when it packs the query heads of a
    #: GQA group together (FlashAttention-3 in vLLM/SGLang), else per (sequence, query head) (TensorRT-LLM)
    decode_attention_blocks_per: str = "kv_head"
    #: minimum duration of one such thread block on one SM [s] (0 = not modelled)
    decode_attention_block_s: float = 0.0
    #: grouped-GEMM efficiency of the fused MoE kernels against a dense GEMM of the same shape
    moe_efficiency_scale: float = 1.0
    #: fixed time of the MoE pipeline beyond its two GEMMs: routing top-k, token permutation,
    #: un-permutation and weighted combine [s]
    moe_overhead_s: float = 0.0
    #: share of a fixed-length closed loop's requests that arrive in lock-step groups (see
    #: planner/serving/evaluate.py, "lock-step"); 0 = independent phases, 1 = a deterministic simulation
    closed_loop_coherence: float = 0.0
    #: the scheduler runs prompt chunks in the same iterations as the running decodes (vLLM's chunked prefill,
    #: TensorRT-LLM's in-flight batching); False when prefill batches run on their own while the decodes wait
    #: (SGLang without ``--enable-mixed-chunk``). It decides how a fixed-length closed loop locks: a train of
    #: groups (decodes run through the prefills) or one cohort (they wait for them)
    mixes_prefill_with_decode: bool = True
    #: front-end time of one request outside the GPU iterations: HTTP handling, tokenization, scheduling
    #: admission and delivery of the first token (counted once in TTFT) [s]
    request_overhead_s: float = 0.0
    #: spread of that front-end time [s]; None: not measured. A fixed-length chunked closed loop splits into
    #: groups one decode iteration apart; a spread of half an iteration or more shuffles their returns back
    #: into one cohort, below it they keep their spacing as a train (``AggregatedModel._chunked_train``).
    #: Unmeasured, it is taken as that large: the serving benchmarks fit the cohort (vLLM's in-sample TTFT
    #: error 27.6 % against 36.3 % with the train, TensorRT-LLM's 21.7 % against 26.0 %); the reference
    #: simulation's front end is a constant (0)
    request_overhead_jitter_s: float | None = None
    fitted_on: str = ""


@dataclass(frozen=True, kw_only=True)
class CostContext:
    """Everything a pass cost depends on besides the token counts."""

    model: ModelArchitecture
    gpu: GpuSpec
    engine: EngineProfile
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    parallelism: Parallelism = Parallelism()


@dataclass(frozen=True, kw_only=True)
class OperatorCost:
    """Cost of one operator summed over all layers of the pass, on one GPU."""

    name: str
    time_s: float
    flops: float
    bytes_moved: float
    bound: Bound
    #: flops / bytes_moved [FLOP/byte]
    arithmetic_intensity: float
    #: achieved flops / (time × dense peak)
    mfu: float
    #: achieved bytes / (time × HBM bandwidth)
    mbu: float


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """Per-GPU memory budget of a worker."""

    memory_bytes: float
    weight_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    reserved_bytes_per_gpu: float
    kv_cache_bytes_per_gpu: float
    #: KV bytes one token adds on one GPU (all layers of its pipeline stage, its TP share)
    kv_bytes_per_token_per_gpu: float
    #: how many tokens of KV the worker can hold
    kv_capacity_tokens: int
    fits: bool


@dataclass(frozen=True, kw_only=True)
class PassCost:
    """One prefill pass or one decode step on one worker."""

    latency_s: float
    flops: float
    bytes_moved: float
    bound: Bound
    breakdown: tuple[OperatorCost, ...]
    memory: MemoryPlan
