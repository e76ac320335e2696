"""POST /v1/evaluate: the contract's examples, defaults, problems that name the field, and consistency.

The numbers come from the serving model; these tests check what must hold whatever its calibration:
the response's shape and finiteness, the echo of the resolved inputs, the relations between the
metrics (percentiles ordered, the TTFT breakdown adding up, Little's law for a closed loop), and how
the answer moves with load.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner.api.schemas import MAX_SAMPLES

pytestmark = pytest.mark.anyio

EVALUATE = "/v1/evaluate"
LLAMA_70B = "meta-llama/Llama-3.1-70B"
LLAMA_8B = "meta-llama/Llama-3.1-8B"
STATS = ("ttft_s", "itl_s", "tpot_s", "e2e_latency_s")

# the contract's deployment and workload examples (shared/API_CONTRACT.md), verbatim
AGGREGATED = {
    "model": LLAMA_70B,
    "deployment": {
        "mode": "aggregated",
        "gpu": "h100-sxm",
        "parallelism": {"tp": 2},
        "replicas": 1,
        "max_batch_size": 256,
        "token_budget": 8192,
        "chunked_prefill": True,
    },
    "workload": {
        "input_tokens": 4000,
        "output_tokens": 500,
        "arrival": {"kind": "closed_loop", "concurrency": 64},
    },
}
# The contract pairs no model with this deployment; the 70B's bf16 weights (141 GB) cannot fit the prefill
# pool's single H100 (that case is test_a_model_that_does_not_fit_a_pool_is_422), so the 8B runs it.
DISAGGREGATED = {
    "model": LLAMA_8B,
    "deployment": {
        "mode": "disaggregated",
        "prefill": {"gpu": "h100-sxm", "parallelism": {"tp": 1}, "workers": 2, "max_batch_size": 1},
        "decode": {"gpu": "h200-sxm", "parallelism": {"tp": 4}, "workers": 1, "max_batch_size": 128},
        "kv_transfer": {"link": "nvlink"},
    },
    "workload": {
        "input_tokens": {"distribution": "lognormal", "mean": 1730, "p90": 5696},
        "output_tokens": {"samples": [415, 120, 800]},
        "arrival": {"kind": "poisson", "rate_per_s": 12.5},
        "prefix_cache_hit_fraction": 0.3,
    },
}
SLO = {"ttft_s": 1.0, "ttft_percentile": 90, "itl_s": 0.05, "itl_percentile": 99}


def _with(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``body`` with the dotted ``path`` set to ``value`` (``...`` deletes it)."""
    out = copy.deepcopy(body)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return out


def _median_example() -> dict[str, Any]:
    """The disaggregated example with the lognormal given by its median, which a lognormal can have."""
    return _with(
        DISAGGREGATED, "workload.input_tokens", {"distribution": "lognormal", "median": 1730, "p90": 5696}
    )


def _aggregated(
    model: str = LLAMA_8B,
    arrival: dict[str, Any] | None = None,
    input_tokens: Any = 2000,
    output_tokens: Any = 200,
    **deployment: Any,
) -> dict[str, Any]:
    return {
        "model": model,
        "deployment": {"mode": "aggregated", "gpu": "h100-sxm"} | deployment,
        "workload": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "arrival": arrival or {"kind": "closed_loop", "concurrency": 8},
        },
    }


def _closed_loop(concurrency: int) -> dict[str, Any]:
    return {"kind": "closed_loop", "concurrency": concurrency}


