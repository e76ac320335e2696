"""POST /v1/plan/chunked, /v1/plan/disaggregated and /v1/plan: shapes, the contract's fields, answers
instead of errors for SLOs nothing meets, problems that name the field, and that every chosen
configuration meets its SLO when POSTed back to /v1/evaluate.

Whether the searches find the best configuration is tested against brute force in
tests/unit/test_optimize_*.py; here the HTTP edge is checked and the chosen answers are re-evaluated
through the public API, independently of the search's own figures.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

pytestmark = pytest.mark.anyio

LLAMA_70B = "meta-llama/Llama-3.1-70B"
LLAMA_8B = "meta-llama/Llama-3.1-8B"
WORKLOAD = {"input_tokens": {"distribution": "lognormal", "median": 1000, "p90": 3000}, "output_tokens": 300}
SLO = {"ttft_s": 1.0, "ttft_percentile": 90, "itl_s": 0.05, "itl_percentile": 99}
CHUNKED = {"model": LLAMA_70B, "gpu": "h100-sxm", "parallelism": {"tp": 4}, "replicas": 2, "workload": WORKLOAD,
           "slo": SLO}
DISAGG = {"model": LLAMA_8B, "gpus": ["h100-sxm", "h200-sxm"], "tensor_parallel": [1, 2], "total_gpus": 8,
          "workload": WORKLOAD, "slo": SLO}
PLAN = {"model": LLAMA_8B, "gpus": ["h100-sxm", "a100-80gb-sxm"], "tensor_parallel": [1, 2], "total_gpus": 8,
        "workload": WORKLOAD, "slo": SLO}


def _finite(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


async def _meets(client: Any, body: dict[str, Any], deployment: dict[str, Any], rate: float) -> dict[str, Any]:
    """POST the chosen deployment to /v1/evaluate at ``rate`` with the plan's SLO; returns the evaluation."""
    req = {"model": body["model"], "deployment": deployment,
           "workload": body["workload"] | {"arrival": {"kind": "poisson", "rate_per_s": rate}}, "slo": body["slo"]}
    r = await client.post("/v1/evaluate", json=req)
    assert r.status_code == 200, r.text
    ev = r.json()
    assert ev["feasible"], ev["warnings"]
    assert ev["slo_attainment_fraction"] >= body["slo"]["ttft_percentile"] / 100 - 1e-9, ev
    return ev


async def test_chunked_plan_chooses_a_budget_from_its_curve_and_meets_the_slo(client):
    r = await client.post("/v1/plan/chunked", json=CHUNKED)
    assert r.status_code == 200, r.text
    d = r.json()
    assert _finite(d)
    assert d["status"] == "optimal" and d["objective"] == "max_rate"
    budgets = [p["token_budget"] for p in d["curve"]]
    assert budgets == sorted(budgets) and d["token_budget"] in budgets
    chosen = next(p for p in d["curve"] if p["token_budget"] == d["token_budget"])
    best = max(p["max_rate_per_s"] for p in d["curve"])
    assert chosen["max_rate_per_s"] >= best * (1 - 5e-3)  # ties within 0.5 % go to the smaller budget
    assert d["rate_per_s"] <= chosen["max_rate_per_s"] * (1 + 1e-9)
    assert d["metrics"]["requests_per_s"] == pytest.approx(d["rate_per_s"])
    assert d["binding_constraint"] in ("ttft", "itl", "prefill_saturation", "kv_cache", "max_batch_size")
    # smaller chunks cost more prefill time (Sarathi-Serve's chunking overhead)
    overheads = [p["chunk_overhead_fraction"] for p in d["curve"]]
    assert overheads[0] > overheads[-1]
    dep = {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 4}, "replicas": 2,
           "token_budget": d["token_budget"], "max_batch_size": d["max_batch_size"], "chunked_prefill": True}
    ev = await _meets(client, CHUNKED, dep, d["rate_per_s"])
    assert ev["ttft_s"]["p90"] <= SLO["ttft_s"] * (1 + 1e-6)


