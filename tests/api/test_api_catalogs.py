"""GET /v1/gpus and /v1/models against the shared datasheet and the models' own config.json files."""

from __future__ import annotations

import csv
import json

import pytest

pytestmark = pytest.mark.anyio


def _datasheet_row(shared_dir, gpu_id: str) -> dict[str, str]:
    with open(shared_dir / "data" / "gpus_datasheet.csv", newline="") as f:
        return next(row for row in csv.DictReader(f) if row["id"] == gpu_id)


def _hf_config(shared_dir, name: str) -> dict:
    return json.loads((shared_dir / "data" / "model_configs" / f"{name}.config.json").read_text())


async def test_list_gpus_holds_the_contract_ids(client):
    response = await client.get("/v1/gpus")
    assert response.status_code == 200
    gpus = response.json()["gpus"]
    ids = [g["id"] for g in gpus]
    assert len(ids) == len(set(ids))
    assert {"h100-sxm", "a100-80gb-sxm", "l4", "mi300x", "b200", "tpu-v5e"} <= set(ids)
    for gpu in gpus:
        assert gpu["memory_bytes"] > 0 and gpu["hbm_bandwidth_bytes_per_s"] > 0
        assert gpu["sources"], gpu["id"]


async def test_get_gpu_matches_the_datasheet(client, shared_dir):
    response = await client.get("/v1/gpus/h100-sxm")
    assert response.status_code == 200
    gpu = response.json()
    row = _datasheet_row(shared_dir, "h100-sxm")
    assert gpu["hbm_bandwidth_bytes_per_s"] == pytest.approx(float(row["hbm_bandwidth_tbs"]) * 1e12, rel=1e-6)
    assert gpu["peak_flops_per_s"]["bf16"] == pytest.approx(
        float(row["bf16_fp16_tflops_dense"]) * 1e12, rel=1e-6
    )


async def test_gpu_ids_are_case_insensitive(client):
    response = await client.get("/v1/gpus/H100-SXM")
    assert response.status_code == 200
    assert response.json()["id"] == "h100-sxm"


async def test_unknown_gpu_is_404_with_closest_ids(client, problem):
    body = problem(await client.get("/v1/gpus/h100-sxn"), 404, "unknown-gpu")
    assert "h100-sxm" in body["closest_ids"]


async def test_list_models_holds_the_contract_ids(client):
    response = await client.get("/v1/models")
    assert response.status_code == 200
    ids = {m["id"].lower() for m in response.json()["models"]}
    assert {"meta-llama/llama-3.1-70b", "qwen/qwen3-32b", "deepseek-ai/deepseek-v3"} <= ids


@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.1-70B", "META-LLAMA/llama-3.1-70b"])
async def test_get_model_with_slash_and_any_case(client, shared_dir, model_id):
    response = await client.get(f"/v1/models/{model_id}")
    assert response.status_code == 200, response.text
    model = response.json()
    assert model["id"] == "meta-llama/Llama-3.1-70B"
    config = _hf_config(shared_dir, "meta-llama--Meta-Llama-3.1-70B")
    assert sum(g["num_layers"] for g in model["layer_groups"]) == config["num_hidden_layers"]
    # Meta's model card: 70.6 B parameters
    assert model["total_params"] == pytest.approx(70.6e9, rel=0.01)
    assert model["active_params"] == model["total_params"]
    # K and V, every layer, every KV head, 2 bytes in bf16
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    expected = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 2
    assert model["default_kv_dtype"] == "bf16"
    assert model["kv_cache_bytes_per_token"] == expected
    # every parameter takes 2 bytes in bf16; in fp8 the matrices take 1, embeddings and head stay wider
    assert model["weight_bytes"]["bf16"] == 2 * model["total_params"]
    assert model["total_params"] < model["weight_bytes"]["fp8"] < 1.05 * model["total_params"]


async def test_model_alias_resolves_to_its_catalog_id(client):
    catalog = (await client.get("/v1/models")).json()["models"]
    with_alias = next(m for m in catalog if m["aliases"])
    alias = with_alias["aliases"][0]
    response = await client.get(f"/v1/models/{alias}")
    assert response.status_code == 200
    assert response.json()["id"] == with_alias["id"]


async def test_moe_model_activates_a_fraction_of_its_parameters(client):
    model = (await client.get("/v1/models/deepseek-ai/DeepSeek-V3")).json()
    # DeepSeek-V3 report: 671 B total (685 B with the MTP module), 37 B activated per token
    assert 0.97 * 671e9 <= model["total_params"] <= 1.03 * 685e9
    assert model["active_params"] == pytest.approx(37e9, rel=0.06)
    assert {g["attention"]["kind"] for g in model["layer_groups"]} == {"mla"}


async def test_unknown_model_is_404_with_closest_ids(client, problem):
    body = problem(await client.get("/v1/models/meta-llama/Llama-3.1-70C"), 404, "unknown-model")
    assert any(i.lower() == "meta-llama/llama-3.1-70b" for i in body["closest_ids"])
