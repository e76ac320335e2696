"""POST /v1/diagnose and /v1/calibrate through the app: the request examples answer, a vLLM metrics scrape
and a `vllm bench serve` result are diagnosed, a fitted profile is accepted inline by every other endpoint
and moves their answers, and bad input is a problem that names the field.

Which fault a diagnosis finds is tested on synthetic measurements in tests/unit/test_diagnose.py; whether a
fit recovers a known profile in tests/unit/test_calibrate.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from planner.api.diagnose_schemas import CalibrateRequest, DiagnoseRequest
from planner.diagnose.calibrate import LOSS_SCALE

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LLAMA_8B = "meta-llama/Llama-3.1-8B"
DEPLOYMENT = {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1}, "token_budget": 2048}
WORKLOAD = {"input_tokens": 2000, "output_tokens": 300, "arrival": {"kind": "poisson", "rate_per_s": 3.0}}


def _example(model: type) -> dict[str, Any]:
    return model.model_config["json_schema_extra"]["examples"][0]


async def test_diagnose_example_blames_queueing_not_prefill(client):
    r = await client.post("/v1/diagnose", json=_example(DiagnoseRequest))
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["slowest_phase"] == "queueing"
    f = d["findings"][0]
    assert f["symptom"] == "first_token_later_for_longer_prompts" and f["phase"] == "queueing"
    assert f["measured"]["queue_s"] == pytest.approx(1.0)
    assert f["expected"]["ttft_s"] < f["measured"]["ttft_s"]
    assert d["expected"]["ttft_s"]["mean"] == pytest.approx(f["expected"]["ttft_s"], rel=0.5)
    assert d["measurement_sources"] == ["request body"]


async def test_diagnose_reads_a_vllm_metrics_scrape(client):
    body = {
        "model": LLAMA_8B,
        "deployment": DEPLOYMENT,
        "workload": WORKLOAD,
        "measurements": {"metrics_text": (FIXTURES / "vllm_metrics.txt").read_text()},
    }
    r = await client.post("/v1/diagnose", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["measurement_sources"] == ["metrics scrape"]
    ttft = next(f for f in d["findings"] if f["symptom"] == "first_token_later_for_longer_prompts")
    # the scrape's own means (sum / count of its histograms), as the finding quotes them
    text = (FIXTURES / "vllm_metrics.txt").read_text()

    def mean(name: str) -> float:
        total = sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{name}_sum"))
        count = sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{name}_count"))
        return total / count

    assert ttft["measured"]["ttft_s"] == pytest.approx(mean("vllm:time_to_first_token_seconds"))
    assert ttft["measured"]["queue_s"] == pytest.approx(mean("vllm:request_queue_time_seconds"))
    assert ttft["measured"]["prefill_s"] == pytest.approx(mean("vllm:request_prefill_time_seconds"))
    assert {f["symptom"] for f in d["findings"]} >= {"later_tokens_slower_as_histories_grow"}


async def test_diagnose_reads_a_vllm_bench_result(client):
    result = json.loads((FIXTURES / "vllm_bench_serve.json").read_text())
    body = {
        "model": LLAMA_8B,
        "deployment": DEPLOYMENT,
        "workload": WORKLOAD,
        "measurements": {"vllm_bench_result": result},
    }
    r = await client.post("/v1/diagnose", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["measurement_sources"] == ["vllm bench serve"]
    decode = next(f for f in d["findings"] if f["symptom"] == "later_tokens_slower_as_histories_grow")
    assert decode["measured"]["itl_s"] > 0 and "itl_slope_s_per_token" in decode["measured"]


async def test_calibrate_example_then_every_endpoint_takes_the_profile(client):
    r = await client.post("/v1/calibrate", json=_example(CalibrateRequest))
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["status"] == "fitted"
    assert d["median_abs_error_after_fraction"] < d["median_abs_error_before_fraction"]
    assert {p["name"] for p in d["parameters"]} >= {
        "gemm_efficiency_scale",
        "memory_efficiency_scale",
        "step_overhead_s",
        "collective_efficiency_scale",
    }
    assert len(d["residuals"]) == 6 and {x["kind"] for x in d["residuals"]} == {"benchmark_ttft", "benchmark_tpot"}
    assert set(d["could_not_pin_down"]) == {p["name"] for p in d["parameters"] if not p["pinned_down"]}
    profile = d["calibration"]
    slow = profile | {"memory_efficiency_scale": 0.5}
    base = {"model": LLAMA_8B, "gpu": "h100-sxm"}
    decode = base | {"batch_size": 8, "context_tokens": 4000}
    plain = (await client.post("/v1/estimate/decode", json=decode)).json()["step_latency_s"]
    calibrated = await client.post("/v1/estimate/decode", json=decode | {"calibration": slow})
    assert calibrated.status_code == 200, calibrated.text
    assert calibrated.json()["step_latency_s"] > plain  # half the memory efficiency: a slower decode step
    prefill = base | {"prompt_tokens": 4000}
    assert (
        await client.post("/v1/estimate/prefill", json=prefill | {"calibration": profile})
    ).status_code == 200
    ev_body = {"model": LLAMA_8B, "deployment": DEPLOYMENT, "workload": WORKLOAD}
    ev0 = (await client.post("/v1/evaluate", json=ev_body)).json()
    ev1 = await client.post("/v1/evaluate", json=ev_body | {"calibration": slow})
    assert ev1.status_code == 200 and ev1.json()["tpot_s"]["mean"] > ev0["tpot_s"]["mean"]
    plan = {
        "model": LLAMA_8B,
        "gpu": "h100-sxm",
        "workload": {"input_tokens": 1000, "output_tokens": 200},
        "slo": {"ttft_s": 1.0, "itl_s": 0.05},
        "calibration": profile,
    }
    assert (await client.post("/v1/plan/chunked", json=plan)).status_code == 200


async def test_calibrate_fits_benchmark_points_alone(client):
    body = {
        "model": LLAMA_8B,
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
        "benchmarks": [
            {"input_tokens": 1000, "output_tokens": 500, "concurrency": c, "measured_tpot_s": t}
            for c, t in ((1, 0.0075), (16, 0.0095), (64, 0.0140))
        ],
    }
    r = await client.post("/v1/calibrate", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert {x["kind"] for x in d["residuals"]} == {"benchmark_tpot"}

    def robust_loss(key: str) -> float:  # what the fit minimizes over the data: soft_l1 of the log ratios
        z = [(math.log(x[key] / x["measured"]) / LOSS_SCALE) ** 2 for x in d["residuals"]]
        return sum(2.0 * (math.sqrt(1.0 + v) - 1.0) for v in z)

    assert robust_loss("predicted_after") < robust_loss("predicted_before")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/v1/diagnose",
            {"model": LLAMA_8B, "deployment": DEPLOYMENT, "workload": WORKLOAD, "measurements": {}},
            "measurements",
        ),
        (
            "/v1/diagnose",
            {
                "model": LLAMA_8B,
                "deployment": DEPLOYMENT,
                "workload": WORKLOAD,
                "measurements": {"metrics_text": "this is { not prometheus"},
            },
            "measurements.metrics_text",
        ),
        ("/v1/calibrate", {"model": LLAMA_8B, "deployment": DEPLOYMENT}, "measurements"),
        (
            "/v1/calibrate",
            {
                "model": LLAMA_8B,
                "deployment": DEPLOYMENT,
                "benchmarks": [{"input_tokens": 100, "output_tokens": 10, "measured_ttft_s": 0.1}],
            },
            "benchmarks.0",
        ),
        (
            "/v1/calibrate",
            {
                "model": LLAMA_8B,
                "deployment": DEPLOYMENT,
                "measurements": {
                    "iterations": [{"duration_s": 0.02, "decode_tokens": 8, "prefill_tokens": 0}]
                },
            },
            "workload",
        ),
    ],
)
async def test_bad_input_is_a_problem_naming_the_field(client, path, body, field):
    r = await client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    p = r.json()
    named = [p.get("field")] + [
        e.get("field") or ".".join(str(x) for x in e.get("loc", ())) for e in p.get("errors", [])
    ]
    assert any(n is not None and n.startswith(field) for n in named), p


async def test_calibration_out_of_bounds_is_422(client):
    body = {
        "model": LLAMA_8B,
        "gpu": "h100-sxm",
        "prompt_tokens": 100,
        "calibration": {"memory_efficiency_scale": 9},
    }
    r = await client.post("/v1/estimate/prefill", json=body)
    assert r.status_code == 422
    assert "calibration" in r.text


async def test_a_fit_on_top_of_a_given_profile_answers_it_against_the_catalog(client):
    # decode steps measured on a GPU whose memory runs at 0.8 of the catalog's efficiency
    truth = {"memory_efficiency_scale": 0.8}
    samples = []
    for batch, context in ((1, 1000), (8, 4000), (16, 16000), (64, 2000)):
        body = {"model": LLAMA_8B, "gpu": "h100-sxm", "batch_size": batch, "context_tokens": context,
                "calibration": truth}
        est = await client.post("/v1/estimate/decode", json=body)
        assert est.status_code == 200, est.text
        step = est.json()["step_latency_s"]
        samples.append({"context_tokens": context, "itl_s": step, "batch_size": batch})
    body = {"model": LLAMA_8B, "deployment": DEPLOYMENT, "workload": WORKLOAD,
            "measurements": {"decode_by_context": samples}}
    for start in (None, {"memory_efficiency_scale": 0.5}):
        r = await client.post("/v1/calibrate", json=body | ({"calibration": start} if start else {}))
        assert r.status_code == 200, r.text
        assert r.json()["calibration"]["memory_efficiency_scale"] == pytest.approx(0.8, rel=0.03)


async def test_timeline_applies_the_calibration(client):
    body = {"model": LLAMA_8B, "deployment": DEPLOYMENT,
            "scenario": {"running_streams": 4, "context_tokens": 2000, "prompt_tokens": 3000}}
    plain = (await client.post("/v1/timeline", json=body)).json()["timelines"][0]
    slow = await client.post("/v1/timeline", json=body | {"calibration": {"memory_efficiency_scale": 0.5}})
    assert slow.status_code == 200, slow.text
    assert slow.json()["timelines"][0]["decode_only_iteration_s"] > plain["decode_only_iteration_s"]
