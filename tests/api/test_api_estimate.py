"""POST /v1/estimate/prefill and /v1/estimate/decode: answers, defaults and their consistency."""

from __future__ import annotations

import json
import math

import pytest

pytestmark = pytest.mark.anyio

LLAMA_8B = "meta-llama/Llama-3.1-8B"


def _all_finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True


async def _prefill(client, **fields):
    body = {"model": LLAMA_8B, "gpu": "h100-sxm", "prompt_tokens": 2048} | fields
    return await client.post("/v1/estimate/prefill", json=body)


async def _decode(client, **fields):
    body = {"model": LLAMA_8B, "gpu": "h100-sxm", "context_tokens": 2048} | fields
    return await client.post("/v1/estimate/decode", json=body)


async def test_prefill_answer_is_finite_positive_and_consistent(client):
    response = await _prefill(client, batch_size=2)
    assert response.status_code == 200, response.text
    out = response.json()
    assert _all_finite(out)
    assert out["latency_s"] > 0 and out["flops"] > 0 and out["bytes_moved"] > 0
    assert out["tokens_per_s"] == pytest.approx(2 * 2048 / out["latency_s"], rel=1e-12)
    assert out["bound"] in {"compute", "memory", "communication", "overhead"}
    assert out["breakdown"] and all(op["time_s"] >= 0 for op in out["breakdown"])
    assert out["memory"]["fits"] is True
    # a forward pass needs at least 2 FLOPs per active parameter per token (matmuls alone)
    model = (await client.get(f"/v1/models/{LLAMA_8B}")).json()
    assert out["flops"] >= 0.9 * 2 * model["active_params"] * 2 * 2048
    assert out["model"] == model["id"]
    assert (out["engine"], out["weight_dtype"], out["kv_dtype"]) == ("vllm", "bf16", "bf16")
    assert out["parallelism"] == {"tp": 1, "pp": 1, "dp": 1, "ep": 1, "num_gpus": 1}


async def test_decode_tokens_per_s_is_batch_over_step(client):
    one, many = (await _decode(client, batch_size=1)).json(), (await _decode(client, batch_size=32)).json()
    for out, batch in ((one, 1), (many, 32)):
        assert _all_finite(out)
        assert out["step_latency_s"] > 0
        assert out["tokens_per_s"] == pytest.approx(batch / out["step_latency_s"], rel=1e-12)
    # decode re-reads the weights each step: batching 32 sequences must raise throughput
    assert many["tokens_per_s"] > one["tokens_per_s"]
    assert many["step_latency_s"] >= one["step_latency_s"]


async def test_cached_prefix_makes_prefill_cheaper(client):
    cold = (await _prefill(client, prompt_tokens=8192)).json()
    warm = (await _prefill(client, prompt_tokens=8192, cached_tokens=6144)).json()
    assert warm["latency_s"] < cold["latency_s"]


async def test_inline_config_costs_the_same_as_the_catalog_entry(client, shared_dir):
    config = json.loads(
        (shared_dir / "data/model_configs/meta-llama--Meta-Llama-3.1-8B.config.json").read_text()
    )
    inline = await client.post(
        "/v1/estimate/decode",
        json={"model_config": config, "gpu": "h100-sxm", "context_tokens": 2048, "batch_size": 4},
    )
    assert inline.status_code == 200, inline.text
    catalog = (await _decode(client, batch_size=4)).json()
    assert inline.json()["model"] == "inline"
    assert inline.json()["step_latency_s"] == pytest.approx(catalog["step_latency_s"], rel=1e-9)


async def test_weight_dtype_defaults_to_the_models_native_dtype(client):
    listing = (await client.get("/v1/models")).json()["models"]
    native = next((m for m in listing if m["native_weight_dtype"] not in (None, "bf16")), None)
    if native is None:
        pytest.skip("no catalog model declares a non-bf16 native weight dtype")
    response = await client.post(
        "/v1/estimate/prefill",
        json={"model": native["id"], "gpu": "b200", "prompt_tokens": 1024, "parallelism": {"tp": 8}},
    )
    assert response.status_code == 200, response.text
    assert response.json()["weight_dtype"] == native["native_weight_dtype"]


async def test_kv_dtype_follows_weights_and_is_bf16_for_4bit(client):
    fp8 = (await _prefill(client, weight_dtype="fp8")).json()
    int4 = (await _prefill(client, weight_dtype="int4")).json()
    assert fp8["kv_dtype"] == "fp8"
    assert int4["kv_dtype"] == "bf16"
    explicit = (await _prefill(client, weight_dtype="int4", kv_dtype="fp8")).json()
    assert explicit["kv_dtype"] == "fp8"


async def test_405b_in_bf16_does_not_fit_one_l4(client, problem):
    response = await client.post(
        "/v1/estimate/prefill",
        json={"model": "meta-llama/Llama-3.1-405B", "gpu": "l4", "prompt_tokens": 1024},
    )
    body = problem(response, 422, "model-does-not-fit")
    # 405 B parameters × 2 bytes is about 810 GB against the L4's 24 GiB of GDDR6
    assert body["weight_bytes_per_gpu"] > 700e9
    assert body["usable_bytes_per_gpu"] <= 24 * 1024**3


async def test_unknown_gpu_in_an_estimate_is_404(client, problem):
    body = problem(await _prefill(client, gpu="h100-sxn"), 404, "unknown-gpu")
    assert "h100-sxm" in body["closest_ids"]


async def test_inherited_efficiencies_are_flagged_in_warnings(client):
    gpus = (await client.get("/v1/gpus")).json()["gpus"]
    inherited = next((g for g in gpus if g["efficiency_inherited"] and g["memory_bytes"] > 40e9), None)
    fitted = next((g for g in gpus if not g["efficiency_inherited"] and g["memory_bytes"] > 40e9), None)
    if inherited is None or fitted is None:
        pytest.skip("the catalog needs one fitted and one inherited large-memory GPU")
    flagged = (await _prefill(client, gpu=inherited["id"])).json()
    assert any(inherited["id"] in w for w in flagged["warnings"])
    assert flagged["efficiency_origin"] == inherited["efficiency_origin"]
    assert (await _prefill(client, gpu=fitted["id"])).json()["warnings"] == []


async def test_an_unreadable_inline_config_is_a_422_problem(client, problem):
    response = await client.post(
        "/v1/estimate/prefill",
        json={"model_config": {"model_type": "llama"}, "gpu": "h100-sxm", "prompt_tokens": 128},
    )
    problem(response, 422, "unsupported-model")
