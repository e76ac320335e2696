"""Model architectures and the model catalog, checked against published sizes and hand-computed KV.

Each expected figure cites where it was published; tolerances follow the source's rounding.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import planner
from planner.errors import UnknownModel, UnsupportedModel
from planner.models import (
    CATALOG_DIR,
    MAX_NUM_LAYERS,
    ModelArchitecture,
    ModelCatalog,
    from_hf_config,
    load_model_catalog,
)

REPO = Path(__file__).resolve().parents[2]
SHARED_CONFIGS = REPO.parent / "shared" / "data" / "model_configs"
B = 1e9


@pytest.fixture(scope="module")
def catalog() -> ModelCatalog:
    return load_model_catalog()


# --------------------------------------------------------------------------------------------------
# published sizes
# --------------------------------------------------------------------------------------------------

# (name, published total, tolerance, source)
PUBLISHED_TOTAL = [
    ("meta-llama/Llama-3.1-8B", 8.03 * B, 0.005 * B, "Hugging Face model page: 8.03B params"),
    ("meta-llama/Llama-3.1-70B", 70.6 * B, 0.05 * B, "Hugging Face model page: 70.6B params"),
    ("meta-llama/Llama-3.1-405B", 406 * B, 0.5 * B, "Hugging Face model page: 406B params"),
    ("deepseek-ai/DeepSeek-V3", 671 * B, 0.5 * B, "DeepSeek-V3 report arXiv:2412.19437: 671B (MTP excluded)"),
    ("mistralai/Mixtral-8x7B-v0.1", 46.7 * B, 0.05 * B, "Mistral AI, 'Mixtral of experts' (2023): 46.7B"),
    ("mistralai/Mixtral-8x22B-v0.1", 141 * B, 0.5 * B, "Mistral AI, 'Cheaper, Better, Faster' (2024): 141B"),
    ("Qwen/Qwen3-30B-A3B", 30.5 * B, 0.05 * B, "Qwen3-30B-A3B model card: 30.5B"),
    ("Qwen/Qwen3-235B-A22B", 235 * B, 0.5 * B, "Qwen3-235B-A22B model card: 235B"),
    ("Qwen/Qwen3-32B", 32.8 * B, 0.05 * B, "Qwen3-32B model card: 32.8B"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", 480 * B, 0.5 * B, "Qwen3-Coder model card: 480B"),
    ("meta-llama/Llama-2-70b-hf", 69 * B, 0.5 * B, "Hugging Face model page: 69B params"),
    ("meta-llama/Llama-2-7b-hf", 6.74 * B, 0.005 * B, "Hugging Face model page: 6.74B params"),
    ("huggyllama/llama-30b", 32.5 * B, 0.05 * B, "LLaMA arXiv:2302.13971 Table 2: 32.5B"),
    ("facebook/opt-175b", 175 * B, 0.5 * B, "OPT arXiv:2205.01068 Table 1: 175B"),
    ("facebook/opt-66b", 66 * B, 0.5 * B, "OPT arXiv:2205.01068 Table 1: 66B"),
    ("tiiuae/falcon-180B", 180 * B, 2.5 * B, "Falcon arXiv:2311.16867: 180B (two significant figures)"),
    ("01-ai/Yi-34B", 34 * B, 0.5 * B, "Yi arXiv:2403.04652: 34B"),
    ("mistralai/Mistral-7B-v0.1", 7.3 * B, 0.1 * B, "Mistral 7B arXiv:2310.06825: 7.3B"),
    ("openai/gpt-oss-120b", 116.83 * B, 0.005 * B, "gpt-oss model card arXiv:2508.10925 Table 1: 116.83B"),
    ("openai/gpt-oss-20b", 20.91 * B, 0.005 * B, "gpt-oss model card arXiv:2508.10925 Table 1: 20.91B"),
    ("XiaomiMiMo/MiMo-V2-Flash", 309 * B, 0.5 * B, "MiMo-V2-Flash model card: 309B total"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 400 * B, 2 * B, "Llama 4 card: 400B"),
    # Qwen's cards truncate: 7,615,616,512 is stated as 7.61B
    ("Qwen/Qwen2.5-7B", 7.61 * B, 0.01 * B, "Qwen2.5-7B model card: 7.61B"),
]


@pytest.mark.parametrize(("name", "published", "tol", "source"), PUBLISHED_TOTAL,
                         ids=[p[0] for p in PUBLISHED_TOTAL])
def test_total_params_match_published(catalog: ModelCatalog, name: str, published: float, tol: float,
                                      source: str) -> None:
    assert catalog.get(name).total_params == pytest.approx(published, abs=tol), source


def test_bloom_matches_the_exact_published_count(catalog: ModelCatalog) -> None:
    # bigscience/bloom model card, "Technical Specifications": 176,247,271,424 parameters
    assert catalog.get("BLOOM-176B").total_params == 176_247_271_424


def test_gptj_matches_the_model_card_count(catalog: ModelCatalog) -> None:
    # EleutherAI/gpt-j-6b model card: n_parameters 6,053,381,344 (our count omits ~0.04%: the card's
    # count comes from the original JAX checkpoint)
    assert catalog.get("EleutherAI/gpt-j-6b").total_params == pytest.approx(6_053_381_344, rel=1e-3)


# (name, published active, tolerance, convention, source)
PUBLISHED_ACTIVE = [
    ("mistralai/Mixtral-8x7B-v0.1", 12.9 * B, 0.05 * B, "with", "Mistral AI 'Mixtral of experts': 12.9B"),
    ("Qwen/Qwen3-30B-A3B", 3.3 * B, 0.1 * B, "with", "Qwen3 model card: 3.3B activated (truncated)"),
    ("Qwen/Qwen3-235B-A22B", 22 * B, 0.5 * B, "with", "Qwen3 model card: 22B activated"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 17 * B, 0.5 * B, "with", "Llama 4 model card: 17B active"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 17 * B, 0.5 * B, "with", "Llama 4 card: 17B active"),
    ("deepseek-ai/DeepSeek-V3", 37 * B, 0.5 * B, "without", "DeepSeek-V3 report: 37B activated"),
    ("moonshotai/Kimi-K2-Instruct", 32 * B, 0.5 * B, "without", "Kimi K2 model card: 32B activated"),
    ("openai/gpt-oss-120b", 5.13 * B, 0.005 * B, "without", "gpt-oss model card Table 1: 5.13B active"),
    ("openai/gpt-oss-20b", 3.61 * B, 0.005 * B, "without", "gpt-oss model card Table 1: 3.61B active"),
]


@pytest.mark.parametrize(("name", "published", "tol", "convention", "source"), PUBLISHED_ACTIVE,
                         ids=[p[0] for p in PUBLISHED_ACTIVE])
def test_active_params_match_published(catalog: ModelCatalog, name: str, published: float, tol: float,
                                       convention: str, source: str) -> None:
    arch = catalog.get(name)
    value = arch.active_params if convention == "with" else arch.active_params_excluding_embedding
    assert value == pytest.approx(published, abs=tol), source


def test_deepseek_v3_total_excludes_the_mtp_module(catalog: ModelCatalog) -> None:
    # DeepSeek-V3 model card: the 685B checkpoint = 671B main model + 14B MTP module
    arch = catalog.get("deepseek-ai/DeepSeek-V3")
    assert arch.num_mtp_layers == 1
    assert 684 * B < arch.total_params + 14 * B < 686 * B


DEEPSEEK_V2_LITE = {
    # DeepSeek-V2 arXiv:2405.04434 App. B: 27 layers, hidden 2048, 16 heads, KV rank 512, no query
    # compression, first layer dense, then 2 shared + 64 routed experts of 1408, 6 activated
    "model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
    "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "first_k_dense_replace": 1, "intermediate_size": 10944, "moe_intermediate_size": 1408,
    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "vocab_size": 102400,
    "max_position_embeddings": 163840, "tie_word_embeddings": False,
}


def test_deepseek_v2_lite_inline_config() -> None:
    # DeepSeek-V2 arXiv:2405.04434 App. B: "15.7B total parameters, of which 2.4B are activated".
    # One decimal, truncated like DeepSeek-V2's 236B/21B: tolerance 0.1B. The other conventions give
    # 2.66B (with the embedding) and 2.24B (without embedding and LM head).
    arch = from_hf_config(DEEPSEEK_V2_LITE)
    assert arch.total_params == pytest.approx(15.7 * B, abs=0.05 * B)
    assert arch.active_params_excluding_embedding == pytest.approx(2.4 * B, abs=0.1 * B)
    names = [lin.name for lin in arch.attention_linears(arch.layer_groups[0])]
    assert names == ["q", "kv_a", "kv_b", "o"]  # no q_a/q_b without query compression


def test_qwen25_non_embedding_params(catalog: ModelCatalog) -> None:
    # Qwen2.5-7B model card: 6.53B non-embedding parameters
    arch = catalog.get("Qwen/Qwen2.5-7B")
    non_embedding = arch.total_params - arch.embedding_params - arch.lm_head_params
    assert non_embedding == pytest.approx(6.53 * B, abs=0.01 * B)


# --------------------------------------------------------------------------------------------------
# KV cache and state
# --------------------------------------------------------------------------------------------------

def test_kv_bytes_llama31_70b(catalog: ModelCatalog) -> None:
    # 80 layers × (K + V) × 8 KV heads × 128 × 2 bytes
    assert catalog.get("meta-llama/Llama-3.1-70B").kv_cache_bytes_per_token(2.0) == 80 * 2 * 8 * 128 * 2


def test_kv_bytes_deepseek_v3_mla(catalog: ModelCatalog) -> None:
    # 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes
    arch = catalog.get("deepseek-ai/DeepSeek-V3")
    assert arch.kv_cache_bytes_per_token(2.0) == 61 * (512 + 64) * 2
    assert arch.kv_cache_bytes_per_token(1.0) == 61 * (512 + 64)


def test_kv_bytes_gpt_oss_sliding_window(catalog: ModelCatalog) -> None:
    # gpt-oss model card: 36 layers alternating a 128-token banded window and full attention,
    # 8 KV heads of 64; per layer and token (K + V) = 2 × 8 × 64 elements
    arch = catalog.get("openai/gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2
    assert arch.kv_cache_bytes_per_token(2.0) == 18 * per_layer  # long-context marginal: full layers
    assert arch.kv_cache_bytes_per_token(2.0, context_tokens=100) == 36 * per_layer  # inside the window
    expected = (18 * per_layer * 4096 + 18 * per_layer * 128) / 4096
    assert arch.kv_cache_bytes_per_token(2.0, context_tokens=4096) == pytest.approx(expected)
    assert arch.kv_cache_bytes_per_sequence(2.0, 4096) == pytest.approx(expected * 4096)


def test_kv_bytes_mistral_all_layers_windowed(catalog: ModelCatalog) -> None:
    # Mistral 7B arXiv:2310.06825 Table 1: window 4096 on all 32 layers, 8 KV heads of 128
    arch = catalog.get("Mistral-7B")
    per_token = 32 * 2 * 8 * 128 * 2
    assert arch.kv_cache_bytes_per_token(2.0, context_tokens=2048) == per_token
    assert arch.kv_cache_bytes_per_token(2.0, context_tokens=8192) == per_token / 2
    assert arch.kv_cache_bytes_per_token(2.0) == 0.0  # a longer sequence holds no more KV


def test_kv_and_state_qwen35_hybrid(catalog: ModelCatalog) -> None:
    # Qwen3.5-27B config: 64 layers, full attention every 4th (4 KV heads of 256), the rest Gated
    # DeltaNet with 16 key heads / 48 value heads of 128 and a 4-tap convolution
    arch = catalog.get("Qwen/Qwen3.5-27B")
    assert arch.kv_cache_bytes_per_token(2.0) == 16 * 2 * 4 * 256 * 2
    recurrent = 48 * 128 * 128 * 4.0
    conv = 3 * (2 * 16 * 128 + 48 * 128) * 2.0
    assert arch.state_bytes_per_sequence(4.0, conv_dtype_bytes=2.0) == 48 * (recurrent + conv)
    assert catalog.get("meta-llama/Llama-3.1-8B").state_bytes_per_sequence(4.0) == 0.0


def test_kv_bytes_mimo_v2_flash_hybrid(catalog: ModelCatalog) -> None:
    # MiMo-V2-Flash config: 9 full-attention layers (4 KV heads, K 192 + V 128) among 48
    arch = catalog.get("XiaomiMiMo/MiMo-V2-Flash")
    assert arch.kv_cache_bytes_per_token(2.0) == 9 * 4 * (192 + 128) * 2


def test_kv_context_must_be_positive(catalog: ModelCatalog) -> None:
    arch = catalog.get("Qwen/Qwen3-8B")
    with pytest.raises(ValueError):
        arch.kv_cache_bytes_per_token(2.0, context_tokens=0)


# --------------------------------------------------------------------------------------------------
# structure: layer groups and projection shapes
# --------------------------------------------------------------------------------------------------

def _shapes(linears: Any) -> dict[str, tuple[int, int, str]]:
    return {lin.name: (lin.in_features, lin.out_features, lin.split) for lin in linears}


def test_llama_linears(catalog: ModelCatalog) -> None:
    arch = catalog.get("meta-llama/Llama-3.1-70B")
    (group,) = arch.layer_groups
    assert _shapes(arch.attention_linears(group)) == {
        "q": (8192, 8192, "column"), "k": (8192, 1024, "column"), "v": (8192, 1024, "column"),
        "o": (8192, 8192, "row"),
    }
    assert _shapes(arch.ffn_linears(group)) == {
        "gate": (8192, 28672, "column"), "up": (8192, 28672, "column"), "down": (28672, 8192, "row"),
    }
    assert arch.router_linear(group) is None
    assert arch.shared_expert_linears(group) == ()


def test_deepseek_v3_structure(catalog: ModelCatalog) -> None:
    arch = catalog.get("deepseek-ai/DeepSeek-V3")
    dense, moe = arch.layer_groups
    assert (dense.num_layers, dense.ffn.kind, moe.num_layers, moe.ffn.kind) == (3, "dense", 58, "moe")
    # MLA (DeepSeek-V2 arXiv:2405.04434 Eqs. 37-47) with V3's dims: 128 heads, q rank 1536, KV rank 512
    assert _shapes(arch.attention_linears(moe)) == {
        "q_a": (7168, 1536, "none"), "q_b": (1536, 128 * (128 + 64), "column"),
        "kv_a": (7168, 512 + 64, "none"), "kv_b": (512, 128 * (128 + 128), "column"),
        "o": (128 * 128, 7168, "row"),
    }
    assert _shapes(arch.shared_expert_linears(moe))["up"] == (7168, 2048, "column")
    router = arch.router_linear(moe)
    assert router is not None and (router.out_features, router.split) == (256, "none")
    assert (moe.ffn.num_experts, moe.ffn.num_experts_per_token) == (256, 8)


def test_gpt_oss_alternates_sliding_and_full(catalog: ModelCatalog) -> None:
    arch = catalog.get("openai/gpt-oss-20b")
    windows = [g.attention.sliding_window for g in arch.layer_groups]
    assert windows == [128, None] * 12
    assert all(g.num_layers == 1 for g in arch.layer_groups)


def test_llama4_interleaves_moe_and_chunked_attention(catalog: ModelCatalog) -> None:
    arch = catalog.get("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    layers = [g for g in arch.layer_groups for _ in range(g.num_layers)]
    assert [g.ffn.kind for g in layers[:4]] == ["dense", "moe", "dense", "moe"]
    assert [g.attention.attention_chunk_size for g in layers[:4]] == [8192, 8192, 8192, None]
    moe = layers[1]
    assert (moe.ffn.num_experts, moe.ffn.num_experts_per_token, moe.ffn.num_shared_experts) == (128, 1, 1)
    assert layers[0].ffn.intermediate_size == 16384  # intermediate_size_mlp of the dense layers


def test_qwen35_linear_attention_projections(catalog: ModelCatalog) -> None:
    arch = catalog.get("Qwen/Qwen3.5-27B")
    linear, full = arch.layer_groups[0], arch.layer_groups[1]
    assert (linear.num_layers, linear.attention.kind) == (3, "linear")
    assert (full.num_layers, full.attention.kind) == (1, "gqa")
    assert _shapes(arch.attention_linears(linear)) == {
        "in_proj_qkvz": (5120, 2 * 16 * 128 + 2 * 48 * 128, "column"),
        "in_proj_ba": (5120, 2 * 48, "column"),
        "out_proj": (48 * 128, 5120, "row"),
    }
    assert "q_gate" in _shapes(arch.attention_linears(full))  # attn_output_gate


def test_vision_language_config_costs_the_text_model(catalog: ModelCatalog) -> None:
    vl = catalog.get("Qwen/Qwen3-VL-30B-A3B-Instruct")
    text = catalog.get("Qwen/Qwen3-30B-A3B")
    assert vl.layer_groups == text.layer_groups
    assert "vision encoder not costed" in vl.source


# --------------------------------------------------------------------------------------------------
# weights and dtypes
# --------------------------------------------------------------------------------------------------

def test_weight_bytes_keep_embeddings_in_16_bit(catalog: ModelCatalog) -> None:
    arch = catalog.get("meta-llama/Llama-3.1-8B")
    assert arch.weight_bytes(2.0) == 2 * arch.total_params
    embeddings = 2 * 128256 * 4096  # input embedding + untied LM head
    expected = (8.03 * B - embeddings) * 1.0 + embeddings * 2.0
    assert arch.weight_bytes(1.0) == pytest.approx(expected, rel=1e-3)


def test_weight_bytes_reproduce_gpt_oss_checkpoints(catalog: ModelCatalog) -> None:
    # gpt-oss model card arXiv:2508.10925 Sec. 2: MXFP4 experts (4 bit + one 8-bit scale per 32),
    # everything else bf16; checkpoints of 60.8 GiB (120b) and 12.8 GiB (20b)
    mxfp4 = 0.5 + 1 / 32
    gib = 1024**3
    assert catalog.get("openai/gpt-oss-120b").weight_bytes(mxfp4, 2.0) / gib == pytest.approx(60.8, abs=0.1)
    assert catalog.get("openai/gpt-oss-20b").weight_bytes(mxfp4, 2.0) / gib == pytest.approx(12.8, abs=0.1)


@pytest.mark.parametrize(("name", "dtype"), [
    ("Qwen/Qwen3-32B", None),
    ("Qwen/Qwen3-32B-FP8", "fp8"),  # quantization_config.quant_method fp8
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8"),  # hf_quant_config.json quant_algo FP8
    ("nvidia/Qwen3-235B-A22B-NVFP4", "fp4"),  # hf_quant_config.json quant_algo NVFP4
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", "fp4"),  # MIXED_PRECISION: NVFP4 experts, FP8 attention
    ("openai/gpt-oss-120b", "fp4"),  # quant_method mxfp4
    ("moonshotai/Kimi-K2.5", "int4"),  # compressed-tensors, 4-bit int groups
    ("deepseek-ai/DeepSeek-V3", "fp8"),
])
def test_native_weight_dtype(catalog: ModelCatalog, name: str, dtype: str | None) -> None:
    assert catalog.get(name).native_weight_dtype == dtype


@pytest.mark.parametrize(("weights", "kv"), [("bf16", "bf16"), ("fp16", "fp16"), ("fp8", "fp8"),
                                             ("int8", "int8"), ("int4", "bf16"), ("fp4", "bf16")])
def test_default_kv_dtype_follows_weights(catalog: ModelCatalog, weights: str, kv: str) -> None:
    assert catalog.get("Qwen/Qwen3-8B").default_kv_dtype(weights) == kv


# --------------------------------------------------------------------------------------------------
# catalog lookup
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "canonical"), [
    # the contract's examples (the shared file of the first is Meta-Llama-3.1-70B)
    ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
    ("meta-llama/Meta-Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
    ("Qwen/Qwen3-32B", "Qwen/Qwen3-32B"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3"),
    ("DEEPSEEK-AI/deepseek-v3", "deepseek-ai/DeepSeek-V3"),
    ("  qwen/QWEN3-32b ", "Qwen/Qwen3-32B"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("meta-llama/Llama-2-70b-chat-hf", "meta-llama/Llama-2-70b-hf"),
    ("moonshotai/Kimi-K2-Base", "moonshotai/Kimi-K2-Instruct"),
    # names in shared/data/published_measurements.csv and serving_benchmarks_h100.csv
    ("Llama2-70B", "meta-llama/Llama-2-70b-hf"),
    ("LLaMA2-70B", "meta-llama/Llama-2-70b-hf"),
    ("Llama-2-70B", "meta-llama/Llama-2-70b-hf"),
    ("Llama2-70B (coding)", "meta-llama/Llama-2-70b-hf"),
    ("Llama-2-7B", "meta-llama/Llama-2-7b-hf"),
    ("Mistral-7B", "mistralai/Mistral-7B-v0.1"),
    ("Yi-34B", "01-ai/Yi-34B"),
    ("Falcon-180B", "tiiuae/falcon-180B"),
    ("BLOOM-176B", "bigscience/bloom"),
    ("OPT-13B", "facebook/opt-13b"),
    ("OPT-66B", "facebook/opt-66b"),
    ("OPT-175B", "facebook/opt-175b"),
    ("LLaMA-13B", "huggyllama/llama-13b"),
    ("LLaMA-33B", "huggyllama/llama-30b"),
    ("Llama-3.1 8B", "meta-llama/Llama-3.1-8B"),
    ("Llama-3 70B", "meta-llama/Meta-Llama-3-70B"),
    ("LLaMA3-70B (KV size reference)", "meta-llama/Meta-Llama-3-70B"),
    ("Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
    ("DeepSeek-V3 (671B MoE)", "deepseek-ai/DeepSeek-V3"),
    ("Qwen2.5-7B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-7B"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B-FP8"),
    ("openai/gpt-oss-120b", "openai/gpt-oss-120b"),
    ("MiniMaxAI/MiniMax-M2.5", "MiniMaxAI/MiniMax-M2.5"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1"),
])
def test_names_resolve(catalog: ModelCatalog, name: str, canonical: str) -> None:
    assert catalog.resolve(name) == canonical
    assert name in catalog


def test_quantized_variant_keeps_its_dtype(catalog: ModelCatalog) -> None:
    base = catalog.get("meta-llama/Llama-3.1-8B")
    fp8 = catalog.get("nvidia/Llama-3.1-8B-Instruct-FP8")
    assert catalog.resolve("nvidia/Llama-3.1-8B-Instruct-FP8") == "meta-llama/Llama-3.1-8B"
    assert (base.native_weight_dtype, fp8.native_weight_dtype) == (None, "fp8")
    assert fp8.layer_groups == base.layer_groups
    assert catalog.get("nvidia/Qwen3-32B-NVFP4").native_weight_dtype == "fp4"
    assert catalog.get("Qwen2.5-7B-Instruct-GPTQ-Int4").native_weight_dtype == "int4"


def test_aliases_are_recorded(catalog: ModelCatalog) -> None:
    arch = catalog.get("meta-llama/Llama-3.1-70B")
    assert "meta-llama/Meta-Llama-3.1-70B" in arch.aliases
    assert isinstance(arch, ModelArchitecture) and arch.id == "meta-llama/Llama-3.1-70B"


def test_unknown_model_suggests_closest_ids(catalog: ModelCatalog) -> None:
    with pytest.raises(UnknownModel) as info:
        catalog.get("meta-llama/Llama-3.1-7B")
    assert info.value.status == 404
    assert "meta-llama/Llama-3.1-8B" in info.value.extra["closest_ids"]
    with pytest.raises(UnknownModel):
        catalog.resolve("no-such-org/no-such-model")


@pytest.mark.parametrize(("name", "mentions"), [
    ("zai-org/GLM-5", "index_topk"),
    ("deepseek-ai/DeepSeek-V3.2", "index_topk"),
    ("deepseek-ai/DeepSeek-V4-Pro", "compress_ratios"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "Mamba-2"),
    ("moonshotai/Kimi-K3", "kda_layers"),
    ("MiniMaxAI/MiniMax-M3", "sparse_attention_config"),
    ("google/gemma-4-26B-A4B", "attention_k_eq_v"),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "block_configs"),
    ("zai-org/GLM-5-NVFP4", "index_topk"),  # a variant name of a refused entry is refused too
])
def test_unsupported_entries_are_refused_with_a_reason(catalog: ModelCatalog, name: str,
                                                       mentions: str) -> None:
    with pytest.raises(UnsupportedModel) as info:
        catalog.get(name)
    assert info.value.status == 422
    assert mentions in info.value.detail
    assert catalog.resolve(name) in catalog.unsupported()
    assert catalog.resolve(name) not in catalog.ids()
    assert catalog.resolve(name) in catalog.ids(include_unsupported=True)


def test_every_entry_parses_or_is_marked_unsupported(catalog: ModelCatalog) -> None:
    for model_id in catalog.ids(include_unsupported=True):
        entry = catalog.entries[model_id]
        assert entry.source, model_id
        if entry.unsupported_reason is not None:
            with pytest.raises(UnsupportedModel):
                from_hf_config(entry.config, model_id=model_id)
            continue
        arch = catalog.get(model_id)
        text = entry.config.get("text_config") or entry.config
        layers = text.get("num_hidden_layers") or text.get("n_layer")
        assert arch.num_layers == layers, model_id
        assert 0 < arch.active_params <= arch.total_params, model_id
        assert arch.kv_cache_bytes_per_token(2.0, context_tokens=1) > 0, model_id
        assert arch.native_weight_dtype == entry.native_weight_dtype, model_id


def test_catalog_ships_inside_the_package() -> None:
    assert CATALOG_DIR == Path(planner.__file__).resolve().parent / "model_catalog"
    index = json.loads((CATALOG_DIR / "index.json").read_text(encoding="utf-8"))
    files = {meta["file"] for meta in index["models"].values()}
    assert all((CATALOG_DIR / name).is_file() for name in files)
    assert {p.name for p in CATALOG_DIR.glob("*.json")} == files | {"index.json"}


@pytest.mark.skipif(not SHARED_CONFIGS.is_dir(), reason="../shared is not beside the checkout")
def test_catalog_is_up_to_date_with_the_build_script() -> None:
    script = REPO / "scripts" / "build_model_catalog.py"
    spec = importlib.util.spec_from_file_location("build_model_catalog", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = module.build(SHARED_CONFIGS)
    for name, text in files.items():
        assert (CATALOG_DIR / name).read_text(encoding="utf-8") == text, name


# --------------------------------------------------------------------------------------------------
# inline configs with bad numbers
# --------------------------------------------------------------------------------------------------

LLAMA = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
}


def test_inline_llama_config_matches_the_catalog(catalog: ModelCatalog) -> None:
    inline = from_hf_config(LLAMA)
    assert inline.id == "inline"
    assert inline.total_params == catalog.get("meta-llama/Meta-Llama-3-8B").total_params


@pytest.mark.parametrize(("change", "field"), [
    ({"hidden_size": 0}, "hidden_size"),
    ({"hidden_size": -4096}, "hidden_size"),
    ({"hidden_size": 4096.5}, "hidden_size"),
    ({"hidden_size": "4096"}, "hidden_size"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"num_attention_heads": 30, "num_key_value_heads": 30}, "num_attention_heads"),  # 4096/30, no head_dim
    ({"vocab_size": None}, "vocab_size"),
    ({"num_hidden_layers": MAX_NUM_LAYERS + 1}, "num_hidden_layers"),
    ({"intermediate_size": 10**12}, "intermediate_size"),
    ({"model_type": "my_new_arch"}, "model_type"),
    ({"model_type": None}, "model_type"),
    ({"model_type": "nemotron_h"}, "model_type"),
])
def test_inline_configs_with_bad_numbers_are_refused(change: dict[str, Any], field: str) -> None:
    with pytest.raises(UnsupportedModel) as info:
        from_hf_config({**LLAMA, **change})
    assert info.value.extra["field"] == field
    assert field in info.value.detail


def test_inline_moe_with_more_active_than_experts_is_refused() -> None:
    config = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9}
    with pytest.raises(UnsupportedModel, match="num_experts_per_tok"):
        from_hf_config(config)


def test_inline_layer_types_are_checked() -> None:
    bad_kind = {**LLAMA, "model_type": "gpt_oss", "num_local_experts": 8, "num_experts_per_tok": 2,
                "sliding_window": 128, "layer_types": ["sliding_attention", "mamba"] * 16}
    with pytest.raises(UnsupportedModel, match="mamba"):
        from_hf_config(bad_kind)
    wrong_length = {**bad_kind, "layer_types": ["full_attention"] * 31}
    with pytest.raises(UnsupportedModel, match="layer_types"):
        from_hf_config(wrong_length)
    missing_window = {**bad_kind, "layer_types": ["sliding_attention", "full_attention"] * 16,
                      "sliding_window": None}
    with pytest.raises(UnsupportedModel, match="sliding_window"):
        from_hf_config(missing_window)


def test_inline_gemma2_config() -> None:
    # Gemma 2 arXiv:2408.00118 Table 1 (9B: d_model 3584, 42 layers, 16 heads / 8 KV heads of 256,
    # FFN 14336 GeGLU, 256k vocabulary, tied embeddings, local 4096 / global alternating);
    # Hugging Face model page of google/gemma-2-9b: 9.24B params
    config = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
              "sliding_window": 4096, "max_position_embeddings": 8192}
    arch = from_hf_config(config)
    assert arch.tie_word_embeddings
    assert arch.total_params == pytest.approx(9.24 * B, abs=0.005 * B)
    assert [g.attention.sliding_window for g in arch.layer_groups[:2]] == [4096, None]


def test_inline_config_must_be_an_object() -> None:
    with pytest.raises(UnsupportedModel):
        from_hf_config([1, 2, 3])  # type: ignore[arg-type]


def test_unknown_quantization_method_is_refused() -> None:
    with pytest.raises(UnsupportedModel, match="quant_method"):
        from_hf_config({**LLAMA, "quantization_config": {"quant_method": "secret_sauce"}})