async def test_chunked_plan_at_a_fixed_load_minimizes_ttft_within_the_slo(client):
    body = CHUNKED | {"workload": WORKLOAD | {"arrival": {"kind": "poisson", "rate_per_s": 2.0}}}
    d = (await client.post("/v1/plan/chunked", json=body)).json()
    assert d["status"] == "optimal" and d["objective"] == "min_ttft"
    assert d["rate_per_s"] == pytest.approx(2.0)
    feasible = [p for p in d["curve"] if p["feasible"]]
    chosen = next(p for p in feasible if p["token_budget"] == d["token_budget"])
    assert chosen["ttft_s"] <= min(p["ttft_s"] for p in feasible) * (1 + 5e-3)


async def test_an_slo_nothing_meets_is_an_answer_with_the_nearest_feasible_slo(client):
    body = CHUNKED | {"slo": {"ttft_s": 0.001, "itl_s": 0.0001}}
    r = await client.post("/v1/plan/chunked", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["status"] == "infeasible" and d["token_budget"] is None and d["metrics"] is None
    near = d["nearest_feasible_slo"]
    assert near["ttft_s"] > 0.001 and near["itl_s"] > 0.0001
    again = (await client.post("/v1/plan/chunked", json=CHUNKED | {"slo": near})).json()
    assert again["status"] == "optimal"


async def test_disaggregated_plan_fits_the_budget_and_its_split_meets_the_slo(client):
    r = await client.post("/v1/plan/disaggregated", json=DISAGG)
    assert r.status_code == 200, r.text
    d = r.json()
    assert _finite(d) and d["status"] == "optimal"
    pre, dec = d["prefill"], d["decode"]
    gpus = pre["workers"] * pre["parallelism"]["num_gpus"] + dec["workers"] * dec["parallelism"]["num_gpus"]
    assert gpus == d["num_gpus"] <= DISAGG["total_gpus"]
    assert pre["gpu"] in DISAGG["gpus"] and dec["gpu"] in DISAGG["gpus"]
    assert d["limiting_pool"] in ("prefill", "decode", "kv_link")
    assert 0 <= d["kv_transfer"]["utilization"] <= 1
    assert d["kv_transfer"]["bytes_per_s"] < d["kv_transfer"]["link_bandwidth_bytes_per_s"]
    assert d["capacity_per_s"] >= d["rate_per_s"] * (1 - 1e-9)
    dep = {"mode": "disaggregated",
           "prefill": {"gpu": pre["gpu"], "parallelism": {"tp": pre["parallelism"]["tp"]}, "workers": pre["workers"]},
           "decode": {"gpu": dec["gpu"], "parallelism": {"tp": dec["parallelism"]["tp"]}, "workers": dec["workers"],
                      "max_batch_size": dec["max_batch_size"]},
           "kv_transfer": {"link": d["kv_transfer"]["link"]}}
    await _meets(client, DISAGG, dep, d["rate_per_s"])


async def test_disaggregated_plan_for_a_target_rate_serves_it(client):
    body = {k: v for k, v in DISAGG.items() if k != "total_gpus"} | {"target_rate_per_s": 5.0, "minimize": "gpus"}
    d = (await client.post("/v1/plan/disaggregated", json=body)).json()
    assert d["status"] == "optimal" and d["objective"] == "min_gpus"
    assert d["rate_per_s"] == pytest.approx(5.0) and d["capacity_per_s"] >= 5.0


async def test_plan_ranks_modes_and_explains_its_choice(client):
    r = await client.post("/v1/plan", json=PLAN)
    assert r.status_code == 200, r.text
    d = r.json()
    assert _finite(d) and d["status"] == "optimal"
    ranks = [c["rank"] for c in d["configurations"]]
    assert ranks == list(range(1, len(ranks) + 1))
    per_gpu = [c["goodput_per_gpu_per_s"] * c["num_gpus"] / PLAN["total_gpus"] for c in d["configurations"]]
    assert per_gpu[0] >= max(per_gpu) * (1 - 1e-9)
    assert all(c["num_gpus"] <= PLAN["total_gpus"] for c in d["configurations"])
    modes = {c["mode"] for c in d["configurations"]}
    assert "disaggregated" in modes and "aggregated_chunked" in modes
    top = d["configurations"][0]
    assert top["verified"] and top["metrics"] is not None
    assert d["recommendation"] and d["reasons"]
    # the frontier is non-dominated: more throughput per GPU never comes with more speed per user
    f = d["pareto_frontier"]
    assert f
    xs = [p["throughput_output_tokens_per_s_per_gpu"] for p in f]
    ys = [p["output_tokens_per_s_per_user"] for p in f]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)