async def _ok(client, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(EVALUATE, json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    _assert_consistent(out)
    return out


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for item in value.values() for x in _numbers(item)]
    if isinstance(value, list):
        return [x for item in value for x in _numbers(item)]
    return []


def _assert_consistent(out: dict[str, Any]) -> None:
    """What every answer satisfies, whatever the deployment and load."""
    assert all(math.isfinite(x) for x in _numbers(out))
    for name in STATS:
        s = out[name]
        assert 0 <= s["p50"] <= s["p90"] <= s["p99"], (name, s)
        assert s["mean"] > 0, (name, s)
    ttft, e2e, parts = out["ttft_s"], out["e2e_latency_s"], out["ttft_breakdown_s"]
    assert all(v >= 0 for v in parts.values()), parts
    assert ttft["mean"] >= parts["prefill"]
    # the breakdown decomposes the mean TTFT
    assert sum(parts.values()) == pytest.approx(ttft["mean"], rel=1e-6, abs=1e-9)
    # every request's end-to-end latency is its TTFT plus its decode time: its quantiles dominate
    for q in ("mean", "p50", "p90", "p99"):
        assert e2e[q] >= ttft[q] * (1 - 1e-9), q
    assert all(0 <= f <= 1 for f in out["utilization"].values()), out["utilization"]
    assert out["requests_per_s"] > 0 and out["num_gpus"] >= 1
    assert out["throughput_output_tokens_per_s"] == pytest.approx(
        out["requests_per_s"] * out["workload"]["output_tokens"]["mean"], rel=1e-9
    )
    assert out["throughput_output_tokens_per_s_per_gpu"] == pytest.approx(
        out["throughput_output_tokens_per_s"] / out["num_gpus"], rel=1e-9
    )
    assert out["mean_decode_batch"] >= 0 and out["output_tokens_per_s_per_user"] > 0
    assert isinstance(out["feasible"], bool) and out["limiting_resource"]
    assert all(isinstance(w, str) and w for w in out["warnings"])
    if out["slo"] is None:
        assert out["slo_attainment_fraction"] is None and out["goodput_requests_per_s"] is None


# ------------------------------------------------------------------------------------- the examples


async def test_the_contracts_aggregated_example(client):
    out = await _ok(client, AGGREGATED)
    assert (out["model"], out["engine"], out["weight_dtype"], out["kv_dtype"]) == (
        LLAMA_70B,
        "vllm",
        "bf16",
        "bf16",
    )
    assert out["mode"] == "aggregated" and out["num_gpus"] == 2
    assert out["deployment"] == {
        "mode": "aggregated",
        "gpu": "h100-sxm",
        "parallelism": {"tp": 2, "pp": 1, "dp": 1, "ep": 1, "num_gpus": 2},
        "replicas": 1,
        "max_batch_size": 256,
        "token_budget": 8192,
        "chunked_prefill": True,
    }
    assert out["workload"]["input_tokens"]["mean"] == 4000 and out["workload"]["output_tokens"]["max"] == 500
    assert out["kv_transfer"] is None and out["ttft_breakdown_s"]["kv_transfer"] == 0
    # a closed loop with no think time obeys Little's law: clients = throughput × time in the system
    assert out["requests_per_s"] * out["e2e_latency_s"]["mean"] == pytest.approx(64, rel=0.02)
    # the decode batch cannot exceed the clients, nor a finished request finish before its first token
    assert out["mean_decode_batch"] <= 64
    assert out["e2e_latency_s"]["mean"] >= out["ttft_s"]["mean"] + 499 * out["itl_s"]["mean"] * 0.99


async def test_the_contracts_lognormal_with_mean_1730_and_p90_5696_is_impossible(client, problem):
    body = problem(await client.post(EVALUATE, json=DISAGGREGATED), 422, "invalid-input")
    assert body["field"] == "workload.input_tokens.mean"
    # p90/mean = 3.29, while a lognormal's p90/mean is at most exp(z90²/2) ≈ 2.27
    assert "2.27" in body["detail"] and "3.29" in body["detail"] and "median" in body["detail"]


async def test_the_contracts_disaggregated_example_with_the_median(client):
    out = await _ok(client, _median_example() | {"slo": SLO})
    assert out["mode"] == "disaggregated" and out["num_gpus"] == 2 * 1 + 1 * 4
    dep = out["deployment"]
    assert dep["mode"] == "disaggregated" and dep["kv_transfer"] == {
        "link": "nvlink",
        "resolved_link": "nvlink",
    }
    assert (dep["prefill"]["gpu"], dep["prefill"]["workers"], dep["prefill"]["max_batch_size"]) == (
        "h100-sxm",
        2,
        1,
    )
    assert (dep["decode"]["gpu"], dep["decode"]["parallelism"]["num_gpus"]) == ("h200-sxm", 4)
    assert dep["decode"]["token_budget"] == 8192  # not given: the engine default
    workload = out["workload"]
    assert workload["output_tokens"]["mean"] == pytest.approx((415 + 120 + 800) / 3)
    assert workload["input_tokens"]["kind"] == "lognormal"
    # held as 64 equal-mass points: the median and p90 come back within a few percent
    assert workload["input_tokens"]["p50"] == pytest.approx(1730, rel=0.03)
    assert workload["input_tokens"]["p90"] == pytest.approx(5696, rel=0.03)
    assert workload["prefix_cache_hit_fraction"] == 0.3 and workload["arrival"]["rate_per_s"] == 12.5
    assert out["kv_transfer"] is not None and all(v >= 0 for v in out["kv_transfer"].values())
    assert out["slo"] == {"ttft_s": 1.0, "ttft_percentile": 90.0, "itl_s": 0.05, "itl_percentile": 99.0}
    assert 0 <= out["slo_attainment_fraction"] <= 1
    assert out["goodput_requests_per_s"] == pytest.approx(
        out["slo_attainment_fraction"] * out["requests_per_s"]
    )
    if out["feasible"]:  # an open loop that keeps up serves what arrives
        assert out["requests_per_s"] == pytest.approx(12.5)


async def test_a_model_that_does_not_fit_a_pool_is_422(client, problem):
    body = problem(
        await client.post(EVALUATE, json=_median_example() | {"model": LLAMA_70B}), 422, "model-does-not-fit"
    )
    assert body["weight_bytes_per_gpu"] > body["usable_bytes_per_gpu"]


async def test_a_model_that_does_not_fit_an_aggregated_worker_is_422(client, problem):
    body = _aggregated(model="meta-llama/Llama-3.1-405B")
    problem(await client.post(EVALUATE, json=body), 422, "model-does-not-fit")


# ------------------------------------------------------------------------------------------ defaults


async def test_omitted_deployment_fields_take_vllms_defaults(client):
    out = await _ok(client, _aggregated())
    assert out["deployment"] == {
        "mode": "aggregated",
        "gpu": "h100-sxm",
        "parallelism": {"tp": 1, "pp": 1, "dp": 1, "ep": 1, "num_gpus": 1},
        "replicas": 1,
        "max_batch_size": 256,
        "token_budget": 8192,
        "chunked_prefill": True,
    }
    assert out["warnings"] == []


@pytest.mark.parametrize(("input_tokens", "budget"), [(1000, 2048), ({"samples": [100, 3000, 9000]}, 9000)])
async def test_without_chunked_prefill_the_budget_defaults_to_the_longest_prompt(
    client, input_tokens, budget
):
    out = await _ok(client, _aggregated(input_tokens=input_tokens, chunked_prefill=False))
    assert out["deployment"]["token_budget"] == budget
    assert out["deployment"]["chunked_prefill"] is False
    assert any("max_model_len" in w and str(budget) in w for w in out["warnings"])


async def test_without_chunked_prefill_a_budget_below_the_longest_prompt_is_422(client, problem):
    body = _aggregated(input_tokens={"samples": [100, 9000]}, chunked_prefill=False, token_budget=4096)
    assert (
        problem(await client.post(EVALUATE, json=body), 422, "invalid-input")["field"]
        == "deployment.token_budget"
    )


async def test_other_engines_are_told_that_vllms_scheduler_defaults_apply(client):
    out = await _ok(client, _aggregated() | {"engine": "sglang"})
    assert out["engine"] == "sglang"
    assert any("sglang" in w and "vLLM" in w for w in out["warnings"])
    explicit = await _ok(client, _aggregated(max_batch_size=64, token_budget=4096) | {"engine": "sglang"})
    assert not any("vLLM" in w for w in explicit["warnings"])


async def test_an_inline_config_evaluates_like_the_catalog_entry(client, shared_dir):
    path = shared_dir / "data/model_configs/meta-llama--Meta-Llama-3.1-8B.config.json"
    inline = _aggregated() | {"model_config": json.loads(path.read_text())}
    del inline["model"]
    out, catalog = await _ok(client, inline), await _ok(client, _aggregated())
    assert out["model"] == "inline"
    for name in STATS:
        assert out[name]["mean"] == pytest.approx(catalog[name]["mean"], rel=1e-9)


async def test_dtypes_follow_the_estimate_defaults(client):
    out = await _ok(client, _aggregated() | {"weight_dtype": "int4"})
    assert (out["weight_dtype"], out["kv_dtype"]) == ("int4", "bf16")
    out = await _ok(client, _aggregated() | {"weight_dtype": "fp8"})
    assert (out["weight_dtype"], out["kv_dtype"]) == ("fp8", "fp8")


async def test_every_length_form_is_accepted(client):
    forms = [
        300,
        {"distribution": "lognormal", "median": 200, "p90": 600},
        {"samples": [100, 200, 300, 300]},
        {"histogram": {"values": [100, 200, 400], "weights": [1, 2, 1]}},
    ]
    for form in forms:
        out = await _ok(client, _aggregated(output_tokens=form))
        assert out["workload"]["output_tokens"]["mean"] > 0
    hist = (await _ok(client, _aggregated(output_tokens=forms[3])))["workload"]["output_tokens"]
    assert (hist["kind"], hist["mean"], hist["max"]) == ("histogram", 225.0, 400.0)


async def test_slo_defaults_and_attainment(client):
    loose = await _ok(client, _aggregated() | {"slo": {"ttft_s": 100.0}})
    assert loose["slo"] == {"ttft_s": 100.0, "ttft_percentile": 90.0, "itl_s": None, "itl_percentile": 99.0}
    assert loose["slo_attainment_fraction"] == pytest.approx(1.0)
    tight = await _ok(client, _aggregated() | {"slo": {"ttft_s": 1e-6, "itl_s": 1e-6}})
    assert tight["slo_attainment_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert tight["goodput_requests_per_s"] == pytest.approx(0.0, abs=1e-9)


# ------------------------------------------------------------------------------------------- problems


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("model_config", {"model_type": "llama"}, "model_config"),
        ("model", ..., "model"),
        ("deployment.mode", "hybrid", "deployment.mode"),
        ("deployment.mode", ..., "deployment.mode"),
        ("deployment.colour", "blue", "deployment.colour"),
        ("colour", "blue", "colour"),
        ("deployment.parallelism", {"tp": 0}, "deployment.parallelism.tp"),
        ("deployment.replicas", 100_001, "deployment.replicas"),
        ("deployment.token_budget", 0, "deployment.token_budget"),
        ("workload.arrival", {"kind": "poisson", "rate_per_s": -1.0}, "workload.arrival.rate_per_s"),
        ("workload.arrival", {"kind": "poisson", "rate_per_s": 2e6}, "workload.arrival.rate_per_s"),
        ("workload.arrival", {"kind": "closed_loop", "concurrency": 0}, "workload.arrival.concurrency"),
        ("workload.arrival", {"kind": "gamma", "rate_per_s": 1.0, "cv": 0}, "workload.arrival.cv"),
        ("workload.arrival", {"kind": "uniform"}, "workload.arrival.kind"),
        ("workload.input_tokens", {"samples": []}, "workload.input_tokens.samples"),
        ("workload.input_tokens", {"samples": [5, 0]}, "workload.input_tokens.samples.1"),
        ("workload.input_tokens", 10_000_001, "workload.input_tokens"),
        ("workload.input_tokens", {"mean": 100, "p90": 200}, "workload.input_tokens"),
        ("workload.input_tokens", {"distribution": "lognormal", "p90": 200}, "workload.input_tokens.mean"),
        (
            "workload.output_tokens",
            {"histogram": {"values": [1, 2], "weights": [1]}},
            "workload.output_tokens.histogram.weights",
        ),
        ("workload.prefix_cache_hit_fraction", 1.0, "workload.prefix_cache_hit_fraction"),
        ("slo", {"ttft_s": 1.0, "ttft_percentile": 100}, "slo.ttft_percentile"),
        ("slo", {"itl_s": -0.05}, "slo.itl_s"),
        # below the floors a rate or a target only underflows the searches' grids and the cost per token
        ("workload.arrival", {"kind": "poisson", "rate_per_s": 5e-324}, "workload.arrival.rate_per_s"),
        ("slo", {"ttft_s": 5e-324}, "slo.ttft_s"),
        # the JSON types are the spec's: no string or boolean for a number, no number for a boolean
        ("workload.output_tokens", "200", "workload.output_tokens"),
        ("workload.prefix_cache_hit_fraction", False, "workload.prefix_cache_hit_fraction"),
        ("deployment.replicas", True, "deployment.replicas"),
        ("deployment.chunked_prefill", 1, "deployment.chunked_prefill"),
    ],
)
async def test_invalid_input_is_422_naming_the_field(client, problem, path, value, field):
    body = _with(AGGREGATED, path, value)
    errors = problem(await client.post(EVALUATE, json=body), 422, "validation-error")["errors"]
    assert field in [e["field"] for e in errors], errors


