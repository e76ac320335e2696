"""Parsing what a vLLM user has (a ``/metrics`` scrape, a ``vllm bench serve`` result) into Measurements.

Expected values come from the fixtures' own text, read here with a few independent lines, never from the
code under test.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from planner.diagnose import prometheus, vllm_bench
from planner.diagnose.measurements import HISTOGRAM_KEYS, SUMMARY_KEYS, HistogramSummary
from planner.diagnose.prometheus import describe_histograms, histogram_stats, parse_metrics_text
from planner.diagnose.vllm_bench import equal_count_bins, measurements_from_bench_result, parse_bench_result
from planner.errors import InvalidInput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
METRICS_TEXT = (FIXTURES / "vllm_metrics.txt").read_text(encoding="utf-8")
BENCH_TEXT = (FIXTURES / "vllm_bench_serve.json").read_text(encoding="utf-8")
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"

# vLLM histogram behind each key of Measurements.histograms, as the fixture (a V1 server) names them
FIXTURE_HISTOGRAMS = {
    "ttft_s": "vllm:time_to_first_token_seconds",
    "queue_s": "vllm:request_queue_time_seconds",
    "prefill_s": "vllm:request_prefill_time_seconds",
    "decode_s": "vllm:request_decode_time_seconds",
    "inference_s": "vllm:request_inference_time_seconds",
    "e2e_s": "vllm:e2e_request_latency_seconds",
    "itl_s": "vllm:inter_token_latency_seconds",
    "tpot_s": "vllm:request_time_per_output_token_seconds",
    "prompt_tokens": "vllm:request_prompt_tokens",
    "output_tokens": "vllm:request_generation_tokens",
    "iteration_tokens": "vllm:iteration_tokens_total",
}


def _raw_values(text: str) -> dict[str, list[tuple[str, float]]]:
    """sample name -> (label text, value) for every sample line: enough for label values without spaces."""
    values: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        values.setdefault(name, []).append((labels, float(value)))
    return values


RAW = _raw_values(METRICS_TEXT)


def _raw_one(name: str) -> float:
    (only,) = RAW[name]
    return only[1]


# -- the /metrics scrape -------------------------------------------------------------------------------


def test_fixture_scrape_gives_every_histogram_with_its_own_sum_and_count() -> None:
    m = parse_metrics_text(METRICS_TEXT)
    assert set(m.histograms) == set(HISTOGRAM_KEYS)
    assert m.sources == ("metrics scrape",)
    for key, name in FIXTURE_HISTOGRAMS.items():
        h = m.histograms[key]
        assert h.count == _raw_one(name + "_count")
        assert h.sum == pytest.approx(_raw_one(name + "_sum"), rel=1e-12)
        expected = [
            (float(re.search(r'le="([^"]+)"', labels).group(1)), v) for labels, v in RAW[name + "_bucket"]
        ]
        assert list(h.buckets) == sorted(expected)
        assert math.isinf(h.buckets[-1][0]) and h.buckets[-1][1] == h.count


def test_fixture_means_are_sum_over_count() -> None:
    summary = parse_metrics_text(METRICS_TEXT).summary
    for key, name in (
        ("mean_ttft_s", "vllm:time_to_first_token_seconds"),
        ("mean_itl_s", "vllm:inter_token_latency_seconds"),
        ("mean_tpot_s", "vllm:request_time_per_output_token_seconds"),
        ("mean_e2e_s", "vllm:e2e_request_latency_seconds"),
        ("mean_input_tokens", "vllm:request_prompt_tokens"),
        ("mean_output_tokens", "vllm:request_generation_tokens"),
    ):
        assert summary[key] == pytest.approx(_raw_one(name + "_sum") / _raw_one(name + "_count"), rel=1e-12)
    # finished requests, not the ones still running that already have a first token
    assert summary["num_requests"] == _raw_one("vllm:e2e_request_latency_seconds_count")
    assert _raw_one("vllm:time_to_first_token_seconds_count") > summary["num_requests"]


def test_fixture_gauges_and_nothing_but_known_keys() -> None:
    m = parse_metrics_text(METRICS_TEXT)
    assert m.summary["num_requests_running"] == _raw_one("vllm:num_requests_running")
    assert m.summary["num_requests_waiting"] == _raw_one("vllm:num_requests_waiting")
    assert m.summary["kv_cache_usage_fraction"] == _raw_one("vllm:kv_cache_usage_perc")
    assert set(m.summary) <= set(SUMMARY_KEYS)
    # the fixture carries the process collectors too; they must not leak anywhere
    assert "python_gc_objects_collected_total" in RAW and "process_resident_memory_bytes" in RAW
    assert not m.ttft and not m.decode and not m.iterations and m.kv_transfer is None


def test_fixture_is_plausible_for_the_workload_it_describes() -> None:
    """The fixture is what the brief asked for: ~1000 requests of ~2000 prompt tokens on an H100."""
    h = parse_metrics_text(METRICS_TEXT).histograms
    assert 0.25 < h["ttft_s"].mean < 0.35
    assert 0.08 < h["queue_s"].mean < 0.12 and 0.12 < h["prefill_s"].mean < 0.18
    assert 0.010 < h["itl_s"].mean < 0.014
    assert 1800 < h["prompt_tokens"].mean < 2200
    # every prompt and generated token goes through exactly one engine step
    total_tokens = _raw_one("vllm:prompt_tokens_total") + _raw_one("vllm:generation_tokens_total")
    assert h["iteration_tokens"].sum == total_tokens


def test_quantile_interpolates_inside_the_bucket() -> None:
    # 10 observations in (0, 1], 20 in (1, 2], 10 in (2, 4]
    h = HistogramSummary(count=40, sum=80.0, buckets=((1.0, 10), (2.0, 30), (4.0, 40), (math.inf, 40)))
    assert h.quantile(0.25) == pytest.approx(1.0)  # rank 10: the top of the first bucket
    assert h.quantile(0.5) == pytest.approx(1.5)  # rank 20: halfway through (1, 2]
    assert h.quantile(0.9) == pytest.approx(3.2)  # rank 36: 6 of 10 into (2, 4]
    assert h.quantile(0.1) == pytest.approx(0.4)  # first bucket: interpolated from 0
    stats = histogram_stats(h, quantiles=(0.5, 0.9))
    assert stats.mean == 2.0 and stats.count == 40
    assert stats.quantiles == {0.5: pytest.approx(1.5), 0.9: pytest.approx(3.2)}


def test_quantile_in_the_overflow_bucket_is_the_largest_finite_bound() -> None:
    h = HistogramSummary(count=10, sum=30.0, buckets=((1.0, 5), (math.inf, 10)))
    assert histogram_stats(h, quantiles=(0.9,)).quantiles[0.9] == 1.0
    empty = HistogramSummary(count=0, sum=0.0, buckets=((1.0, 0), (math.inf, 0)))
    assert histogram_stats(empty).mean is None
    assert all(v is None for v in histogram_stats(empty).quantiles.values())


@pytest.mark.parametrize("q", [0.0, 1.0, 1.5, -0.1])
def test_quantiles_outside_the_open_interval_are_refused(q: float) -> None:
    h = HistogramSummary(count=1, sum=1.0, buckets=((math.inf, 1),))
    with pytest.raises(InvalidInput) as err:
        histogram_stats(h, quantiles=(q,))
    assert err.value.extra["field"] == "quantiles"


def test_describe_histograms_of_the_fixture() -> None:
    stats = describe_histograms(parse_metrics_text(METRICS_TEXT).histograms)
    ttft = stats["ttft_s"]
    assert ttft.quantiles[0.5] <= ttft.quantiles[0.9] <= ttft.quantiles[0.99]
    # the fixture's TTFT median lies in vLLM's (0.25, 0.5] bucket
    assert 0.25 < ttft.quantiles[0.5] <= 0.5


DATA_PARALLEL = """\
# HELP vllm:time_to_first_token_seconds Time to first token.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 9.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 2.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 6.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 6.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 3.1
# HELP vllm:num_requests_running Running requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
"""


def test_label_sets_of_one_model_are_summed() -> None:
    m = parse_metrics_text(DATA_PARALLEL)
    h = m.histograms["ttft_s"]
    assert h.count == 16 and h.sum == pytest.approx(5.6)
    assert h.buckets == ((0.1, 3.0), (0.5, 13.0), (math.inf, 16.0))
    assert m.summary["mean_ttft_s"] == pytest.approx(5.6 / 16)
    assert m.summary["num_requests"] == 16
    assert m.summary["num_requests_running"] == 7  # requests add over ranks
    assert m.summary["kv_cache_usage_fraction"] == pytest.approx(0.3)  # each rank's own cache: averaged


TWO_MODELS = """\
# HELP vllm:e2e_request_latency_seconds End-to-end latency.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="small"} 8.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="small"} 10.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="small"} 10.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="small"} 7.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="large"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="large"} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="large"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="large"} 9.0
# HELP vllm:num_requests_waiting Waiting requests.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="small"} 0.0
vllm:num_requests_waiting{engine="0",model_name="large"} 5.0
"""


def test_several_models_need_a_choice() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_metrics_text(TWO_MODELS)
    assert err.value.extra["field"] == "model_name"
    assert err.value.extra["choices"] == ["large", "small"]
    assert "large" in err.value.detail and "small" in err.value.detail


def test_model_name_selects_one_model() -> None:
    large = parse_metrics_text(TWO_MODELS, model_name="large")
    assert large.histograms["e2e_s"].count == 4 and large.summary["mean_e2e_s"] == pytest.approx(9.0 / 4)
    assert large.summary["num_requests_waiting"] == 5
    small = parse_metrics_text(TWO_MODELS, model_name="small")
    assert small.histograms["e2e_s"].buckets == ((1.0, 8.0), (math.inf, 10.0))
    assert small.summary["num_requests_waiting"] == 0


def test_an_absent_model_name_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_metrics_text(TWO_MODELS, model_name="medium")
    assert err.value.extra["field"] == "model_name"
    with pytest.raises(InvalidInput) as err:
        parse_metrics_text(TWO_MODELS, model_name_field="measurements.metrics_model_name")
    assert err.value.extra["field"] == "measurements.metrics_model_name"
    assert parse_metrics_text(METRICS_TEXT, model_name=LLAMA).summary["num_requests"] == 1000


OLDER_NAMES = """\
# HELP vllm:time_per_output_token_seconds Time per output token.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{model_name="m",le="0.01"} 30.0
vllm:time_per_output_token_seconds_bucket{model_name="m",le="0.025"} 95.0
vllm:time_per_output_token_seconds_bucket{model_name="m",le="+Inf"} 100.0
vllm:time_per_output_token_seconds_count{model_name="m"} 100.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 1.3
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.62
"""


def test_older_metric_names_are_read() -> None:
    m = parse_metrics_text(OLDER_NAMES)
    assert m.histograms["itl_s"].count == 100
    assert m.summary["mean_itl_s"] == pytest.approx(0.013)
    assert m.summary["kv_cache_usage_fraction"] == 0.62


def test_newer_name_wins_when_both_are_exposed() -> None:
    newer = OLDER_NAMES.replace("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds")
    newer = newer.replace("1.3", "1.1").replace("gpu_cache_usage_perc", "kv_cache_usage_perc")
    newer = newer.replace("0.62", "0.5")
    m = parse_metrics_text(OLDER_NAMES + newer)
    assert m.summary["mean_itl_s"] == pytest.approx(0.011)
    assert m.summary["kv_cache_usage_fraction"] == 0.5


@pytest.mark.parametrize(
    "bad, line",
    [
        ('vllm:num_requests_running{model_name="m" 3\n', 1),
        ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} three\n', 2),
        ("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n# TYPE vllm:x\n", 3),
    ],
)
def test_malformed_text_names_the_field_and_line(bad: str, line: int) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_metrics_text(bad, field="metrics_text")
    assert err.value.extra["field"] == "metrics_text"
    assert f"line {line}" in err.value.detail


def test_a_scrape_without_vllm_metrics_says_what_was_expected() -> None:
    others = "\n".join(line for line in METRICS_TEXT.splitlines() if "vllm:" not in line)
    assert "python_gc_objects_collected_total" in others
    for text in (others, "", "# just a comment\n"):
        with pytest.raises(InvalidInput) as err:
            parse_metrics_text(text, field="scrape")
        assert err.value.extra["field"] == "scrape"
        assert "vllm:time_to_first_token_seconds" in err.value.detail


def test_inconsistent_histograms_are_refused() -> None:
    falling = DATA_PARALLEL.replace('le="0.5",model_name="m"} 9.0', 'le="0.5",model_name="m"} 1.0')
    truncated = DATA_PARALLEL.replace(
        'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 3.1\n', ""
    )
    no_bound = DATA_PARALLEL.replace('le="0.1"', 'le="soon"')
    not_a_fraction = DATA_PARALLEL.replace("} 0.4", "} 40.0")
    for text, words in (
        (falling, "decrease"),
        (truncated, "no _sum"),
        (no_bound, "'le'"),
        (not_a_fraction, "fraction"),
    ):
        with pytest.raises(InvalidInput) as err:
            parse_metrics_text(text)
        assert words in err.value.detail


def test_a_histogram_without_an_inf_bucket_gets_one_from_its_count() -> None:
    text = "\n".join(line for line in OLDER_NAMES.splitlines() if "+Inf" not in line)
    h = parse_metrics_text(text).histograms["itl_s"]
    assert h.buckets[-1] == (math.inf, 100.0)


def test_oversized_scrapes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_metrics_text("#" * (prometheus.MAX_METRICS_TEXT_BYTES + 1))
    assert err.value.extra["field"] == "metrics_text"
    monkeypatch.setattr(prometheus, "MAX_METRICS_SAMPLES", 50)
    with pytest.raises(InvalidInput) as err:
        parse_metrics_text(METRICS_TEXT)
    assert "50 samples" in err.value.detail
    with pytest.raises(InvalidInput):
        parse_metrics_text(METRICS_TEXT.encode())  # type: ignore[arg-type]


# -- the vllm bench serve result -----------------------------------------------------------------------

BENCH = json.loads(BENCH_TEXT)
OK = [i for i, e in enumerate(BENCH["errors"]) if not e]


def test_bench_fixture_is_consistent_with_itself() -> None:
    """The fixture's aggregates are what its per-request lists say (as vLLM computes them)."""
    assert BENCH["completed"] == len(OK) == len(BENCH["ttfts"]) - 1
    assert BENCH["total_input_tokens"] == sum(BENCH["input_lens"][i] for i in OK)
    assert BENCH["total_output_tokens"] == sum(BENCH["output_lens"])
    assert BENCH["mean_ttft_ms"] == pytest.approx(1000 * np.mean([BENCH["ttfts"][i] for i in OK]), rel=1e-12)
    gaps = [g for i in OK for g in BENCH["itls"][i]]
    assert BENCH["mean_itl_ms"] == pytest.approx(1000 * np.mean(gaps), rel=1e-12)
    assert BENCH["request_throughput"] == pytest.approx(BENCH["completed"] / BENCH["duration"], rel=1e-12)


