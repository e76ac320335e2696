"""Regenerate planner/model_catalog/ from ../shared/data/model_configs/ and the hand-written table below.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/build_model_catalog.py            # write the catalog
    PYTHONPATH=. .venv/bin/python scripts/build_model_catalog.py --check    # fail if it is stale

Every shared ``<org>--<name>.config.json`` becomes ``planner/model_catalog/<org>--<name>.json``
(minified; a sibling ``hf_quant_config.json`` is merged in under ``hf_quant_config``; long module
lists inside quantization configs are dropped and recorded under ``_catalog_trimmed``). Older
public-benchmark models that have no shared config are written from their published architecture
facts (``HAND_WRITTEN``), each with its citation. ``index.json`` maps every canonical id to its file,
source, aliases, native weight dtype and, for configs the planner refuses, the reason (found by
running ``planner.models.from_hf_config`` on the config). The output is deterministic.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.errors import UnsupportedModel
from planner.models import CATALOG_DIR, from_hf_config

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO.parent / "shared" / "data" / "model_configs"

#: shared file ids whose Hugging Face repository was renamed: canonical id -> old id (kept as alias)
RENAMED = {
    "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-405B": "meta-llama/Llama-3.1-405B",
}

#: extra names, e.g. those used in ../shared/data/published_measurements.csv (unambiguous only)
ALIASES: dict[str, list[str]] = {
    "meta-llama/Llama-3.1-8B": ["Llama3.1-8B"],
    "meta-llama/Llama-3.1-70B": ["Llama3.1-70B"],
    "meta-llama/Llama-3.1-405B": ["Llama3.1-405B"],
    "deepseek-ai/DeepSeek-V3": ["DeepSeek-V3-671B"],
    "mistralai/Mixtral-8x7B-v0.1": ["Mixtral-8x7B"],
    "mistralai/Mixtral-8x22B-v0.1": ["Mixtral-8x22B"],
}

_LLAMA2 = ("Touvron et al., 'Llama 2: Open Foundation and Fine-Tuned Chat Models', arXiv:2307.09288, "
           "Table 1 (sizes, 4k context, GQA for 70B) and Sec. 2.2; widths, heads and vocabulary as in the "
           "meta-llama/Llama-2-{size}-hf config.json")
_LLAMA1 = ("Touvron et al., 'LLaMA: Open and Efficient Foundation Language Models', arXiv:2302.13971, "
           "Table 2 (dimension, heads, layers; {size} parameters) and Sec. 2.2 (SwiGLU, 2k context); MLP "
           "width as in the huggyllama/llama-{name} config.json")
_OPT = ("Zhang et al., 'OPT: Open Pre-trained Transformer Language Models', arXiv:2205.01068, Table 1 "
        "(layers, heads, d_model; FFN 4·d_model, 2048 context, GPT-2 BPE vocabulary padded to 50272 as in "
        "the facebook/opt-* config.json)")


def _llama(hidden: int, ffn: int, heads: int, layers: int, kv: int, vocab: int, ctx: int) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
            "intermediate_size": ffn, "num_attention_heads": heads, "num_hidden_layers": layers,
            "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": ctx,
            "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float16"}


def _opt(hidden: int, layers: int, heads: int) -> dict[str, Any]:
    return {"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": hidden,
            "num_hidden_layers": layers, "num_attention_heads": heads, "ffn_dim": 4 * hidden,
            "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": hidden,
            "do_layer_norm_before": True, "enable_bias": True, "activation_function": "relu",
            "tie_word_embeddings": True, "torch_dtype": "float16"}


#: models without a shared config: (canonical id, config, source, aliases)
HAND_WRITTEN: list[tuple[str, dict[str, Any], str, list[str]]] = [
    ("meta-llama/Llama-2-7b-hf", _llama(4096, 11008, 32, 32, 32, 32000, 4096), _LLAMA2.format(size="7b"),
     ["meta-llama/Llama-2-7b", "Llama-2-7B", "Llama2-7B", "LLaMA2-7B", "LLaMA-2-7B"]),
    ("meta-llama/Llama-2-13b-hf", _llama(5120, 13824, 40, 40, 40, 32000, 4096), _LLAMA2.format(size="13b"),
     ["meta-llama/Llama-2-13b", "Llama-2-13B", "Llama2-13B", "LLaMA2-13B", "LLaMA-2-13B"]),
    ("meta-llama/Llama-2-70b-hf", _llama(8192, 28672, 64, 80, 8, 32000, 4096), _LLAMA2.format(size="70b"),
     ["meta-llama/Llama-2-70b", "Llama-2-70B", "Llama2-70B", "LLaMA2-70B", "LLaMA-2-70B"]),
    ("huggyllama/llama-13b", _llama(5120, 13824, 40, 40, 40, 32000, 2048),
     _LLAMA1.format(size="13.0B", name="13b"), ["LLaMA-13B", "LLaMA-1-13B"]),
    ("huggyllama/llama-30b", _llama(6656, 17920, 52, 60, 52, 32000, 2048),
     _LLAMA1.format(size="32.5B", name="30b"), ["LLaMA-33B", "LLaMA-30B", "LLaMA-1-33B"]),
    ("mistralai/Mistral-7B-v0.1",
     {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 4096,
      "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 32768,
      "sliding_window": 4096,
      "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
     "Jiang et al., 'Mistral 7B', arXiv:2310.06825, Table 1 (dim 4096, 32 layers, head_dim 128, hidden_dim "
     "14336, 32 heads, 8 KV heads, window 4096, vocab 32000); max_position_embeddings as in the "
     "mistralai/Mistral-7B-v0.1 config.json", ["Mistral-7B", "mistralai/Mistral-7B"]),
    ("01-ai/Yi-34B", _llama(7168, 20480, 56, 60, 8, 64000, 4096),
     "01.AI, 'Yi: Open Foundation Models by 01.AI', arXiv:2403.04652, Table 1 (hidden 7168, 56 query heads, "
     "8 KV heads, 60 layers, 4k pretraining length) and Sec. 2.2 (64,000-token vocabulary); MLP width as in "
     "the 01-ai/Yi-34B config.json", ["Yi-34B"]),
    ("Qwen/Qwen2.5-7B",
     {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
      "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
      "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
      "use_sliding_window": False,
      "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
     "Qwen Team, 'Qwen2.5 Technical Report', arXiv:2412.15115, Table 1 (28 layers, 28/4 heads, untied "
     "embeddings) and the Qwen/Qwen2.5-7B model card (7.61B parameters, 6.53B non-embedding); widths and "
     "vocabulary as in its config.json", ["Qwen2.5-7B"]),
    ("EleutherAI/gpt-j-6b",
     {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "n_embd": 4096, "n_layer": 28, "n_head": 16,
      "n_inner": None, "n_positions": 2048, "rotary_dim": 64, "vocab_size": 50400,
      "activation_function": "gelu_new", "tie_word_embeddings": False, "torch_dtype": "float32"},
     "Wang & Komatsuzaki, GPT-J-6B (github.com/kingoflolz/mesh-transformer-jax, 2021) and the "
     "EleutherAI/gpt-j-6b model card hyperparameter table (6,053,381,344 parameters, 28 layers, d_model "
     "4096, d_ff 16384, 16 heads, RoPE on 64 dims, n_ctx 2048, vocabulary padded to 50400)",
     ["GPT-J-6B", "GPT-J"]),
    ("tiiuae/falcon-180B",
     {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "hidden_size": 14848,
      "num_hidden_layers": 80, "num_attention_heads": 232, "num_kv_heads": 8,
      "new_decoder_architecture": True, "parallel_attn": True, "bias": False, "alibi": False,
      "vocab_size": 65024, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"},
     "Almazrouei et al., 'The Falcon Series of Open Language Models', arXiv:2311.16867, Sec. 4 and Table 13 "
     "(80 layers, d_model 14848, 232 query heads of 64, 8 KV groups, parallel attention/MLP, 4x GELU MLP, "
     "65,024-token vocabulary, 2,048 context); embeddings tied per the FalconConfig default",
     ["Falcon-180B"]),
    ("facebook/opt-13b", _opt(5120, 40, 40), _OPT, ["OPT-13B"]),
    ("facebook/opt-66b", _opt(9216, 64, 72), _OPT, ["OPT-66B"]),
    ("facebook/opt-175b", _opt(12288, 96, 96), _OPT, ["OPT-175B"]),
    ("bigscience/bloom",
     {"model_type": "bloom", "architectures": ["BloomForCausalLM"], "hidden_size": 14336, "n_layer": 70,
      "n_head": 112, "vocab_size": 250880, "seq_length": 2048, "tie_word_embeddings": True,
      "torch_dtype": "bfloat16"},
     "BigScience Workshop, 'BLOOM: A 176B-Parameter Open-Access Multilingual Language Model', "
     "arXiv:2211.05100, Table 3 (70 layers, 112 heads, hidden 14336, 2048 sequence length, ALiBi, "
     "embedding LayerNorm) and the 250,880-token vocabulary of the bigscience/bloom config.json",
     ["BLOOM-176B", "BLOOM"]),
]

#: Llama 3 (8k context) = Llama 3.1 architecture with the original context: (id, 3.1 id, aliases)
LLAMA3_FROM_31 = [
    ("meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-3.1-8B",
     ["meta-llama/Llama-3-8B", "Llama-3-8B", "Llama3-8B", "LLaMA3-8B"]),
    ("meta-llama/Meta-Llama-3-70B", "meta-llama/Llama-3.1-70B",
     ["meta-llama/Llama-3-70B", "Llama-3-70B", "Llama3-70B", "LLaMA3-70B"]),
]
_LLAMA3 = ("Meta, Llama 3 model card (github.com/meta-llama/llama3/blob/main/MODEL_CARD.md: GQA, 8k context, "
           "128K vocabulary) and Dubey et al., 'The Llama 3 Herd of Models', arXiv:2407.21783, Table 3; same "
           "layers as {base} with max_position_embeddings 8192 and no RoPE scaling")

_LONG_LIST = 16


def _trim_quant(block: Any, where: str, trimmed: list[str]) -> Any:
    """Drop long module-name lists (ignore, exclude_modules, targets, ...) anywhere in a quantization
    block and summarize per-layer quantization (``quantized_layers``) into ``quantized_algos``."""
    if not isinstance(block, Mapping):
        return block
    out: dict[str, Any] = {}
    for key, value in block.items():
        if isinstance(value, list) and len(value) > _LONG_LIST and all(isinstance(v, str) for v in value):
            trimmed.append(f"{where}.{key} ({len(value)} module names)")
        elif key == "quantized_layers" and isinstance(value, Mapping):
            algos = {v.get("quant_algo") for v in value.values() if isinstance(v, Mapping)}
            out["quantized_algos"] = sorted(algos)
            trimmed.append(f"{where}.quantized_layers ({len(value)} layers, summarized as quantized_algos)")
        else:
            out[key] = _trim_quant(value, f"{where}.{key}", trimmed)
    return out


def _prepare(config: dict[str, Any], quant: dict[str, Any] | None) -> dict[str, Any]:
    trimmed: list[str] = []
    out = dict(config)
    if isinstance(out.get("quantization_config"), Mapping):
        out["quantization_config"] = _trim_quant(out["quantization_config"], "quantization_config", trimmed)
    text = out.get("text_config")
    if isinstance(text, Mapping) and isinstance(text.get("quantization_config"), Mapping):
        text = dict(text)
        text["quantization_config"] = _trim_quant(
            text["quantization_config"], "text_config.quantization_config", trimmed
        )
        out["text_config"] = text
    if quant is not None:
        q = dict(quant)
        if isinstance(q.get("quantization"), Mapping):
            q["quantization"] = _trim_quant(q["quantization"], "hf_quant_config.quantization", trimmed)
        out["hf_quant_config"] = q
    if trimmed:
        out["_catalog_trimmed"] = trimmed
    return out


def _dump(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n"


def _classify(config: Mapping[str, Any], model_id: str) -> tuple[str | None, str | None]:
    """(native weight dtype, refusal reason) of one config."""
    try:
        arch = from_hf_config(config, model_id=model_id)
    except UnsupportedModel as exc:
        return None, exc.detail
    return arch.native_weight_dtype, None


def build(shared: Path) -> dict[str, str]:
    """All output files: name -> text."""
    files: dict[str, str] = {}
    index: dict[str, dict[str, Any]] = {}
    raw_by_id: dict[str, dict[str, Any]] = {}
    for path in sorted(shared.glob("*.config.json")):
        stem = path.name[: -len(".config.json")]
        org, _, name = stem.partition("--")
        repo_id = f"{org}/{name}"
        canonical = RENAMED.get(repo_id, repo_id)
        config = json.loads(path.read_text(encoding="utf-8"))
        quant_path = path.with_name(f"{stem}.hf_quant_config.json")
        quant = json.loads(quant_path.read_text(encoding="utf-8")) if quant_path.exists() else None
        prepared = _prepare(config, quant)
        out_name = f"{stem}.json"
        files[out_name] = _dump(prepared)
        raw_by_id[canonical] = config
        source = (f"Hugging Face config.json of {repo_id} (https://huggingface.co/{repo_id}), copied from "
                  f"shared/data/model_configs/{path.name}")
        if quant is not None:
            source += f" with {quant_path.name}"
        aliases = ([repo_id] if canonical != repo_id else []) + ALIASES.get(canonical, [])
        dtype, reason = _classify(prepared, canonical)
        index[canonical] = {"file": out_name, "source": source, "aliases": aliases,
                            "native_weight_dtype": dtype, "unsupported": reason}
    hand = list(HAND_WRITTEN)
    for model_id, base_id, aliases in LLAMA3_FROM_31:
        config = dict(raw_by_id[base_id], max_position_embeddings=8192, rope_scaling=None)
        hand.append((model_id, config, _LLAMA3.format(base=base_id), aliases))
    for model_id, config, source, aliases in hand:
        out_name = model_id.replace("/", "--") + ".json"
        files[out_name] = _dump(config)
        dtype, reason = _classify(config, model_id)
        index[model_id] = {"file": out_name, "source": source, "aliases": aliases,
                           "native_weight_dtype": dtype, "unsupported": reason}
    ordered = {k: index[k] for k in sorted(index, key=str.lower)}
    files["index.json"] = json.dumps(
        {"version": 1, "generated_by": "scripts/build_model_catalog.py", "models": ordered},
        indent=1, ensure_ascii=False,
    ) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                        help="the shared model_configs directory")
    parser.add_argument("--out", type=Path, default=CATALOG_DIR, help="the catalog directory to write")
    parser.add_argument("--check", action="store_true", help="only check that the catalog is up to date")
    args = parser.parse_args(argv)
    files = build(args.shared)
    stale = sorted(
        name for name, text in files.items()
        if not (args.out / name).exists() or (args.out / name).read_text(encoding="utf-8") != text
    )
    existing = args.out.glob("*.json") if args.out.exists() else []
    extra = sorted(p.name for p in existing if p.name not in files)
    if args.check:
        if stale or extra:
            print(f"model catalog is stale: {stale + extra}", file=sys.stderr)
            return 1
        print(f"model catalog up to date ({len(files)} files)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in extra:
        (args.out / name).unlink()
    for name in stale:
        (args.out / name).write_text(files[name], encoding="utf-8")
    models = json.loads(files["index.json"])["models"]
    refused = sum(1 for m in models.values() if m["unsupported"])
    size = sum(len(t.encode()) for t in files.values())
    print(f"wrote {len(stale)} of {len(files)} files ({size / 1024:.0f} KiB); {len(models)} models, "
          f"{refused} refused")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
