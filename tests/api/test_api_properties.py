"""Properties that must hold for every input, checked through the HTTP API."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.anyio

# (model, gpu) pairs whose bf16 weights and a 4 × 32k-token KV cache fit one GPU
DEPLOYMENTS = [
    ("meta-llama/Llama-3.1-8B", "l40s"),
    ("meta-llama/Llama-3.1-8B", "a100-80gb-sxm"),
    ("Qwen/Qwen3-8B", "h100-sxm"),
    ("Qwen/Qwen3-30B-A3B", "mi300x"),
    ("Qwen/Qwen3-30B-A3B", "h200-sxm"),
]


@settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    deployment=st.sampled_from(DEPLOYMENTS),
    batch_size=st.integers(1, 4),
    prompt_tokens=st.integers(1, 16_384),
    extra_tokens=st.integers(1, 16_384),
)
async def test_more_prompt_tokens_never_cost_less(
    app, client_for, deployment, batch_size, prompt_tokens, extra_tokens
):
    model, gpu = deployment
    async with client_for(app) as client:
        latencies = []
        for tokens in (prompt_tokens, prompt_tokens + extra_tokens):
            body = {"model": model, "gpu": gpu, "prompt_tokens": tokens, "batch_size": batch_size}
            response = await client.post("/v1/estimate/prefill", json=body)
            assert response.status_code == 200, response.text
            out = response.json()
            assert math.isfinite(out["latency_s"]) and out["latency_s"] > 0
            latencies.append(out["latency_s"])
    assert latencies[1] >= latencies[0]


_CONFIG_KEYS = [
    "model_type",
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "sliding_window",
    "tie_word_embeddings",
    "text_config",
]
_CONFIG_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-4, 1 << 20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["llama", "qwen3", "qwen3_moe", "deepseek_v3", "mixtral", "", "unknown"]),
    st.lists(st.integers(0, 64), max_size=4),
    st.dictionaries(st.sampled_from(_CONFIG_KEYS), st.integers(0, 4096), max_size=4),
)


@settings(max_examples=80, deadline=None, database=None)
@given(
    changes=st.dictionaries(st.sampled_from(_CONFIG_KEYS), _CONFIG_VALUES, max_size=3),
    removed=st.sets(st.sampled_from(_CONFIG_KEYS), max_size=2),
)
async def test_a_damaged_inline_config_is_never_a_500(app, client_for, shared_dir, changes, removed):
    path = shared_dir / "data" / "model_configs" / "meta-llama--Meta-Llama-3.1-8B.config.json"
    config = {k: v for k, v in json.loads(path.read_text()).items() if k not in removed} | changes
    async with client_for(app) as client:
        body = {"model_config": config, "gpu": "h100-sxm", "prompt_tokens": 128}
        response = await client.post("/v1/estimate/prefill", json=body)
    event(f"status {response.status_code}")
    assert response.status_code in {200, 404, 422}, response.text
    if response.status_code == 200:
        assert math.isfinite(response.json()["latency_s"]) and response.json()["latency_s"] > 0
    else:
        assert response.headers["content-type"].startswith("application/problem+json")


@settings(max_examples=80, deadline=None, database=None)
@given(
    model=st.sampled_from(["meta-llama/Llama-3.1-70B", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-30B-A3B"]),
    gpu=st.sampled_from(["h100-sxm", "l4", "mi300x", "b200", "tpu-v5e", "gaudi3"]),
    dtypes=st.tuples(st.sampled_from(["bf16", "fp8", "int4", "fp4"]), st.sampled_from([None, "fp8", "bf16"])),
    degrees=st.tuples(*(st.sampled_from([1, 2, 3, 8, 64]) for _ in range(4))),
    batch_size=st.sampled_from([1, 7, 256, 65_536]),
    tokens=st.sampled_from([1, 1000, 131_072, 10_000_000]),
    decode=st.booleans(),
)
async def test_valid_requests_answer_or_explain(
    app, client_for, model, gpu, dtypes, degrees, batch_size, tokens, decode
):
    """Whatever the schema admits is answered with finite numbers or refused with a 4xx problem."""
    tp, pp, dp, ep = degrees
    body = {"model": model, "gpu": gpu, "weight_dtype": dtypes[0], "batch_size": batch_size}
    body |= {"parallelism": {"tp": tp, "pp": pp, "dp": dp, "ep": ep}}
    if dtypes[1] is not None:
        body["kv_dtype"] = dtypes[1]
    body |= {"context_tokens": tokens} if decode else {"prompt_tokens": tokens}
    async with client_for(app, raise_app_exceptions=False) as client:
        response = await client.post(f"/v1/estimate/{'decode' if decode else 'prefill'}", json=body)
    event(f"status {response.status_code}")
    assert response.status_code in {200, 404, 422}, response.text
    if response.status_code == 200:
        out = response.json()
        latency = out["step_latency_s" if decode else "latency_s"]
        assert math.isfinite(latency) and latency > 0 and math.isfinite(out["tokens_per_s"])
    else:
        assert response.headers["content-type"].startswith("application/problem+json")


# --------------------------------------------------------------------------------------------- evaluate
_EVAL_MODELS = ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-0.6B",
                "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b"]
_EVAL_GPUS = ["h100-sxm", "h200-sxm", "b200", "gb200", "a100-80gb-sxm", "l40s", "mi300x"]
_parallelism = st.fixed_dictionaries({"tp": st.sampled_from([1, 2, 4, 8])},
                                     optional={"ep": st.sampled_from([1, 8]), "dp": st.sampled_from([1, 2])})
_lengths = st.one_of(
    st.sampled_from([1, 2, 128, 1000, 4000, 16000]),
    st.builds(lambda m, r: {"distribution": "lognormal", "median": m, "p90": m * r},
              st.sampled_from([20, 300, 1730, 8000]), st.sampled_from([1.01, 2.0, 3.0])),
    st.builds(lambda xs: {"samples": xs}, st.lists(st.integers(1, 40_000), min_size=1, max_size=300)),
)
_arrival = st.one_of(
    st.builds(lambda r: {"kind": "poisson", "rate_per_s": r}, st.sampled_from([0.01, 1.0, 8.0, 200.0])),
    st.builds(lambda r, cv: {"kind": "gamma", "rate_per_s": r, "cv": cv}, st.sampled_from([0.5, 5.0]),
              st.sampled_from([0.3, 3.0])),
    st.builds(lambda n: {"kind": "closed_loop", "concurrency": n},
              st.sampled_from([1, 2, 16, 64, 257, 1024])),
)
_pool = st.fixed_dictionaries({"gpu": st.sampled_from(_EVAL_GPUS), "parallelism": _parallelism,
                               "workers": st.sampled_from([1, 2, 3])},
                              optional={"max_batch_size": st.sampled_from([8, 256])})
_deployment = st.one_of(
    st.fixed_dictionaries({"mode": st.just("aggregated"), "gpu": st.sampled_from(_EVAL_GPUS),
                           "parallelism": _parallelism},
                          optional={"chunked_prefill": st.booleans(), "replicas": st.sampled_from([1, 3]),
                                    "max_batch_size": st.sampled_from([4, 256])}),
    st.fixed_dictionaries({"mode": st.just("disaggregated"), "prefill": _pool, "decode": _pool}),
)


def _fixed(lengths) -> bool:  # noqa: ANN001
    """One length only: an integer, or samples of one value."""
    return isinstance(lengths, int) or ("samples" in lengths and len(set(lengths["samples"])) == 1)


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(_EVAL_MODELS), deployment=_deployment, inputs=_lengths, outputs=_lengths,
       arrival=_arrival, hit=st.sampled_from([0.0, 0.5, 0.99]))
async def test_an_evaluation_is_consistent_or_explained(app, client_for, model, deployment, inputs, outputs,
                                                        arrival, hit):
    """Whatever deployment and workload: a 4xx problem, or finite figures whose percentiles are ordered, whose
    end-to-end latency is at least the TTFT at every statistic, whose TTFT parts add up to its mean, whose
    utilizations are shares, and, for a closed loop, whose throughput and mean end-to-end latency keep
    Little's law N = X·E[e2e] within 2 %. Unchunked loops of fixed lengths are left out of that check: at
    their batch cap the curve's rate ignores that the lock-step share's streams decode without stalls
    (X·E[e2e] down to 0.98 N; until 2026-12-05, when their gaps entered the throughput, 0.89 N at any load;
    ``docs/accuracy_notes.md``)."""
    body = {"model": model, "deployment": deployment,
            "workload": {"input_tokens": inputs, "output_tokens": outputs, "arrival": arrival,
                         "prefix_cache_hit_fraction": hit}}
    async with client_for(app, raise_app_exceptions=False) as client:
        response = await client.post("/v1/evaluate", json=body)
    event(f"status {response.status_code}")
    assert response.status_code in {200, 404, 422}, response.text
    if response.status_code != 200:
        assert response.headers["content-type"].startswith("application/problem+json")
        return
    out = json.loads(response.text, parse_constant=lambda name: pytest.fail(f"{name} in the answer"))
    for key in ("ttft_s", "itl_s", "tpot_s", "e2e_latency_s"):
        s = out[key]
        assert 0.0 <= s["p50"] <= s["p90"] * (1 + 1e-9) <= s["p99"] * (1 + 2e-9), (key, s)
        assert s["mean"] > 0.0, (key, s)
    for stat in ("mean", "p50", "p90", "p99"):
        assert out["e2e_latency_s"][stat] >= out["ttft_s"][stat] * (1 - 1e-9), stat
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in out["utilization"].values()), out["utilization"]
    assert sum(out["ttft_breakdown_s"].values()) == pytest.approx(out["ttft_s"]["mean"], rel=1e-9, abs=1e-12)
    unchunked = deployment["mode"] == "aggregated" and deployment.get("chunked_prefill") is False
    if arrival["kind"] == "closed_loop" and out["feasible"]:
        little = out["requests_per_s"] * out["e2e_latency_s"]["mean"] / arrival["concurrency"]
        # an answer that misses Little's law says so, and only such an answer does
        said = any(w.startswith("throughput × mean end-to-end latency is") for w in out["warnings"])
        assert said == (abs(little - 1.0) > 0.02), (little, out["warnings"], body)
        if not (unchunked and _fixed(inputs) and _fixed(outputs)):
            event("closed loop")
            assert little == pytest.approx(1.0, abs=0.02), body