def test_bench_summary_is_in_seconds() -> None:
    m = parse_bench_result(BENCH_TEXT)
    s = m.summary
    assert m.sources == ("vllm bench serve",)
    assert set(s) <= set(SUMMARY_KEYS)
    for metric, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        for statistic in ("mean", "median", "p90", "p99"):
            expected_s = BENCH[f"{statistic}_{metric}_ms"] / 1000
            assert s[f"{statistic}_{ours}_s"] == pytest.approx(expected_s, rel=1e-12)
    assert s["num_requests"] == BENCH["completed"]
    assert s["duration_s"] == BENCH["duration"]
    assert s["request_throughput_per_s"] == BENCH["request_throughput"]
    assert s["output_throughput_tokens_per_s"] == BENCH["output_throughput"]
    assert s["mean_input_tokens"] == pytest.approx(BENCH["total_input_tokens"] / BENCH["completed"])
    assert s["mean_output_tokens"] == pytest.approx(BENCH["total_output_tokens"] / BENCH["completed"])
    assert s["max_concurrency"] == BENCH["max_concurrency"]
    assert BENCH["request_rate"] == "inf" and "request_rate_per_s" not in s


def test_ttft_bins_keep_the_count_and_the_mean() -> None:
    ttft = parse_bench_result(BENCH_TEXT).ttft
    assert 1 < len(ttft) <= vllm_bench.DEFAULT_MAX_BINS
    counts = np.array([b.count for b in ttft])
    assert counts.sum() == BENCH["completed"]  # the failed request is left out
    mean_ttft_s = np.sum(counts * [b.ttft_s for b in ttft]) / counts.sum()
    assert mean_ttft_s == pytest.approx(np.mean([BENCH["ttfts"][i] for i in OK]), rel=1e-12)
    assert mean_ttft_s == pytest.approx(BENCH["mean_ttft_ms"] / 1000, rel=1e-12)
    mean_input = np.sum(counts * [b.input_tokens for b in ttft]) / counts.sum()
    assert mean_input == pytest.approx(BENCH["total_input_tokens"] / BENCH["completed"], rel=1e-12)
    assert all(a.input_tokens < b.input_tokens for a, b in zip(ttft, ttft[1:], strict=False))