async def test_plan_for_a_target_rate_needs_the_fewest_gpus(client):
    body = {k: v for k, v in PLAN.items() if k != "total_gpus"} | {"target_rate_per_s": 6.0,
                                                                     "objective": "gpus_needed"}
    d = (await client.post("/v1/plan", json=body)).json()
    assert d["status"] == "optimal"
    gpus = [c["num_gpus"] for c in d["configurations"]]
    assert gpus[0] == min(gpus)
    assert all(c["capacity_per_s"] >= 6.0 * (1 - 1e-9) for c in d["configurations"])


async def test_plan_infeasible_slo_is_answered(client):
    d = (await client.post("/v1/plan", json=PLAN | {"slo": {"ttft_s": 0.001, "itl_s": 0.0001}})).json()
    assert d["status"] == "infeasible" and d["configurations"] == []
    assert d["binding_constraints"] and d["nearest_feasible_slo"]["ttft_s"] > 0.001
    again = (await client.post("/v1/plan", json=PLAN | {"slo": d["nearest_feasible_slo"]})).json()
    assert again["status"] == "optimal"


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/plan", {k: v for k, v in PLAN.items() if k != "total_gpus"}, "total_gpus"),
    ("/v1/plan", PLAN | {"objective": "gpus_needed"}, "objective"),
    ("/v1/plan", PLAN | {"slo": {"ttft_percentile": 90}}, "slo"),
    ("/v1/plan/disaggregated", {k: v for k, v in DISAGG.items() if k != "total_gpus"}, "total_gpus"),
    ("/v1/plan/chunked", CHUNKED | {"workload": WORKLOAD | {"arrival": {"kind": "closed_loop", "concurrency": 8}}},
     "workload.arrival.kind"),
    ("/v1/plan/chunked", CHUNKED | {"target_rate_per_s": 3.0,
                                    "workload": WORKLOAD | {"arrival": {"kind": "poisson", "rate_per_s": 2.0}}},
     "target_rate_per_s"),
])
async def test_bad_plan_requests_are_422_naming_the_field(client, problem, path, body, field):
    d = problem(await client.post(path, json=body), 422, "invalid-input")
    assert d["field"] == field


async def test_unknown_gpu_is_404_and_schema_limits_are_422(client, problem):
    problem(await client.post("/v1/plan", json=PLAN | {"gpus": ["no-such-gpu"]}), 404, "unknown-gpu")
    r = await client.post("/v1/plan", json=PLAN | {"gpus": ["h100-sxm"] * 9})
    assert r.status_code == 422
    r = await client.post("/v1/plan/chunked", json=CHUNKED | {"token_budgets": [16]})
    assert r.status_code == 422
    r = await client.post("/v1/plan/disaggregated", json=DISAGG | {"total_gpus": 10**6})
    assert r.status_code == 422


async def test_a_cost_objective_without_prices_is_refused(client, problem):
    body = PLAN | {"gpus": ["h100-sxm", "tpu7x"], "objective": "cost_per_million_tokens"}
    d = problem(await client.post("/v1/plan", json=body), 422, "invalid-input")
    assert d["field"] == "price_per_gpu_hour_usd" and "tpu7x" in d["detail"]
