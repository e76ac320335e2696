"""Inputs and outputs of the serving model (``evaluate``): frozen, keyword-built, SI units.

The shapes mirror the public contract (``deployment``, ``workload``, ``slo`` of ``POST /v1/evaluate``)
but hold resolved objects (a ``GpuSpec``, a ``LengthDistribution``) instead of ids and JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.costs.types import EngineProfile, Parallelism
from planner.hardware import GpuSpec
from planner.models import ModelArchitecture
from planner.serving.workload import Workload

KvLink = Literal["auto", "nvlink", "rdma", "pcie"]


@dataclass(frozen=True, kw_only=True)
class AggregatedDeployment:
    """``replicas`` identical workers behind a load balancer, each running continuous batching."""

    gpu: GpuSpec
    parallelism: Parallelism = Parallelism()
    replicas: int = 1
    #: vLLM ``max_num_seqs``
    max_batch_size: int = 256
    #: vLLM ``max_num_batched_tokens``: tokens one iteration may process (decodes + prefill chunks)
    token_budget: int = 8192
    chunked_prefill: bool = True


@dataclass(frozen=True, kw_only=True)
class PoolSpec:
    """One pool of a disaggregated deployment: ``workers`` identical workers of ``gpu`` × parallelism."""

    gpu: GpuSpec
    parallelism: Parallelism = Parallelism()
    workers: int = 1
    max_batch_size: int = 256
    token_budget: int = 8192


@dataclass(frozen=True, kw_only=True)
class DisaggregatedDeployment:
    prefill: PoolSpec
    decode: PoolSpec
    #: how KV caches travel from prefill to decode workers ("auto": NVLink inside one scale-up domain when
    #: both pools use the same GPU type and fit in it, else the scale-out RDMA NIC)
    kv_link: KvLink = "auto"


@dataclass(frozen=True, kw_only=True)
class Slo:
    ttft_s: float | None = None
    ttft_percentile: float = 90.0
    itl_s: float | None = None
    itl_percentile: float = 99.0


@dataclass(frozen=True, kw_only=True)
class ServingProblem:
    """Everything ``evaluate`` needs."""

    model: ModelArchitecture
    engine: EngineProfile
    weight_dtype: str
    kv_dtype: str
    deployment: AggregatedDeployment | DisaggregatedDeployment
    workload: Workload
    slo: Slo | None = None


@dataclass(frozen=True, kw_only=True)
class LatencyStats:
    """Mean and percentiles of one latency metric [s]."""

    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True, kw_only=True)
class TtftBreakdown:
    """Mean TTFT decomposed [s]: a high TTFT does not by itself prove that prefill is slow."""

    queue: float
    prefill: float
    kv_transfer: float
    #: tokenization, scheduling and first-token delivery (the engine's per-request front-end time)
    overheads: float


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """What a benchmark of the deployment would measure, predicted."""

    ttft_s: LatencyStats
    itl_s: LatencyStats
    tpot_s: LatencyStats
    e2e_latency_s: LatencyStats
    ttft_breakdown_s: TtftBreakdown
    requests_per_s: float
    throughput_output_tokens_per_s: float
    throughput_output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    #: busy fraction of each resource: aggregated "prefill_lane" (share of iterations carrying prefill),
    #: "decode_batch" (mean batch / max batch) and "kv_cache"; disaggregated "prefill_pool", "decode_pool",
    #: "kv_link"
    utilization: dict[str, float]
    #: mean running decode batch per worker (per decode worker when disaggregated)
    mean_decode_batch: float
    num_gpus: int
    #: False when the offered load exceeds what the deployment can serve in steady state
    feasible: bool
    #: the resource that saturates first as load grows ("prefill", "decode", "kv_capacity", "kv_link")
    limiting_resource: str
    kv_transfer: dict[str, float] | None = None
    #: with an SLO: fraction of requests meeting both targets, and the goodput [requests/s]
    slo_attainment_fraction: float | None = None
    goodput_requests_per_s: float | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