def test_decode_bins_keep_the_count_and_the_mean_gap() -> None:
    decode = parse_bench_result(BENCH_TEXT).decode
    assert 1 < len(decode) <= vllm_bench.DEFAULT_MAX_BINS
    counts = np.array([b.count for b in decode])
    assert counts.sum() == sum(len(BENCH["itls"][i]) for i in OK)
    mean_gap_s = np.sum(counts * [b.itl_s for b in decode]) / counts.sum()
    assert mean_gap_s == pytest.approx(BENCH["mean_itl_ms"] / 1000, rel=1e-12)
    # context of gap j of a request: its prompt and the j + 1 tokens before the one the gap ends with
    contexts = [BENCH["input_lens"][i] + j + 1 for i in OK for j in range(len(BENCH["itls"][i]))]
    mean_context = np.sum(counts * [b.context_tokens for b in decode]) / counts.sum()
    assert mean_context == pytest.approx(np.mean(contexts), rel=1e-12)
    assert decode[0].context_tokens >= min(contexts) and decode[-1].context_tokens <= max(contexts)


def test_bench_without_detail_or_percentiles() -> None:
    lean = {
        k: v
        for k, v in BENCH.items()
        if k not in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
        and not re.match(r"(median|p\d+)_", k)
    }
    lean["max_concurrency"] = None
    lean["request_rate"] = 12.5
    m = measurements_from_bench_result(lean)
    assert m.ttft == () and m.decode == ()
    assert "median_ttft_s" not in m.summary and "p99_itl_s" not in m.summary
    assert "max_concurrency" not in m.summary
    assert m.summary["request_rate_per_s"] == 12.5
    assert m.summary["mean_ttft_s"] == pytest.approx(BENCH["mean_ttft_ms"] / 1000)
    minimal = measurements_from_bench_result({"completed": 3})
    assert dict(minimal.summary) == {"num_requests": 3.0}


