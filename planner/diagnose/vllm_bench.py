"""The result file of ``vllm bench serve --save-result`` as :class:`Measurements`.

The file is one JSON object. Its aggregate keys (``completed``, ``duration`` [s], ``request_throughput``
[1/s], ``mean_ttft_ms`` [ms], ``p99_itl_ms`` [ms], ...) become ``Measurements.summary`` in seconds. With
``--save-detailed`` it also lists, per request, the prompt length (``input_lens``), the time to first
token (``ttfts`` [s]), the gaps between later tokens (``itls`` [s]) and the error, if any (``errors``);
those become ``TtftSample`` binned by prompt length and ``DecodeSample`` binned by context length. Bins
of about equal count (means over their requests or gaps, with the count) keep a diagnosis from hanging
on single noisy requests while keeping the shape of latency against length.

Failed requests (a non-empty ``errors`` entry; vLLM records them with ``ttft`` 0 and no gaps) are left
out of the bins, as vLLM leaves them out of its own means.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from planner.diagnose.measurements import DecodeSample, Measurements, TtftSample
from planner.errors import InvalidInput
from planner.units import BYTES_PER_MIB, SECONDS_PER_MS

#: largest result file accepted [bytes]
MAX_BENCH_JSON_BYTES = 64 * BYTES_PER_MIB
#: most requests accepted in the per-request lists
MAX_BENCH_REQUESTS = 200_000
#: most inter-token gaps accepted over all requests of ``itls``
MAX_BENCH_ITL_GAPS = 5_000_000
#: bins of ``TtftSample`` and of ``DecodeSample`` unless told otherwise
DEFAULT_MAX_BINS = 12

SOURCE = "vllm bench serve"

#: vLLM's name of each latency in the result keys -> ours in ``Measurements.summary``
_LATENCIES = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e"))
_STATISTICS = ("mean", "median", "p90", "p99")
#: ``Measurements.summary`` key -> result key, both SI already
_SI_SCALARS = (
    ("duration_s", "duration"),
    ("request_throughput_per_s", "request_throughput"),
    ("output_throughput_tokens_per_s", "output_throughput"),
)
#: ``Measurements.summary`` key -> result key of the total it is a mean of, per completed request
_TOKEN_TOTALS = (("mean_input_tokens", "total_input_tokens"), ("mean_output_tokens", "total_output_tokens"))
_INFINITE_RATES = ("inf", "infinity", "+inf")


def parse_bench_result(text: str | bytes, *, field: str | None = None,
                       max_bins: int = DEFAULT_MAX_BINS) -> Measurements:
    """:func:`measurements_from_bench_result` of the JSON text of a result file.

    ``field`` prefixes the key named in errors (``"<field>.ttfts"``); a document that is not JSON, or
    not an object, is reported as ``field`` itself (``"bench_result"`` when not given).
    """
    where = field or "bench_result"
    if not isinstance(text, str | bytes):
        raise InvalidInput(f"the result must be JSON text, not {type(text).__name__}", field=where)
    if len(text) > MAX_BENCH_JSON_BYTES or (isinstance(text, str)
                                            and len(text.encode("utf-8")) > MAX_BENCH_JSON_BYTES):
        raise InvalidInput(f"the result file is over {MAX_BENCH_JSON_BYTES} bytes", field=where)
    try:
        result = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"the result file is not valid JSON: {exc}", field=where) from exc
    return measurements_from_bench_result(result, field=field, max_bins=max_bins)


def measurements_from_bench_result(result: Mapping[str, Any], *, field: str | None = None,
                                   max_bins: int = DEFAULT_MAX_BINS) -> Measurements:
    """The summary, and binned TTFT and decode samples, of a parsed ``vllm bench serve`` result.

    Parameters
    ----------
    result
        The parsed JSON object. Only ``completed`` is required; every other key is read when present.
    field
        Prefix of the key named in errors (``"<field>.<key>"``); the bare key when None.
    max_bins
        Most ``TtftSample`` (and most ``DecodeSample``) built from the per-request lists.

    Returns
    -------
    Measurements
        ``summary`` in seconds, tokens and 1/s under ``SUMMARY_KEYS``; ``ttft`` and ``decode`` when the
        file was written with ``--save-detailed``.

    Raises
    ------
    InvalidInput
        A key of the wrong type, a negative or non-finite figure, per-request lists of different lengths
        or over the size limits, or no completed request; ``field`` names the key.
    """
    if not isinstance(result, Mapping):
        raise InvalidInput("the result must be a JSON object", field=field or "bench_result")
    if not (isinstance(max_bins, int) and max_bins >= 1):
        raise InvalidInput(f"max_bins must be a positive integer, not {max_bins!r}", field="max_bins")
    reader = _Reader(result, field)
    completed = reader.count("completed", required=True)
    if not completed:  # zero (a missing key has raised already)
        raise InvalidInput("the benchmark completed no request, so there is nothing to measure",
                           field=reader.at("completed"))

    summary: dict[str, float] = {"num_requests": float(completed)}
    for key, source in _SI_SCALARS:
        value = reader.number(source)
        if value is not None:
            summary[key] = value
    for ours, theirs in _TOKEN_TOTALS:
        total = reader.count(theirs)
        if total is not None:
            summary[ours] = total / completed
    for theirs, ours in _LATENCIES:
        for statistic in _STATISTICS:
            value_ms = reader.number(f"{statistic}_{theirs}_ms")
            if value_ms is None and statistic == "median":
                value_ms = reader.number(f"p50_{theirs}_ms")
            if value_ms is not None:
                summary[f"{statistic}_{ours}_s"] = value_ms * SECONDS_PER_MS
    concurrency = reader.count("max_concurrency")
    if concurrency is not None:
        summary["max_concurrency"] = float(concurrency)
    rate = reader.rate("request_rate")
    if rate is not None:
        summary["request_rate_per_s"] = rate

    return Measurements(
        ttft=_ttft_samples(reader, max_bins),
        decode=_decode_samples(reader, max_bins),
        summary=MappingProxyType(summary),
        sources=(SOURCE,),
    )


def equal_count_bins(x: np.ndarray, y: np.ndarray, *, max_bins: int) -> tuple[np.ndarray, np.ndarray,
                                                                               np.ndarray]:
    """Means of ``x`` and ``y`` over at most ``max_bins`` bins of consecutive ``x``, and their counts.

    When ``x`` takes at most ``max_bins`` distinct values each value is a bin; otherwise the points sorted
    by ``x`` are cut into ``max_bins`` runs of about equal length, never splitting equal ``x`` between two
    bins. The counts add up to ``len(x)`` and the count-weighted mean of the bins' ``y`` is ``y``'s mean.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size == 0:
        empty = np.empty(0)
        return empty, empty, np.empty(0, dtype=np.int64)
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    distinct, value_index = np.unique(xs, return_inverse=True)
    if distinct.size <= max_bins:
        bins = value_index
    else:
        by_rank = (np.arange(xs.size) * max_bins) // xs.size
        bins = by_rank[np.searchsorted(xs, xs, side="left")]  # equal x go where their first one went
    counts = np.bincount(bins)
    used = counts > 0
    counts = counts[used]
    x_mean = np.bincount(bins, weights=xs)[used] / counts
    y_mean = np.bincount(bins, weights=ys)[used] / counts
    return x_mean, y_mean, counts


