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