def test_median_falls_back_to_p50() -> None:
    result = {"completed": 2, "p50_ttft_ms": 120.0}
    assert measurements_from_bench_result(result).summary["median_ttft_s"] == pytest.approx(0.12)


def test_ttfts_without_errors_list_count_every_request() -> None:
    result = {"completed": 4, "input_lens": [100, 200, 200, 400], "ttfts": [0.1, 0.2, 0.4, 0.5]}
    ttft = measurements_from_bench_result(result, max_bins=12).ttft
    # three distinct prompt lengths: one bin each, the two of 200 tokens averaged
    assert [(b.input_tokens, b.ttft_s, b.count) for b in ttft] == [
        (100.0, pytest.approx(0.1), 1),
        (200.0, pytest.approx(0.3), 2),
        (400.0, pytest.approx(0.5), 1),
    ]


def _with(key: str, value: object) -> dict:
    result = copy.deepcopy(BENCH)
    result[key] = value
    return result


@pytest.mark.parametrize(
    "key, value",
    [
        ("completed", "59"),
        ("completed", 59.5),
        ("completed", True),
        ("duration", -1.0),
        ("duration", float("nan")),
        ("mean_ttft_ms", "140"),
        ("p99_itl_ms", [150.0]),
        ("total_input_tokens", 1.5e3 + 0.5),
        ("request_rate", "fast"),
        ("request_rate", 0),
        ("max_concurrency", "8"),
        ("input_lens", "2048"),
        ("ttfts", [0.1] * 59 + ["0.2"]),
        ("ttfts", [0.1] * 59),  # one short of input_lens
        ("itls", [[0.01]] * 59 + [0.01]),
        ("itls", [[0.01, -0.01]] * 60),
        ("errors", [None] * 59 + [404]),
    ],
)
def test_wrong_types_are_refused_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(InvalidInput) as err:
        measurements_from_bench_result(_with(key, value))
    assert err.value.extra["field"] == key
    with pytest.raises(InvalidInput) as err:
        measurements_from_bench_result(_with(key, value), field="vllm_bench")
    assert err.value.extra["field"] == f"vllm_bench.{key}"


