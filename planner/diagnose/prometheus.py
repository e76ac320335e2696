"""A vLLM ``/metrics`` scrape (Prometheus text exposition format) as :class:`Measurements`.

The text is read by prometheus_client's own parser; this module only picks the vLLM series out of it.
vLLM names its metrics ``vllm:<name>`` and labels them with ``model_name`` (and, in the V1 engine, with
``engine``, one value per data-parallel rank). Histograms arrive as ``_bucket{le=...}``, ``_sum`` and
``_count`` samples. Series of one model are summed over the other labels; a scrape holding several models
needs ``model_name`` to say which one is meant.

Only what the scrape states exactly goes into ``Measurements.summary`` (means from ``_sum / _count``,
gauges); quantiles estimated from buckets are left to :func:`histogram_stats`, which says what they are.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from prometheus_client.parser import text_fd_to_metric_families

from planner.diagnose.measurements import HistogramSummary, Measurements
from planner.errors import InvalidInput

#: largest scrape accepted, UTF-8 encoded [bytes]
MAX_METRICS_TEXT_BYTES = 5_000_000
#: most samples (lines with a value) accepted in one scrape
MAX_METRICS_SAMPLES = 100_000
#: quantiles :func:`histogram_stats` reports unless told otherwise
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)

#: ``Measurements.histograms`` key -> vLLM histogram names, preferred first (later ones are older names)
VLLM_HISTOGRAMS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "ttft_s": ("vllm:time_to_first_token_seconds",),
    "queue_s": ("vllm:request_queue_time_seconds",),
    "prefill_s": ("vllm:request_prefill_time_seconds",),
    "decode_s": ("vllm:request_decode_time_seconds",),
    "inference_s": ("vllm:request_inference_time_seconds",),
    "e2e_s": ("vllm:e2e_request_latency_seconds",),
    "itl_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot_s": ("vllm:request_time_per_output_token_seconds",),
    "prompt_tokens": ("vllm:request_prompt_tokens",),
    "output_tokens": ("vllm:request_generation_tokens",),
    "iteration_tokens": ("vllm:iteration_tokens_total",),
})
#: ``Measurements.summary`` key -> (vLLM gauge names, preferred first; how data-parallel ranks combine)
VLLM_GAUGES: Mapping[str, tuple[tuple[str, ...], str]] = MappingProxyType({
    "num_requests_running": (("vllm:num_requests_running",), "sum"),
    "num_requests_waiting": (("vllm:num_requests_waiting",), "sum"),
    # a fraction in 0..1 despite the name; each rank has its own cache, so ranks are averaged
    "kv_cache_usage_fraction": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "mean"),
})
#: ``Measurements.summary`` key -> the histogram whose ``_sum / _count`` it is
_MEANS = MappingProxyType({
    "mean_ttft_s": "ttft_s",
    "mean_tpot_s": "tpot_s",
    "mean_itl_s": "itl_s",
    "mean_e2e_s": "e2e_s",
    "mean_input_tokens": "prompt_tokens",
    "mean_output_tokens": "output_tokens",
})
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

SOURCE = "metrics scrape"

_Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class HistogramStats:
    """Mean and bucket-interpolated quantiles of one histogram (same unit as the histogram)."""

    count: float
    #: exact, from ``_sum / _count``; None without observations
    mean: float | None
    #: q -> estimate by linear interpolation inside a bucket (PromQL's ``histogram_quantile``), so only
    #: as fine as the buckets; None without buckets or observations
    quantiles: Mapping[float, float | None]


def histogram_stats(histogram: HistogramSummary,
                    quantiles: Sequence[float] = DEFAULT_QUANTILES) -> HistogramStats:
    """Mean and ``quantiles`` (each strictly between 0 and 1) of ``histogram``."""
    for q in quantiles:
        if not (isinstance(q, int | float) and 0.0 < q < 1.0):
            raise InvalidInput(f"quantile {q!r} is not strictly between 0 and 1", field="quantiles")
    return HistogramStats(
        count=histogram.count,
        mean=histogram.mean,
        quantiles=MappingProxyType({float(q): histogram.quantile(float(q)) for q in quantiles}),
    )


def describe_histograms(histograms: Mapping[str, HistogramSummary],
                        quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, HistogramStats]:
    """:func:`histogram_stats` of every histogram, under the same keys."""
    return {key: histogram_stats(h, quantiles) for key, h in histograms.items()}


def parse_metrics_text(text: str, *, model_name: str | None = None, field: str = "metrics_text",
                       model_name_field: str = "model_name") -> Measurements:
    """The vLLM histograms and gauges of one ``/metrics`` scrape.

    Parameters
    ----------
    text
        The scrape, Prometheus text exposition format (what ``curl http://host:8000/metrics`` prints).
    model_name
        Which model to read when the scrape holds series of several ``model_name`` values.
    field
        Named in the errors as the offending input.
    model_name_field
        Named in the errors about the choice of model.

    Returns
    -------
    Measurements
        ``histograms`` under the keys of :data:`VLLM_HISTOGRAMS` that the scrape has, ``summary`` with the
        means of those histograms, ``num_requests`` (finished requests, else requests that got a first
        token) and the gauges of :data:`VLLM_GAUGES`.

    Raises
    ------
    InvalidInput
        Text over the size limits or that the parser rejects, a scrape without any of the expected vLLM
        metrics, an inconsistent histogram, several models and no (or an absent) ``model_name``.
    """
    samples = _vllm_samples(_bounded(text, field), field)
    wanted = {name for names in VLLM_HISTOGRAMS.values() for name in names}
    wanted |= {name for names, _ in VLLM_GAUGES.values() for name in names}
    present = {_base_name(name) for name in samples} & wanted
    if not present:
        expected = ", ".join(names[0] for names in VLLM_HISTOGRAMS.values())
        raise InvalidInput(f"the scrape has none of the vLLM metrics expected (such as {expected})",
                           field=field)
    relevant = {name: series for name, series in samples.items() if _base_name(name) in present}
    relevant = _select_model(relevant, model_name, model_name_field)

    histograms: dict[str, HistogramSummary] = {}
    for key, names in VLLM_HISTOGRAMS.items():
        for name in names:
            found = _histogram(relevant, name, field)
            if found is not None:
                histograms[key] = found
                break

    summary: dict[str, float] = {}
    for key, source in _MEANS.items():
        mean = histograms[source].mean if source in histograms else None
        if mean is not None:
            summary[key] = mean
    for source in ("e2e_s", "ttft_s"):
        if source in histograms:
            summary["num_requests"] = histograms[source].count
            break
    for key, (names, combine) in VLLM_GAUGES.items():
        for name in names:
            values = [v for _, v in relevant.get(name, ()) if math.isfinite(v)]
            if key.endswith("_fraction") and any(not 0.0 <= v <= 1.0 for v in values):
                raise InvalidInput(f"{name} is not a fraction in 0..1: {values}", field=field)
            if values:
                summary[key] = sum(values) if combine == "sum" else sum(values) / len(values)
                break

    return Measurements(histograms=MappingProxyType(histograms), summary=MappingProxyType(summary),
                        sources=(SOURCE,))


class _NumberedLines(io.StringIO):
    """Lines of a string, counting how many were handed out (the parser reports no position)."""

    line_number = 0

    def __next__(self) -> str:
        line = super().__next__()
        self.line_number += 1
        return line


def _bounded(text: str, field: str) -> str:
    if not isinstance(text, str):
        raise InvalidInput(f"the scrape must be text, not {type(text).__name__}", field=field)
    if len(text) > MAX_METRICS_TEXT_BYTES or len(text.encode("utf-8")) > MAX_METRICS_TEXT_BYTES:
        raise InvalidInput(f"the scrape is over {MAX_METRICS_TEXT_BYTES} bytes", field=field)
    return text


def _vllm_samples(text: str, field: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """sample name -> (labels, value) of every ``vllm:`` sample; everything else is only counted."""
    lines = _NumberedLines(text)
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    num_samples = 0
    try:
        for family in text_fd_to_metric_families(lines):
            num_samples += len(family.samples)
            if num_samples > MAX_METRICS_SAMPLES:
                raise InvalidInput(f"the scrape has more than {MAX_METRICS_SAMPLES} samples", field=field)
            for sample in family.samples:
                if sample.name.startswith("vllm:"):
                    samples[sample.name].append((sample.labels, float(sample.value)))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        reason = f": {exc}" if str(exc) else ""
        raise InvalidInput(
            f"not Prometheus text exposition format at line {lines.line_number}{reason}", field=field
        ) from exc
    return samples


def _base_name(sample_name: str) -> str:
    for suffix in _HISTOGRAM_SUFFIXES:
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def _select_model(samples: dict[str, list[tuple[dict[str, str], float]]], model_name: str | None,
                  field: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples of one model: the only one there is, or ``model_name``."""
    choices = sorted({labels["model_name"] for series in samples.values() for labels, _ in series
                      if "model_name" in labels})
    if model_name is None:
        if len(choices) > 1:
            raise InvalidInput(f"the scrape holds several models ({', '.join(choices)}); say which with "
                               "model_name", field=field, choices=choices)
        return samples
    if model_name not in choices:
        listed = ", ".join(choices) if choices else "no model_name label at all"
        raise InvalidInput(f"model {model_name!r} is not in the scrape (it has {listed})",
                           field=field, choices=choices)
    return {name: [(labels, v) for labels, v in series if labels.get("model_name") == model_name]
            for name, series in samples.items()}


def _histogram(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str,
               field: str) -> HistogramSummary | None:
    """Histogram ``name``, summed over its label sets; None when the scrape does not have it."""
    buckets: dict[_Labels, dict[float, float]] = defaultdict(dict)
    sums: dict[_Labels, float] = {}
    counts: dict[_Labels, float] = {}
    for labels, value in samples.get(name + "_bucket", ()):
        bound_text = labels.get("le")
        try:
            bound = float(bound_text) if bound_text is not None else math.nan
        except ValueError:
            bound = math.nan
        if math.isnan(bound):
            raise InvalidInput(f"{name}_bucket has a sample without a numeric 'le' label ({bound_text!r})",
                               field=field)
        buckets[_series_key(labels)][bound] = value
    for labels, value in samples.get(name + "_sum", ()):
        sums[_series_key(labels)] = value
    for labels, value in samples.get(name + "_count", ()):
        counts[_series_key(labels)] = value
    keys = set(buckets) | set(sums) | set(counts)
    if not keys:
        return None
    parts = [_one_series(name, buckets.get(k, {}), sums.get(k), counts.get(k), field) for k in sorted(keys)]
    return _sum_series(parts)


def _series_key(labels: Mapping[str, str]) -> _Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def _one_series(name: str, buckets: Mapping[float, float], total: float | None, count: float | None,
                field: str) -> HistogramSummary:
    """One label set's histogram, checked: cumulative counts that never fall, a +Inf bucket."""
    bounds = sorted(buckets)
    cumulative = [buckets[b] for b in bounds]
    if count is None and bounds and math.isinf(bounds[-1]):
        count = cumulative[-1]
    if count is None or total is None:
        missing = "_count" if count is None else "_sum"
        raise InvalidInput(f"histogram {name} has no {missing} sample (is the scrape cut short?)",
                           field=field)
    values = [total, count, *cumulative]
    if not all(math.isfinite(v) for v in values) or count < 0 or any(c < 0 for c in cumulative):
        raise InvalidInput(f"histogram {name} has a negative or non-finite value", field=field)
    if any(later < earlier for earlier, later in zip(cumulative, cumulative[1:], strict=False)):
        raise InvalidInput(f"histogram {name} has cumulative bucket counts that decrease", field=field)
    if bounds and not math.isinf(bounds[-1]):
        bounds.append(math.inf)
        cumulative.append(count)
    return HistogramSummary(count=count, sum=total, buckets=tuple(zip(bounds, cumulative, strict=True)))


def _sum_series(parts: Iterable[HistogramSummary]) -> HistogramSummary:
    """The histogram of all observations of ``parts``: counts and sums add, and so do cumulative counts
    at a bound every part has (bounds only some parts have cannot be combined and are dropped)."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    common = set.intersection(*({b for b, _ in p.buckets} for p in parts))
    cumulative = {b: 0.0 for b in common}
    for part in parts:
        for bound, cum in part.buckets:
            if bound in cumulative:
                cumulative[bound] += cum
    return HistogramSummary(
        count=sum(p.count for p in parts),
        sum=sum(p.sum for p in parts),
        buckets=tuple(sorted(cumulative.items())),
    )
