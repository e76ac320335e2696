"""Measurements of a running deployment, in the shapes ``/v1/diagnose`` and ``/v1/calibrate`` accept.

Everything is SI (seconds, tokens, bytes); parsers of engine-specific formats (``prometheus``,
``vllm_bench``) convert into these and nothing downstream knows where a figure came from except
``Measurements.source``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np


@dataclass(frozen=True, kw_only=True)
class TtftSample:
    """Time to first token of requests of ``input_tokens`` prompt tokens (a mean over ``count`` requests)."""

    input_tokens: float
    ttft_s: float
    #: time the request waited in the engine's queue before its first iteration, when known [s]
    queue_s: float | None = None
    #: engine-measured prefill time (first iteration to first token), when known [s]
    prefill_s: float | None = None
    count: int = 1


@dataclass(frozen=True, kw_only=True)
class DecodeSample:
    """Inter-token latency at ``context_tokens`` tokens of history (a mean over ``count`` gaps)."""

    context_tokens: float
    itl_s: float
    #: sequences decoding together, when known
    batch_size: float | None = None
    count: int = 1


@dataclass(frozen=True, kw_only=True)
class IterationRecord:
    """One scheduler iteration: how many sequences decoded, how many prompt tokens it prefilled, how long."""

    duration_s: float
    #: sequences that produced one token in this iteration
    decode_tokens: int
    #: prompt tokens prefilled in this iteration (all chunks)
    prefill_tokens: int
    #: sequences whose prompt (or a chunk of it) was in this iteration
    num_prefill: int = 0
    #: start time of the iteration on the engine's clock, when known [s]
    start_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class KvTransferRecord:
    """KV-cache movement between the pools of a disaggregated deployment (means per request)."""

    bytes_per_request: float | None = None
    #: achieved transfer bandwidth [bytes/s]
    bandwidth_bytes_per_s: float | None = None
    #: time a request waited for its KV cache to arrive at the decode pool, beyond its prefill [s]
    wait_s: float | None = None
    #: duration of one request's transfer [s]
    transfer_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class HistogramSummary:
    """A cumulative histogram (Prometheus style): ``buckets`` are (upper bound, cumulative count) pairs in
    increasing order, the last one +inf; ``sum`` and ``count`` as exposed."""

    count: float
    sum: float
    buckets: tuple[tuple[float, float], ...] = ()

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0 < q < 1) by linear interpolation inside the bucket that holds it (what
        PromQL's ``histogram_quantile`` does); None without buckets or observations. A quantile that falls
        in the +inf bucket is reported as the largest finite bound."""
        if self.count <= 0 or not self.buckets:
            return None
        bounds = np.array([b for b, _ in self.buckets], dtype=np.float64)
        cum = np.array([c for _, c in self.buckets], dtype=np.float64)
        total = cum[-1] if cum[-1] > 0 else self.count
        rank = q * total
        i = int(np.searchsorted(cum, rank, side="left"))
        i = min(i, len(bounds) - 1)
        finite = bounds[np.isfinite(bounds)]
        if not np.isfinite(bounds[i]):
            return float(finite[-1]) if finite.size else None
        lo_bound = bounds[i - 1] if i > 0 else 0.0
        lo_count = cum[i - 1] if i > 0 else 0.0
        width = cum[i] - lo_count
        if width <= 0:
            return float(bounds[i])
        return float(lo_bound + (bounds[i] - lo_bound) * (rank - lo_count) / width)


#: keys of ``Measurements.histograms`` (the vLLM histogram each comes from, in ``prometheus``)
HISTOGRAM_KEYS = (
    "ttft_s", "queue_s", "prefill_s", "decode_s", "inference_s", "e2e_s", "itl_s", "tpot_s",
    "prompt_tokens", "output_tokens", "iteration_tokens",
)
#: keys of ``Measurements.summary``: means and percentiles a benchmark reports [s, tokens, 1/s]
SUMMARY_KEYS = (
    "mean_ttft_s", "median_ttft_s", "p90_ttft_s", "p99_ttft_s",
    "mean_tpot_s", "median_tpot_s", "p90_tpot_s", "p99_tpot_s",
    "mean_itl_s", "median_itl_s", "p90_itl_s", "p99_itl_s",
    "mean_e2e_s", "median_e2e_s", "p90_e2e_s", "p99_e2e_s",
    "request_throughput_per_s", "output_throughput_tokens_per_s",
    "mean_input_tokens", "mean_output_tokens", "num_requests", "duration_s",
    "max_concurrency", "request_rate_per_s",
    "num_requests_running", "num_requests_waiting", "kv_cache_usage_fraction",
)


def _frozen(m: Mapping) -> Mapping:
    return MappingProxyType(dict(m))


@dataclass(frozen=True, kw_only=True)
class Measurements:
    """All a user measured, from one or several sources."""

    ttft: tuple[TtftSample, ...] = ()
    decode: tuple[DecodeSample, ...] = ()
    iterations: tuple[IterationRecord, ...] = ()
    kv_transfer: KvTransferRecord | None = None
    histograms: Mapping[str, HistogramSummary] = field(default_factory=lambda: MappingProxyType({}))
    summary: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    #: where the figures came from ("metrics scrape", "vllm bench serve", "request body", ...)
    sources: tuple[str, ...] = ()

    def merged(self, other: Measurements) -> Measurements:
        """Both sets; ``other`` wins where both give the same histogram, summary key or KV record."""
        return Measurements(
            ttft=self.ttft + other.ttft,
            decode=self.decode + other.decode,
            iterations=self.iterations + other.iterations,
            kv_transfer=other.kv_transfer if other.kv_transfer is not None else self.kv_transfer,
            histograms=_frozen({**self.histograms, **other.histograms}),
            summary=_frozen({**self.summary, **other.summary}),
            sources=self.sources + tuple(s for s in other.sources if s not in self.sources),
        )

    @property
    def empty(self) -> bool:
        return not (self.ttft or self.decode or self.iterations or self.kv_transfer or self.histograms
                    or self.summary)