def test_documents_that_are_not_a_bench_result() -> None:
    for text in ("{not json", "[1, 2]", "{}", json.dumps({"completed": 0})):
        with pytest.raises(InvalidInput) as err:
            parse_bench_result(text)
        assert err.value.extra["field"] in ("bench_result", "completed")
    with pytest.raises(InvalidInput) as err:
        parse_bench_result("[" * 100_000 + "]" * 100_000)
    assert err.value.extra["field"] == "bench_result"


def test_oversized_bench_lists_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_bench, "MAX_BENCH_REQUESTS", 10)
    with pytest.raises(InvalidInput) as err:
        parse_bench_result(BENCH_TEXT)
    assert err.value.extra["field"] == "input_lens"
    monkeypatch.setattr(vllm_bench, "MAX_BENCH_REQUESTS", 1000)
    monkeypatch.setattr(vllm_bench, "MAX_BENCH_ITL_GAPS", 100)
    with pytest.raises(InvalidInput) as err:
        parse_bench_result(BENCH_TEXT)
    assert err.value.extra["field"] == "itls"


def test_equal_count_bins_never_split_equal_values() -> None:
    # sorted, the five 1s take ranks 0..4, across the cut between runs of four
    x = np.array([5, 1, 1, 1, 1, 1, 2, 3, 3, 4, 6, 7, 8, 9, 9, 10], dtype=float)
    y = np.arange(x.size, dtype=float)
    xm, ym, counts = equal_count_bins(x, y, max_bins=4)
    assert counts.sum() == x.size and len(counts) <= 4
    assert np.sum(counts * ym) == pytest.approx(y.sum())
    assert np.all(np.diff(xm) > 0)
    assert xm[0] == 1.0 and counts[0] == 5
    assert ym[0] == pytest.approx(np.mean(y[x == 1]))
    assert np.sum(counts * xm) == pytest.approx(x.sum())
    empty = equal_count_bins(np.array([]), np.array([]), max_bins=3)
    assert all(a.size == 0 for a in empty)