async def test_a_prefill_only_workload_is_422_on_an_aggregated_deployment_and_answered_disaggregated(
    client, problem
):
    # one output token each: no decode batch ever forms, which the aggregated model's steady state rests on
    body = _aggregated(output_tokens=1, arrival={"kind": "poisson", "rate_per_s": 8.0})
    out = problem(await client.post(EVALUATE, json=body), 422, "unsupported-configuration")
    assert out["field"] == "workload.output_tokens"
    body["deployment"] = {"mode": "disaggregated", "prefill": {"gpu": "h100-sxm"},
                          "decode": {"gpu": "h100-sxm"}}
    assert (await _ok(client, body))["requests_per_s"] == pytest.approx(8.0)


async def test_a_pool_field_is_named_with_its_pool(client, problem):
    body = _with(_median_example(), "deployment.decode.parallelism", {"tp": 2, "cp": 2})
    errors = problem(await client.post(EVALUATE, json=body), 422, "validation-error")["errors"]
    assert [e["field"] for e in errors] == ["deployment.decode.parallelism.cp"]
    body = _with(_median_example(), "deployment.kv_transfer.link", "carrier-pigeon")
    errors = problem(await client.post(EVALUATE, json=body), 422, "validation-error")["errors"]
    assert [e["field"] for e in errors] == ["deployment.kv_transfer.link"]