def _ttft_samples(reader: _Reader, max_bins: int) -> tuple[TtftSample, ...]:
    input_lens = reader.numbers("input_lens")
    ttfts = reader.numbers("ttfts")
    if input_lens is None or ttfts is None:
        return ()
    reader.same_length("ttfts", ttfts, "input_lens", input_lens)
    ok = reader.succeeded(input_lens.size) & (ttfts > 0)
    x, y, counts = equal_count_bins(input_lens[ok], ttfts[ok], max_bins=max_bins)
    return tuple(TtftSample(input_tokens=float(xi), ttft_s=float(yi), count=int(n))
                 for xi, yi, n in zip(x, y, counts, strict=True))


def _decode_samples(reader: _Reader, max_bins: int) -> tuple[DecodeSample, ...]:
    input_lens = reader.numbers("input_lens")
    gaps_per_request = reader.gap_lists("itls")
    if input_lens is None or gaps_per_request is None:
        return ()
    reader.same_length("itls", gaps_per_request, "input_lens", input_lens)
    ok = reader.succeeded(input_lens.size)
    kept = [g for g, keep in zip(gaps_per_request, ok, strict=True) if keep]
    if not kept:
        return ()
    lengths = np.array([g.size for g in kept], dtype=np.int64)
    gaps = np.concatenate(kept)
    # gap j of a request ends with output token j + 1, computed over the prompt and tokens 0..j
    starts = np.cumsum(lengths) - lengths
    position = np.arange(gaps.size) - np.repeat(starts, lengths) + 1
    context = np.repeat(input_lens[ok], lengths) + position
    x, y, counts = equal_count_bins(context, gaps, max_bins=max_bins)
    return tuple(DecodeSample(context_tokens=float(xi), itl_s=float(yi), count=int(n))
                 for xi, yi, n in zip(x, y, counts, strict=True))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Reader:
    """Typed access to the keys of one result, every error naming its key."""

    def __init__(self, result: Mapping[str, Any], field: str | None) -> None:
        self.result = result
        self.field = field
        self._arrays: dict[str, np.ndarray | None] = {}

    def at(self, key: str) -> str:
        return key if self.field is None else f"{self.field}.{key}"

    def _fail(self, key: str, why: str) -> InvalidInput:
        return InvalidInput(f"{key!r} in the bench result {why}", field=self.at(key))

    def number(self, key: str) -> float | None:
        """A finite, non-negative number; None when absent or null."""
        value = self.result.get(key)
        if value is None:
            return None
        if not _is_number(value) or not math.isfinite(value) or value < 0:
            raise self._fail(key, f"must be a finite non-negative number, not {value!r}")
        return float(value)

    def count(self, key: str, *, required: bool = False) -> int | None:
        """A non-negative whole number; None when absent or null (an error when ``required``)."""
        value = self.result.get(key)
        if value is None:
            if required:
                raise self._fail(key, "is missing (is this a `vllm bench serve --save-result` file?)")
            return None
        if not _is_number(value) or not math.isfinite(value) or value < 0 or value != int(value):
            raise self._fail(key, f"must be a non-negative whole number, not {value!r}")
        return int(value)

    def rate(self, key: str) -> float | None:
        """A finite request rate [1/s]; None for an unlimited rate ("inf") or when absent."""
        value = self.result.get(key)
        if isinstance(value, str) and value.strip().lower() in _INFINITE_RATES:
            return None
        if _is_number(value) and math.isinf(value) and value > 0:
            return None
        if value is not None and (not _is_number(value) or not value > 0):
            raise self._fail(key, f"must be a positive number or \"inf\", not {value!r}")
        return self.number(key)

    def _list(self, key: str) -> list[Any] | None:
        value = self.result.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self._fail(key, f"must be a list, not {type(value).__name__}")
        if len(value) > MAX_BENCH_REQUESTS:
            raise self._fail(key, f"lists {len(value)} requests, over the limit of {MAX_BENCH_REQUESTS}")
        return value

    def numbers(self, key: str) -> np.ndarray | None:
        """A list of finite non-negative numbers, one per request (checked once, then remembered)."""
        if key not in self._arrays:
            values = self._list(key)
            if values is not None:
                for i, v in enumerate(values):
                    if not _is_number(v) or not math.isfinite(v) or v < 0:
                        raise self._fail(key, f"must hold finite non-negative numbers; entry {i} is {v!r}")
            self._arrays[key] = None if values is None else np.array(values, dtype=np.float64)
        return self._arrays[key]

    def gap_lists(self, key: str) -> list[np.ndarray] | None:
        """A list, per request, of lists of finite non-negative gaps [s]."""
        values = self._list(key)
        if values is None:
            return None
        total = 0
        arrays = []
        for i, gaps in enumerate(values):
            if not isinstance(gaps, list):
                raise self._fail(key, f"must hold one list per request; entry {i} is {type(gaps).__name__}")
            total += len(gaps)
            if total > MAX_BENCH_ITL_GAPS:
                raise self._fail(key, f"holds more than {MAX_BENCH_ITL_GAPS} gaps")
            for j, g in enumerate(gaps):
                if not _is_number(g) or not math.isfinite(g) or g < 0:
                    raise self._fail(key, f"must hold finite non-negative gaps; entry {i}, {j} is {g!r}")
            arrays.append(np.array(gaps, dtype=np.float64))
        return arrays

    def same_length(self, key: str, values: Any, reference_key: str, reference: Any) -> None:
        if len(values) != len(reference):
            raise self._fail(key, f"lists {len(values)} requests but {reference_key!r} lists "
                                  f"{len(reference)}")

    def succeeded(self, num_requests: int) -> np.ndarray:
        """Which requests succeeded: those whose ``errors`` entry is empty (all, without ``errors``)."""
        errors = self._list("errors")
        if errors is None:
            return np.ones(num_requests, dtype=bool)
        self.same_length("errors", errors, "input_lens", range(num_requests))
        for i, e in enumerate(errors):
            if e is not None and not isinstance(e, str):
                raise self._fail("errors", f"must hold strings (or null); entry {i} is {type(e).__name__}")
        return np.array([not e for e in errors], dtype=bool)