async def test_a_lognormal_p90_below_its_median_is_422(client, problem):
    body = _with(
        AGGREGATED, "workload.input_tokens", {"distribution": "lognormal", "median": 500, "p90": 100}
    )
    body = problem(await client.post(EVALUATE, json=body), 422, "invalid-input")
    assert body["field"].startswith("workload.input_tokens.")


async def test_unknown_gpu_in_a_pool_is_404_with_the_closest_ids(client, problem):
    body = _with(_median_example(), "deployment.decode.gpu", "h200-sxn")
    out = problem(await client.post(EVALUATE, json=body), 404, "unknown-gpu")
    assert "h200-sxm" in out["closest_ids"] and out["field"] == "deployment.decode.gpu"


async def test_unknown_model_is_404(client, problem):
    out = problem(
        await client.post(EVALUATE, json=AGGREGATED | {"model": "meta-llama/Llama-9-70B"}),
        404,
        "unknown-model",
    )
    assert out["closest_ids"]


async def test_too_many_samples_is_413_and_the_limit_itself_is_accepted(client, problem):
    huge = _with(AGGREGATED, "workload.output_tokens", {"samples": [1] * (MAX_SAMPLES + 1)})
    assert len(json.dumps(huge)) < 1024 * 1024  # under the body limit: the sample count is what is refused
    out = problem(await client.post(EVALUATE, json=huge), 413, "request-too-large")
    assert out["field"] == "workload.output_tokens.samples" and out["max_entries"] == MAX_SAMPLES
    at_limit = _aggregated(output_tokens={"samples": [100, 200] * (MAX_SAMPLES // 2)})
    assert (await _ok(client, at_limit))["workload"]["output_tokens"]["mean"] == pytest.approx(150)


async def test_as_many_distinct_lengths_as_allowed_are_answered_with_the_exact_mean_and_maximum(client):
    # every one of the 100,000 bins different: the serving formulas see at most 1,024 points of it
    bins = {"histogram": {"values": list(range(1, MAX_SAMPLES + 1)), "weights": [1] * MAX_SAMPLES}}
    body = _aggregated(input_tokens=bins, arrival={"kind": "poisson", "rate_per_s": 1.0})
    echo = (await _ok(client, body))["workload"]["input_tokens"]
    assert echo["mean"] == pytest.approx((MAX_SAMPLES + 1) / 2) and echo["max"] == MAX_SAMPLES


# ------------------------------------------------------------------------------------- the OpenAPI shape


def _violations(value: Any, schema: dict[str, Any], components: dict[str, Any], path: str = "") -> list[str]:
    """Where ``value`` departs from ``schema`` (the subset of JSON Schema FastAPI emits)."""
    if "$ref" in schema:
        return _violations(value, components[schema["$ref"].rsplit("/", 1)[-1]], components, path)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = [_violations(value, s, components, path) for s in schema[key]]
            return [] if any(not b for b in branches) else [f"{path}: matches no branch of {key}"]
    kind = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "null": lambda v: v is None,
    }
    if kind is not None and not checks[kind](value):
        return [f"{path}: {value!r} is not {kind}"]
    if "const" in schema and value != schema["const"]:
        return [f"{path}: {value!r} is not {schema['const']!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} not in {schema['enum']}"]
    out: list[str] = []
    if isinstance(value, dict):
        out += [f"{path}.{key}: missing" for key in schema.get("required", ()) if key not in value]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                out += _violations(item, props[key], components, f"{path}.{key}")
            elif isinstance(extra, dict):
                out += _violations(item, extra, components, f"{path}.{key}")
            elif extra is False:
                out.append(f"{path}.{key}: not in the schema")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += _violations(item, schema["items"], components, f"{path}[{i}]")
    return out


async def test_answers_match_the_published_response_schema(app, client):
    spec = app.openapi()
    operation = spec["paths"][EVALUATE]["post"]
    assert operation["operationId"] == "evaluate_deployment" and operation["tags"] == ["evaluate"]
    assert {"404", "413", "422", "500"} <= set(operation["responses"])
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    components = spec["components"]["schemas"]
    response_schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    contract = {
        "ttft_s",
        "itl_s",
        "tpot_s",
        "e2e_latency_s",
        "throughput_output_tokens_per_s",
        "requests_per_s",
        "utilization",
        "ttft_breakdown_s",
        "feasible",
    }
    assert contract <= set(response_schema["required"])
    for body in (AGGREGATED, _median_example() | {"slo": SLO}):
        out = await _ok(client, body)
        assert _violations(out, schema, components) == []
        assert set(out) == set(response_schema["properties"])
        assert set(out["ttft_breakdown_s"]) == {"queue", "prefill", "kv_transfer", "overheads"}
        for name in STATS:
            assert set(out[name]) == {"mean", "p50", "p90", "p99"}


# ------------------------------------------------------------------------------------------ properties


async def test_gamma_and_poisson_arrivals_answer_consistently(client):
    poisson = await _ok(client, _aggregated(arrival={"kind": "poisson", "rate_per_s": 2.0}))
    bursty = await _ok(client, _aggregated(arrival={"kind": "gamma", "rate_per_s": 2.0, "cv": 4.0}))
    assert poisson["feasible"] and bursty["feasible"]
    assert poisson["requests_per_s"] == pytest.approx(2.0) and bursty["requests_per_s"] == pytest.approx(2.0)
    # the same load in bursts queues longer
    assert bursty["ttft_s"]["mean"] >= poisson["ttft_s"]["mean"]
    assert bursty["ttft_breakdown_s"]["queue"] >= poisson["ttft_breakdown_s"]["queue"]


async def test_a_prefix_cache_makes_prefill_cheaper(client):
    cold = await _ok(client, _aggregated(input_tokens=8000))
    warm = await _ok(
        client, _with(_aggregated(input_tokens=8000), "workload.prefix_cache_hit_fraction", 0.75)
    )
    assert warm["ttft_breakdown_s"]["prefill"] < cold["ttft_breakdown_s"]["prefill"]


async def test_a_lone_client_never_queues(client):
    for model, gpu, tp in (
        (LLAMA_8B, "h100-sxm", 1),
        (LLAMA_70B, "h100-sxm", 2),
        ("Qwen/Qwen3-30B-A3B", "h200-sxm", 1),
    ):
        body = _aggregated(model=model, arrival=_closed_loop(1), gpu=gpu, parallelism={"tp": tp})
        out = await _ok(client, body)
        assert out["ttft_breakdown_s"]["queue"] == pytest.approx(0.0, abs=1e-9), model
        assert out["mean_decode_batch"] <= 1.0 + 1e-9


@settings(
    max_examples=8,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    concurrency=st.integers(1, 256),
    more=st.integers(1, 256),
    input_tokens=st.sampled_from([500, 2000, 8000]),
    output_tokens=st.sampled_from([50, 300]),
    chunked_prefill=st.booleans(),
)
@example(concurrency=8, more=120, input_tokens=500, output_tokens=50, chunked_prefill=False)
async def test_more_clients_never_lower_the_ttft(
    app, client_for, concurrency, more, input_tokens, output_tokens, chunked_prefill
):
    means = []
    async with client_for(app) as client:
        for clients in (concurrency, concurrency + more):
            body = _aggregated(
                arrival=_closed_loop(clients),
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                chunked_prefill=chunked_prefill,
            )
            means.append((await _ok(client, body))["ttft_s"]["mean"])
    assert means[1] >= means[0] * (1 - 1e-9)


async def test_a_closed_loop_obeys_littles_law_on_any_number_of_replicas(client):
    for replicas in (1, 1000):
        out = await _ok(client, _aggregated(arrival=_closed_loop(1), replicas=replicas))
        assert out["requests_per_s"] * out["e2e_latency_s"]["mean"] == pytest.approx(1.0, rel=0.02), replicas
        assert out["mean_decode_batch"] <= 1.0 + 1e-9


async def test_an_overloaded_open_loop_serves_at_most_the_saturation_throughput(client):
    saturated = await _ok(client, _aggregated(arrival=_closed_loop(100_000)))
    overloaded = await _ok(client, _aggregated(arrival={"kind": "poisson", "rate_per_s": 10_000.0}))
    assert not overloaded["feasible"]
    assert overloaded["requests_per_s"] <= saturated["requests_per_s"] * 1.05
