"""Model architectures built from Hugging Face ``config.json`` files.

A model is a tuple of ``LayerGroup``s: runs of identical decoder layers (same attention kind, same
feed-forward). DeepSeek-V3 is ``(3 × MLA + dense MLP, 58 × MLA + MoE)``; gpt-oss alternates sliding
and full attention; Qwen3.5 mixes linear-attention (Gated DeltaNet) and full-attention layers.
The cost model walks the groups; parameter counts and KV bytes come from the same description.

Conventions (used by every count below)
---------------------------------------
* ``total_params`` counts every weight of the decoder stack, the input embedding and the LM head
  (once when tied), norms, biases and other small tensors. It excludes multi-token-prediction (MTP)
  modules (``num_nextn_predict_layers`` and friends): they are a speculative-decoding add-on, and
  DeepSeek's own "671B total / 37B activated" for DeepSeek-V3 excludes the 14B MTP module that the
  Hugging Face checkpoint adds (685B) [DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437,
  and the model card]. Vision encoders of multimodal configs are not counted (only ``text_config``).
* ``active_params`` is what one token passes through: attention, dense MLPs, shared experts, the
  router and the ``num_experts_per_token`` routed experts, plus the embedding and the LM head.
  Mistral, Qwen and Meta quote this figure (Mixtral-8x7B 12.9B, Qwen3-30B-A3B 3.3B, Llama 4 17B).
  DeepSeek, Moonshot, OpenAI and MiniMax leave the input embedding out (a lookup, no FLOPs): that is
  ``active_params_excluding_embedding``, which reproduces DeepSeek-V2-Lite's 2.4B [DeepSeek-AI,
  arXiv:2405.04434, App. B], DeepSeek-V3's 37B (36.6B; with the embedding it would be 37.5B) and
  gpt-oss-120b's 5.13B [OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925, Table 1].
* ``weight_bytes`` stores the projection matrices of the decoder layers in the requested dtype and
  keeps embeddings, the LM head, routers, norms, biases and other vectors in 16 bit, as FP8 and
  FP4 checkpoints do (DeepSeek-V3's fp8 config, ModelOpt's ``exclude_modules: [lm_head]``, gpt-oss's
  ``modules_to_not_convert``).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

from planner.errors import CatalogError, UnknownModel, UnsupportedModel
from planner.hardware import read_catalog_json

AttentionKind = Literal["gqa", "mla", "linear"]
Split = Literal["column", "row", "none"]

#: bytes per element of the tensors that stay in 16 bit whatever the weight dtype
HIGH_PRECISION_BYTES = 2.0
#: sanity limits for inline configs: larger numbers are refused, never silently costed
MAX_NUM_LAYERS = 4096
MAX_DIMENSION = 2**24


@dataclass(frozen=True, kw_only=True)
class Linear:
    """One weight matrix of a layer: ``y = x W`` with ``W`` of shape (in_features, out_features).

    ``split`` says how tensor parallelism shards it: ``column`` splits out_features, ``row`` splits
    in_features (and is followed by an all-reduce), ``none`` is replicated on every TP rank.
    ``bias`` adds an ``out_features`` vector (counted in ``num_params``).
    """

    name: str
    in_features: int
    out_features: int
    split: Split
    bias: bool = False

    @property
    def weight_params(self) -> int:
        """Elements of the matrix alone [params]."""
        return self.in_features * self.out_features

    @property
    def num_params(self) -> int:
        """Matrix plus bias [params]."""
        return self.weight_params + (self.out_features if self.bias else 0)


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """Attention block of a layer.

    ``gqa`` covers MHA (num_kv_heads == num_heads), GQA and MQA. ``mla`` is DeepSeek's multi-head
    latent attention: the cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token and layer.
    ``linear`` is a recurrent linear-attention block (Gated DeltaNet, Mamba-like): no per-token
    cache, a fixed state per sequence.

    For MLA, ``num_kv_heads`` equals ``num_heads`` (the per-head keys and values ``kv_b`` expands
    for prefill); decode attends over the one shared latent. For linear attention, ``num_heads`` /
    ``num_kv_heads`` / ``head_dim`` / ``v_head_dim`` repeat the value heads, key heads, key and
    value head dimensions of the ``linear_*`` fields.
    """

    kind: AttentionKind
    num_heads: int
    num_kv_heads: int
    #: query/key head dimension (for MLA: qk_nope_head_dim + qk_rope_head_dim)
    head_dim: int
    v_head_dim: int
    #: None = full causal attention; else the window in tokens
    sliding_window: int | None = None
    # MLA only
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # linear attention only
    linear_num_key_heads: int = 0
    linear_key_head_dim: int = 0
    linear_num_value_heads: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    #: biases on the q, k, v projections / on the output projection
    qkv_bias: bool = False
    o_bias: bool = False
    #: a sigmoid output gate computed from the hidden state (Qwen3-Next/Qwen3.5 ``attn_output_gate``)
    output_gate: bool = False
    #: Llama 4 chunked local attention: attends within aligned chunks of this many tokens. Such
    #: layers also carry ``sliding_window = attention_chunk_size``: the same bound on the KV a
    #: sequence holds, and an upper bound (about 2×) on the keys a query reads.
    attention_chunk_size: int | None = None

    def kv_elements_per_token(self) -> int:
        """Cache elements one token adds to one layer (before any sliding-window cap).

        gqa: ``num_kv_heads·(head_dim + v_head_dim)`` (K and V); mla: ``kv_lora_rank +
        qk_rope_head_dim`` (the compressed latent and the decoupled RoPE key, DeepSeek-V2
        arXiv:2405.04434 Sec. 2.1); linear: 0.
        """
        if self.kind == "gqa":
            return self.num_kv_heads * (self.head_dim + self.v_head_dim)
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 0


@dataclass(frozen=True, kw_only=True)
class FfnSpec:
    """Feed-forward block: dense MLP or mixture of experts (routed + optional shared experts)."""

    kind: Literal["dense", "moe"]
    #: dense: the MLP width; moe: the width of one routed expert
    intermediate_size: int
    #: gated (SwiGLU/GeGLU: gate, up, down = 3 matrices) or plain (up, down = 2 matrices)
    gated: bool
    num_experts: int = 0
    num_experts_per_token: int = 0
    num_shared_experts: int = 0
    #: width of one shared expert (total shared width = num_shared_experts × this)
    shared_intermediate_size: int = 0
    #: biases on the MLP / expert matrices (gpt-oss, OPT, GPT-J, BLOOM)
    bias: bool = False
    #: the router has a bias vector (gpt-oss) or a score-correction bias (DeepSeek-V3 ``noaux_tc``)
    router_bias: bool = False
    #: a scalar sigmoid gate on the shared expert (Qwen2-MoE, Qwen3-Next, Qwen3.5)
    shared_expert_gate: bool = False


@dataclass(frozen=True, kw_only=True)
class LayerGroup:
    num_layers: int
    attention: AttentionSpec
    ffn: FfnSpec
    #: per-layer parameters that are not matrices: norms, attention sinks, convolution kernels,
    #: decay parameters, shared-expert gates [params]
    extra_params_per_layer: int = 0


def _mlp_linears(hidden: int, width: int, *, gated: bool, bias: bool) -> tuple[Linear, ...]:
    up = Linear(name="up", in_features=hidden, out_features=width, split="column", bias=bias)
    down = Linear(name="down", in_features=width, out_features=hidden, split="row", bias=bias)
    if gated:
        gate = Linear(name="gate", in_features=hidden, out_features=width, split="column", bias=bias)
        return (gate, up, down)
    return (up, down)


@dataclass(frozen=True, kw_only=True)
class ModelArchitecture:
    """A decoder-only language model as the cost model sees it (see the module docstring).

    Attributes
    ----------
    id : str
        Canonical Hugging Face repository id (``meta-llama/Llama-3.1-70B``) or ``inline``.
    model_type : str
        The config's ``model_type`` (of ``text_config`` for multimodal configs).
    hidden_size, vocab_size : int
        Residual width [elements] and vocabulary [tokens].
    tie_word_embeddings : bool
        The LM head shares the input embedding matrix.
    layer_groups : tuple of LayerGroup
        Runs of identical consecutive decoder layers, in order.
    max_position_embeddings : int
        Longest context the config declares [tokens].
    native_weight_dtype : str or None
        Dtype of the bulk of the checkpoint's weights (of the routed experts for mixed MoE
        checkpoints) when its quantization config says so: ``fp8``, ``fp4`` (NVFP4, MXFP4),
        ``int4``, ``int8``; None for 16-bit checkpoints.
    native_kv_dtype : str or None
        KV-cache dtype the checkpoint was calibrated for (ModelOpt ``kv_cache_quant_algo``).
    source : str
        Citation of the figures and any costing assumption.
    aliases : tuple of str
        Other names that resolve to this entry in the catalog.
    extra_params : int
        Model-level parameters outside the layers and the embeddings: final norm, learned position
        embeddings, embedding norm, LM-head bias [params].
    num_mtp_layers : int
        Multi-token-prediction layers of the checkpoint, excluded from every count.
    """

    id: str
    model_type: str
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    layer_groups: tuple[LayerGroup, ...]
    max_position_embeddings: int
    native_weight_dtype: str | None = None
    native_kv_dtype: str | None = None
    source: str = ""
    aliases: tuple[str, ...] = ()
    extra_params: int = 0
    num_mtp_layers: int = 0

    # ---- structure -------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return sum(g.num_layers for g in self.layer_groups)

    @property
    def is_moe(self) -> bool:
        return any(g.ffn.kind == "moe" for g in self.layer_groups)

    def attention_linears(self, group: LayerGroup) -> tuple[Linear, ...]:
        """Projection matrices of one layer's attention (or linear-attention) block.

        gqa: ``q`` (hidden → H·d), ``k``/``v`` (hidden → KVH·d, KVH·v_d), ``o`` (H·v_d → hidden),
        plus ``q_gate`` (hidden → H·v_d) for gated attention. mla (DeepSeek-V2 arXiv:2405.04434
        Eqs. 37-47): ``q_a`` (hidden → q_lora, replicated) and ``q_b`` (q_lora → H·(nope+rope)),
        or ``q`` when ``q_lora_rank`` is 0; ``kv_a`` (hidden → kv_lora + rope, replicated), ``kv_b``
        (kv_lora → H·(nope + v)), ``o``. linear (Gated DeltaNet as in Qwen3-Next): ``in_proj_qkvz``
        (hidden → 2·nk·dk + 2·nv·dv), ``in_proj_ba`` (hidden → 2·nv), ``out_proj`` (nv·dv → hidden).
        """
        a = group.attention
        h = self.hidden_size
        if a.kind == "gqa":
            out: list[Linear] = [
                Linear(name="q", in_features=h, out_features=a.num_heads * a.head_dim, split="column",
                       bias=a.qkv_bias),
                Linear(name="k", in_features=h, out_features=a.num_kv_heads * a.head_dim, split="column",
                       bias=a.qkv_bias),
                Linear(name="v", in_features=h, out_features=a.num_kv_heads * a.v_head_dim, split="column",
                       bias=a.qkv_bias),
            ]
            if a.output_gate:
                out.append(Linear(name="q_gate", in_features=h, out_features=a.num_heads * a.v_head_dim,
                                  split="column"))
            out.append(Linear(name="o", in_features=a.num_heads * a.v_head_dim, out_features=h, split="row",
                              bias=a.o_bias))
            return tuple(out)
        if a.kind == "mla":
            nope = a.head_dim - a.qk_rope_head_dim
            q_width = a.num_heads * a.head_dim
            if a.q_lora_rank > 0:
                q: tuple[Linear, ...] = (
                    Linear(name="q_a", in_features=h, out_features=a.q_lora_rank, split="none"),
                    Linear(name="q_b", in_features=a.q_lora_rank, out_features=q_width, split="column"),
                )
            else:
                q = (Linear(name="q", in_features=h, out_features=q_width, split="column"),)
            return q + (
                Linear(name="kv_a", in_features=h, out_features=a.kv_lora_rank + a.qk_rope_head_dim,
                       split="none"),
                Linear(name="kv_b", in_features=a.kv_lora_rank,
                       out_features=a.num_heads * (nope + a.v_head_dim), split="column"),
                Linear(name="o", in_features=a.num_heads * a.v_head_dim, out_features=h, split="row"),
            )
        key_dim = a.linear_num_key_heads * a.linear_key_head_dim
        value_dim = a.linear_num_value_heads * a.linear_value_head_dim
        return (
            Linear(name="in_proj_qkvz", in_features=h, out_features=2 * key_dim + 2 * value_dim,
                   split="column"),
            Linear(name="in_proj_ba", in_features=h, out_features=2 * a.linear_num_value_heads,
                   split="column"),
            Linear(name="out_proj", in_features=value_dim, out_features=h, split="row"),
        )

    def ffn_linears(self, group: LayerGroup) -> tuple[Linear, ...]:
        """``gate`` (if gated), ``up`` (column), ``down`` (row) of the dense MLP or of ONE routed expert."""
        f = group.ffn
        return _mlp_linears(self.hidden_size, f.intermediate_size, gated=f.gated, bias=f.bias)

    def shared_expert_linears(self, group: LayerGroup) -> tuple[Linear, ...]:
        """All shared experts fused into one MLP of width ``num_shared_experts × shared_intermediate_size``.

        Empty for dense layers and MoE layers without shared experts.
        """
        f = group.ffn
        if f.kind != "moe" or f.num_shared_experts == 0:
            return ()
        width = f.num_shared_experts * f.shared_intermediate_size
        return _mlp_linears(self.hidden_size, width, gated=f.gated, bias=f.bias)

    def router_linear(self, group: LayerGroup) -> Linear | None:
        """The gate that scores the experts (hidden → num_experts, replicated), None for dense layers."""
        f = group.ffn
        if f.kind != "moe":
            return None
        return Linear(name="router", in_features=self.hidden_size, out_features=f.num_experts, split="none",
                      bias=f.router_bias)

    # ---- parameter counts ------------------------------------------------------------------------
    @property
    def embedding_params(self) -> int:
        """Input embedding matrix ``vocab_size × hidden_size`` [params]."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Output projection, 0 when tied to the embedding [params]."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def _layer_params(self, group: LayerGroup) -> tuple[int, int, int]:
        """(total, active, routed-expert) parameters of ONE layer of ``group``."""
        attention = sum(lin.num_params for lin in self.attention_linears(group))
        ffn_one = sum(lin.num_params for lin in self.ffn_linears(group))
        base = attention + group.extra_params_per_layer
        if group.ffn.kind == "dense":
            return base + ffn_one, base + ffn_one, 0
        shared = sum(lin.num_params for lin in self.shared_expert_linears(group))
        router = self.router_linear(group)
        base += shared + (router.num_params if router is not None else 0)
        routed = ffn_one * group.ffn.num_experts
        return base + routed, base + ffn_one * group.ffn.num_experts_per_token, routed

    @property
    def total_params(self) -> int:
        """Every weight except MTP modules and vision encoders (module docstring) [params]."""
        layers = sum(g.num_layers * self._layer_params(g)[0] for g in self.layer_groups)
        return layers + self.embedding_params + self.lm_head_params + self.extra_params

    @property
    def active_params(self) -> int:
        """Weights one token passes through, embedding and LM head included [params]."""
        layers = sum(g.num_layers * self._layer_params(g)[1] for g in self.layer_groups)
        return layers + self.embedding_params + self.lm_head_params + self.extra_params

    @property
    def active_params_excluding_embedding(self) -> int:
        """``active_params`` without the input embedding: DeepSeek's, OpenAI's convention [params]."""
        return self.active_params - self.embedding_params

    @property
    def routed_expert_params(self) -> int:
        """Parameters of all routed experts of all layers (0 for dense models) [params]."""
        return sum(g.num_layers * self._layer_params(g)[2] for g in self.layer_groups)

    def weight_bytes(self, dtype_bytes: float, non_expert_dtype_bytes: float | None = None) -> float:
        """Bytes of the whole checkpoint when its projection matrices take ``dtype_bytes`` each.

        Parameters
        ----------
        dtype_bytes : float
            Bytes per element of the decoder-layer matrices [bytes]. Pass the format's scale
            overhead in too if it matters (NVFP4: 0.5 + 1/16, MXFP4: 0.5 + 1/32).
        non_expert_dtype_bytes : float, optional
            Bytes per element of the matrices that are not routed experts (attention, dense MLPs,
            shared experts), for mixed checkpoints that quantize only the experts (gpt-oss MXFP4,
            NVIDIA's NVFP4 DeepSeek/Kimi). Default: ``dtype_bytes``.

        Returns
        -------
        float
            Weight bytes [bytes]. Embeddings, LM head, routers, biases, norms and other vectors are
            kept at 16 bit (``HIGH_PRECISION_BYTES``), or at ``dtype_bytes`` if that is wider.
        """
        other = dtype_bytes if non_expert_dtype_bytes is None else non_expert_dtype_bytes
        high = max(HIGH_PRECISION_BYTES, dtype_bytes, other)
        total = 0.0
        for g in self.layer_groups:
            mats = 0.0
            vectors = g.extra_params_per_layer
            for lin in self.attention_linears(g) + self.shared_expert_linears(g):
                mats += lin.weight_params * other
                vectors += lin.num_params - lin.weight_params
            for lin in self.ffn_linears(g):
                count = g.ffn.num_experts if g.ffn.kind == "moe" else 1
                mats += lin.weight_params * count * (dtype_bytes if g.ffn.kind == "moe" else other)
                vectors += (lin.num_params - lin.weight_params) * count
            router = self.router_linear(g)
            if router is not None:
                vectors += router.num_params
            total += g.num_layers * (mats + vectors * high)
        return total + (self.embedding_params + self.lm_head_params + self.extra_params) * high

    # ---- caches ----------------------------------------------------------------------------------
    def kv_cache_bytes_per_sequence(self, kv_dtype_bytes: float, context_tokens: int) -> float:
        """KV-cache bytes one sequence of ``context_tokens`` tokens holds, all layers.

        Full-attention layers hold every token; sliding-window (and chunked) layers at most the
        window; linear-attention layers nothing (see ``state_bytes_per_sequence``).
        """
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        total = 0.0
        for g in self.layer_groups:
            a = g.attention
            held = context_tokens if a.sliding_window is None else min(context_tokens, a.sliding_window)
            total += g.num_layers * a.kv_elements_per_token() * held
        return total * kv_dtype_bytes

    def kv_cache_bytes_per_token(self, kv_dtype_bytes: float, context_tokens: int | None = None) -> float:
        """KV-cache bytes per token, all layers.

        Parameters
        ----------
        kv_dtype_bytes : float
            Bytes per cached element [bytes] (2 for bf16, 1 for fp8). Formats with per-block scales
            (FlashMLA's 656-byte fp8 MLA entry) need their own figure.
        context_tokens : int, optional
            With a context length L, the average over a sequence of L tokens:
            ``kv_cache_bytes_per_sequence(L) / L``, so that sliding-window layers count
            ``min(L, window) / L`` of a token each. With None, the long-context marginal figure:
            the bytes one more token adds to a sequence longer than every window, i.e. the
            full-attention layers only (for a model without windows both agree).

        Returns
        -------
        float
            [bytes per token]. Llama-3.1-70B in bf16: 80 × 2 × 8 × 128 × 2 B = 327,680 B;
            DeepSeek-V3 MLA in bf16: 61 × (512 + 64) × 2 B = 70,272 B.
        """
        if context_tokens is not None:
            if context_tokens <= 0:
                raise ValueError(f"context_tokens must be positive, got {context_tokens}")
            return self.kv_cache_bytes_per_sequence(kv_dtype_bytes, context_tokens) / context_tokens
        return kv_dtype_bytes * sum(
            g.num_layers * g.attention.kv_elements_per_token()
            for g in self.layer_groups
            if g.attention.sliding_window is None
        )

    def state_bytes_per_sequence(
        self, state_dtype_bytes: float, conv_dtype_bytes: float | None = None
    ) -> float:
        """Fixed recurrent state one sequence holds in the linear-attention layers [bytes].

        Per layer: the delta-rule state ``nv × dk × dv`` [Yang et al., "Gated Delta Networks",
        arXiv:2412.06464] in ``state_dtype_bytes`` (fp32 in Qwen3.5: ``mamba_ssm_dtype``) and the
        short-convolution state ``(kernel - 1) × (2·nk·dk + nv·dv)`` in ``conv_dtype_bytes``
        (default: the same). 0 for models without linear attention.
        """
        conv_bytes = state_dtype_bytes if conv_dtype_bytes is None else conv_dtype_bytes
        total = 0.0
        for g in self.layer_groups:
            a = g.attention
            if a.kind != "linear":
                continue
            recurrent = a.linear_num_value_heads * a.linear_key_head_dim * a.linear_value_head_dim
            key_dim = a.linear_num_key_heads * a.linear_key_head_dim
            conv_dim = 2 * key_dim + a.linear_num_value_heads * a.linear_value_head_dim
            conv = (a.linear_conv_kernel - 1) * conv_dim
            total += g.num_layers * (recurrent * state_dtype_bytes + conv * conv_bytes)
        return total

    def default_kv_dtype(self, weight_dtype: str) -> str:
        """The contract's default KV dtype: follows the weights, ``bf16`` for 4-bit weights."""
        if weight_dtype in ("int4", "fp4", "fp32"):
            return "bf16"
        if weight_dtype in ("bf16", "fp16", "fp8", "int8"):
            return weight_dtype
        raise ValueError(f"unknown weight dtype {weight_dtype!r}")


# ==================================================================================================
# Parsing Hugging Face configs
# ==================================================================================================

_MISSING: Any = object()


class _Cfg:
    """Typed, validated access to one config mapping; every error names the offending field."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def name(self, key: str) -> str:
        return self.prefix + key

    def fail(self, key: str, reason: str) -> UnsupportedModel:
        return UnsupportedModel(f"{self.name(key)}: {reason}", field=self.name(key))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int_(self, *keys: str, default: Any = _MISSING, minimum: int = 1,
             maximum: int = MAX_DIMENSION) -> Any:
        """First present key among ``keys`` as an int in [minimum, maximum]; else ``default``."""
        for key in keys:
            if self.has(key):
                value = self.data[key]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise self.fail(key, f"must be an integer, got {value!r}")
                if value < minimum:
                    raise self.fail(key, f"must be >= {minimum}, got {value}")
                if value > maximum:
                    raise self.fail(key, f"{value} exceeds the planner's limit of {maximum}")
                return value
        if default is _MISSING:
            raise self.fail(keys[0], "required field is missing")
        return default

    def bool_(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def list_(self, key: str, length: int) -> list[Any] | None:
        if not self.has(key):
            return None
        value = self.data[key]
        if not isinstance(value, list) or len(value) != length:
            raise self.fail(key, f"must be a list of {length} entries (one per layer)")
        return value

    def str_(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else default


_GEMMA4 = ("Gemma 4 global layers share keys and values (attention_k_eq_v) with their own head counts "
           "(num_global_key_value_heads, global_head_dim), and a MoE block runs beside the dense MLP "
           "(enable_moe_block); how engines cache and cost these is not defined by the config")

#: model types refused with the reason: blocks whose cost a config alone does not define
_REFUSED_TYPES: dict[str, str] = {
    "deepseek_v32": "DeepSeek Sparse Attention: a lightning indexer (index_n_heads, index_head_dim) picks "
    "index_topk tokens per query and keeps its own key cache; the cost model only knows dense attention",
    "glm_moe_dsa": "GLM-5 uses DeepSeek Sparse Attention (index_topk, index_n_heads): a lightning indexer "
    "selects the attended tokens and keeps its own key cache; the cost model only knows dense attention",
    "deepseek_v4": "DeepSeek-V4 blocks: compressed attention (compress_ratios), hyper-connections (hc_mult), "
    "hash-routed layers (num_hash_layers), grouped low-rank output projections (o_lora_rank, o_groups) and "
    "a sparse indexer (index_topk); a config alone does not define their costs",
    "deepseek_ref": "DeepSeek-V4 reference config (DeepseekV4ForCausalLM): compressed and sparse attention "
    "(compress_ratios, index_topk), hyper-connections (hc_mult), hash-routed layers; not modelled",
    "minimax_m3": "block-sparse attention (sparse_attention_config: index heads, top-k blocks) is not "
    "modelled",
    "minimax": "lightning (linear) attention layers of MiniMax-Text-01 (attn_type_list) are not modelled",
    "kimi_linear": "Kimi Delta Attention layers (linear_attn_config.kda_layers), latent MoE "
    "(routed_expert_hidden_size) and attention-residual blocks (attn_res_block_size) are not modelled",
    "kimi_k3": "Kimi Delta Attention layers (linear_attn_config.kda_layers), latent MoE "
    "(routed_expert_hidden_size) and attention-residual blocks (attn_res_block_size) are not modelled",
    "nemotron_h": "hybrid Mamba-2 stack: mixer-only, attention-only and MLP/MoE-only blocks "
    "(hybrid_override_pattern / layers_block_type), some with latent MoE (moe_latent_size); not modelled",
    "nemotron-nas": "NAS-pruned stack: per-layer block_configs with no-op or linear-replacement attention "
    "and variable FFN widths; not modelled",
    "deci": "per-layer block_configs (variable heads, no-op blocks) are not modelled",
    "gemma4": _GEMMA4,
    "gemma4_text": _GEMMA4,
    "gemma3n": "per-layer embeddings and AltUp blocks (Gemma 3n) are not modelled",
    "step3p7": "no reference implementation is known for model_type step3p7: the config does not give the "
    "head counts of its sliding-window layers or its attention gates",
}

#: families with a llama-style decoder (GQA/MHA attention, gated MLP or MoE)
_LLAMA_LIKE = frozenset({
    "llama", "yi", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_vl_text",
    "qwen3_vl_moe_text", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "mimo", "mimo_v2_flash",
    "minimax_m2", "glm", "glm4", "glm4_moe", "gpt_oss", "llama4_text", "gemma", "gemma2", "gemma3_text",
})
_MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})
_OTHER_TYPES = frozenset({"falcon", "RefinedWeb", "RefinedWebModel", "gptj", "opt", "bloom"})
SUPPORTED_MODEL_TYPES = tuple(sorted(_LLAMA_LIKE | _MLA_TYPES | _OTHER_TYPES))

#: text model type of a multimodal wrapper whose text_config omits it
_WRAPPER_TEXT_TYPES = {
    "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text", "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text", "llama4": "llama4_text", "kimi_k25": "kimi_k2",
    "gemma3": "gemma3_text", "gemma4": "gemma4_text", "kimi_k3": "kimi_linear",
}
_QWEN_MOE_LAYOUT = frozenset({"qwen2_moe", "qwen3_moe", "qwen3_vl_moe_text", "qwen3_next",
                              "qwen3_5_moe_text"})
_DEEPSEEK_MOE_LAYOUT = frozenset({"glm4_moe", "mimo_v2_flash"}) | _MLA_TYPES
_ALL_MOE_LAYOUT = frozenset({"mixtral", "gpt_oss", "minimax_m2"})
_QK_NORM = frozenset({"qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text", "qwen3_next",
                      "qwen3_5_text", "qwen3_5_moe_text", "gemma3_text"})
_HYBRID_LINEAR = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})
_QKV_BIAS_ALWAYS = frozenset({"qwen2", "qwen2_moe"})


@dataclass(frozen=True, kw_only=True)
class _Layer:
    attention: AttentionSpec
    ffn: FfnSpec
    extra: int


def _group_layers(layers: Sequence[_Layer]) -> tuple[LayerGroup, ...]:
    """Run-length encode consecutive identical layers (order is kept for pipeline stages)."""
    groups: list[LayerGroup] = []
    for layer in layers:
        last = groups[-1] if groups else None
        if last is not None and (last.attention, last.ffn, last.extra_params_per_layer) == (
            layer.attention, layer.ffn, layer.extra
        ):
            groups[-1] = dataclasses.replace(last, num_layers=last.num_layers + 1)
        else:
            groups.append(LayerGroup(num_layers=1, attention=layer.attention, ffn=layer.ffn,
                                     extra_params_per_layer=layer.extra))
    return tuple(groups)


def _experts_per_token(c: _Cfg, num_experts: int) -> int:
    k = c.int_("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "top_k_experts")
    if k > num_experts:
        raise c.fail("num_experts_per_tok", f"{k} exceeds the {num_experts} experts")
    return int(k)


def _moe_flags(c: _Cfg, mt: str) -> list[bool]:
    """Which layers are MoE layers, per family convention."""
    n = c.int_("num_hidden_layers", maximum=MAX_NUM_LAYERS)
    if mt in _ALL_MOE_LAYOUT:
        return [True] * n
    if mt in _QWEN_MOE_LAYOUT:
        num_experts = c.int_("num_experts", default=0, minimum=0)
        step = c.int_("decoder_sparse_step", default=1)
        only_mlp = c.data.get("mlp_only_layers") or []
        if not isinstance(only_mlp, list) or not all(isinstance(i, int) for i in only_mlp):
            raise c.fail("mlp_only_layers", "must be a list of layer indices")
        dense_layers = set(only_mlp)
        return [num_experts > 0 and i not in dense_layers and (i + 1) % step == 0 for i in range(n)]
    if mt in _DEEPSEEK_MOE_LAYOUT:
        routed = c.int_("n_routed_experts", default=0, minimum=0)
        first_dense = c.int_("first_k_dense_replace", default=0, minimum=0, maximum=MAX_NUM_LAYERS)
        freq_list = c.data.get("moe_layer_freq")
        if isinstance(freq_list, list):
            flags = c.list_("moe_layer_freq", n)
            assert flags is not None
            return [routed > 0 and i >= first_dense and bool(flags[i]) for i in range(n)]
        freq = c.int_("moe_layer_freq", default=1)
        return [routed > 0 and i >= first_dense and i % freq == 0 for i in range(n)]
    if mt == "llama4_text":
        if isinstance(c.data.get("moe_layers"), list):
            moe_layers = set(c.data["moe_layers"])
        else:
            step = c.int_("interleave_moe_layer_step", default=1)
            moe_layers = set(range(step - 1, n, step))
        return [i in moe_layers for i in range(n)]
    return [False] * n


def _moe_spec(c: _Cfg, mt: str, *, gated: bool) -> FfnSpec:
    if mt in _QWEN_MOE_LAYOUT:
        num_experts = c.int_("num_experts")
        shared = c.int_("shared_expert_intermediate_size", default=0, minimum=0)
        return FfnSpec(kind="moe", intermediate_size=c.int_("moe_intermediate_size"), gated=gated,
                       num_experts=num_experts, num_experts_per_token=_experts_per_token(c, num_experts),
                       num_shared_experts=1 if shared else 0, shared_intermediate_size=shared,
                       shared_expert_gate=bool(shared))
    if mt in _DEEPSEEK_MOE_LAYOUT:
        num_experts = c.int_("n_routed_experts")
        width = c.int_("moe_intermediate_size")
        shared = c.int_("n_shared_experts", default=0, minimum=0)
        return FfnSpec(kind="moe", intermediate_size=width, gated=gated, num_experts=num_experts,
                       num_experts_per_token=_experts_per_token(c, num_experts), num_shared_experts=shared,
                       shared_intermediate_size=width if shared else 0,
                       router_bias=c.str_("topk_method") == "noaux_tc")
    if mt == "llama4_text":
        num_experts = c.int_("num_local_experts")
        width = c.int_("intermediate_size")
        return FfnSpec(kind="moe", intermediate_size=width, gated=gated, num_experts=num_experts,
                       num_experts_per_token=_experts_per_token(c, num_experts), num_shared_experts=1,
                       shared_intermediate_size=width)
    num_experts = c.int_("num_local_experts", "num_experts")
    k = _experts_per_token(c, num_experts)
    width = c.int_("intermediate_size")
    if mt == "gpt_oss":
        return FfnSpec(kind="moe", intermediate_size=width, gated=gated, num_experts=num_experts,
                       num_experts_per_token=k, bias=True, router_bias=True)
    shared = c.int_("shared_intermediate_size", default=0, minimum=0)
    return FfnSpec(kind="moe", intermediate_size=width, gated=gated, num_experts=num_experts,
                   num_experts_per_token=k, num_shared_experts=1 if shared else 0,
                   shared_intermediate_size=shared,
                   router_bias=mt == "minimax_m2" and c.bool_("use_routing_bias", False))


def _dense_spec(c: _Cfg, mt: str, *, gated: bool, bias: bool = False) -> FfnSpec:
    key = "intermediate_size_mlp" if mt == "llama4_text" else "intermediate_size"
    return FfnSpec(kind="dense", intermediate_size=c.int_(key), gated=gated, bias=bias)


def _layer_kinds(c: _Cfg, mt: str, n: int) -> list[str]:
    """Per-layer attention type: full_attention, sliding_attention, chunked_attention or linear_attention."""
    allowed = {"full_attention", "sliding_attention"}
    if mt in _HYBRID_LINEAR:
        allowed.add("linear_attention")
    if mt == "llama4_text":
        allowed.add("chunked_attention")
    types = c.list_("layer_types", n)
    if types is not None:
        for t in types:
            if t not in allowed:
                raise c.fail("layer_types", f"layer type {t!r} is not one the planner can cost for {mt} "
                              f"(known: {', '.join(sorted(allowed))})")
        return list(types)
    if mt in _HYBRID_LINEAR:
        interval = c.int_("full_attention_interval", default=4)
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    if mt == "gpt_oss" or mt == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if mt == "gemma3_text":
        pattern = c.int_("sliding_window_pattern", default=6)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if mt in ("mistral", "mixtral"):
        return ["sliding_attention" if c.has("sliding_window") else "full_attention"] * n
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "mimo"):
        if c.bool_("use_sliding_window", False) and c.has("sliding_window"):
            start = c.int_("max_window_layers", default=0, minimum=0, maximum=MAX_NUM_LAYERS)
            return ["sliding_attention" if i >= start else "full_attention" for i in range(n)]
        return ["full_attention"] * n
    if mt == "mimo_v2_flash":
        pattern = c.list_("hybrid_layer_pattern", n)
        if pattern is None:
            raise c.fail("hybrid_layer_pattern", "required field is missing")
        return ["sliding_attention" if p else "full_attention" for p in pattern]
    if mt == "minimax_m2":
        attn_types = c.list_("attn_type_list", n)
        if attn_types is not None and any(t != 1 for t in attn_types):
            raise c.fail("attn_type_list", "lightning (linear) attention layers (type 0) are not modelled")
        return ["full_attention"] * n
    if mt == "llama4_text":
        if not c.has("attention_chunk_size"):
            return ["full_attention"] * n
        rope = c.list_("no_rope_layers", n)
        if rope is None:
            interval = c.int_("no_rope_layer_interval", default=4)
            rope = [int((i + 1) % interval != 0) for i in range(n)]
        return ["chunked_attention" if r else "full_attention" for r in rope]
    return ["full_attention"] * n


def _parse_llama_like(c: _Cfg, mt: str) -> tuple[list[_Layer], int, list[str]]:
    """Layers of a llama-style decoder, model-level extra params and costing notes."""
    notes: list[str] = []
    hidden = c.int_("hidden_size")
    n = c.int_("num_hidden_layers", maximum=MAX_NUM_LAYERS)
    heads = c.int_("num_attention_heads")
    kv_heads = c.int_("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise c.fail("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads={heads}")
    if c.has("head_dim"):
        head_dim = c.int_("head_dim")
    elif hidden % heads:
        raise c.fail("num_attention_heads",
                     f"{heads} does not divide hidden_size={hidden} and head_dim is missing")
    else:
        head_dim = hidden // heads
    v_head_dim = c.int_("v_head_dim", default=head_dim)

    attention_bias = c.bool_("attention_bias", False)
    if c.has("qkv_bias"):
        qkv_bias = c.bool_("qkv_bias", False)
    elif mt in _QKV_BIAS_ALWAYS or (mt == "mimo" and attention_bias):
        qkv_bias = True
    else:
        qkv_bias = attention_bias
    o_bias = attention_bias and mt not in ("glm", "glm4", "glm4_moe", "mimo", "qwen2", "qwen2_moe")
    gated_attention = mt in _HYBRID_LINEAR and c.bool_("attn_output_gate", True)

    norms = (4 if mt in ("gemma2", "gemma3_text") else 2) * hidden
    qk_norm = 0
    if mt in _QK_NORM or (mt == "glm4_moe" and c.bool_("use_qk_norm", False)):
        qk_norm = 2 * head_dim
    elif mt == "minimax_m2" and c.bool_("use_qk_norm", False):
        qk_norm = (heads + kv_heads) * head_dim  # per_layer qk norm over all heads
    sinks = heads if mt == "gpt_oss" else 0

    kinds = _layer_kinds(c, mt, n)
    moe = _moe_flags(c, mt)
    gated = True
    mlp_bias = c.bool_("mlp_bias", False)

    full = AttentionSpec(kind="gqa", num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                         v_head_dim=v_head_dim, qkv_bias=qkv_bias, o_bias=o_bias, output_gate=gated_attention)
    layers: list[_Layer] = []
    dense_ffn: FfnSpec | None = None
    moe_ffn: FfnSpec | None = None
    for i in range(n):
        kind = kinds[i]
        extra = norms
        if kind == "linear_attention":
            nk = c.int_("linear_num_key_heads")
            nv = c.int_("linear_num_value_heads")
            if nv % nk:
                raise c.fail("linear_num_value_heads", f"{nv} is not a multiple of linear_num_key_heads={nk}")
            dk = c.int_("linear_key_head_dim")
            dv = c.int_("linear_value_head_dim")
            kernel = c.int_("linear_conv_kernel_dim")
            attention = AttentionSpec(
                kind="linear", num_heads=nv, num_kv_heads=nk, head_dim=dk, v_head_dim=dv,
                linear_num_key_heads=nk, linear_key_head_dim=dk, linear_num_value_heads=nv,
                linear_value_head_dim=dv, linear_conv_kernel=kernel,
            )
            # depthwise conv over q, k, v channels; A_log and dt_bias per value head; gated RMSNorm (dv)
            extra += (2 * nk * dk + nv * dv) * kernel + 2 * nv + dv
        elif kind == "sliding_attention" and mt == "mimo_v2_flash":
            swa_heads = c.int_("swa_num_attention_heads", default=heads)
            swa_kv = c.int_("swa_num_key_value_heads", default=kv_heads)
            if swa_heads % swa_kv:
                raise c.fail("swa_num_key_value_heads", f"{swa_kv} does not divide {swa_heads}")
            swa_d = c.int_("swa_head_dim", default=head_dim)
            attention = AttentionSpec(kind="gqa", num_heads=swa_heads, num_kv_heads=swa_kv, head_dim=swa_d,
                                      v_head_dim=c.int_("swa_v_head_dim", default=v_head_dim),
                                      sliding_window=c.int_("sliding_window", "sliding_window_size"),
                                      qkv_bias=qkv_bias, o_bias=o_bias)
            extra += swa_heads if c.bool_("add_swa_attention_sink_bias", False) else 0
        elif kind == "sliding_attention":
            attention = dataclasses.replace(full, sliding_window=c.int_("sliding_window"))
            extra += qk_norm + sinks
        elif kind == "chunked_attention":
            chunk = c.int_("attention_chunk_size")
            attention = dataclasses.replace(full, sliding_window=chunk, attention_chunk_size=chunk)
            extra += qk_norm + sinks
        else:
            attention = full
            extra += qk_norm + sinks
            if mt == "mimo_v2_flash" and c.bool_("add_full_attention_sink_bias", False):
                extra += heads
        if moe[i]:
            moe_ffn = moe_ffn or _moe_spec(c, mt, gated=gated)
            ffn = moe_ffn
            extra += hidden if ffn.shared_expert_gate else 0
        else:
            dense_ffn = dense_ffn or _dense_spec(c, mt, gated=gated, bias=mlp_bias)
            ffn = dense_ffn
        layers.append(_Layer(attention=attention, ffn=ffn, extra=extra))
    if "chunked_attention" in kinds:
        notes.append(f"chunked local attention (attention_chunk_size={c.data['attention_chunk_size']}) is "
                     "costed as a sliding window of that size: same KV bound, up to 2x the keys read")
    return layers, hidden, notes


def _parse_mla(c: _Cfg, mt: str) -> tuple[list[_Layer], int, list[str]]:
    """DeepSeek-V2/V3 and Kimi-K2: MLA attention, first_k_dense_replace dense layers, shared experts."""
    if c.has("index_topk"):
        raise c.fail("index_topk", _REFUSED_TYPES["deepseek_v32"])
    hidden = c.int_("hidden_size")
    n = c.int_("num_hidden_layers", maximum=MAX_NUM_LAYERS)
    heads = c.int_("num_attention_heads")
    q_lora = c.int_("q_lora_rank", default=0, minimum=0)
    kv_lora = c.int_("kv_lora_rank")
    nope = c.int_("qk_nope_head_dim")
    rope = c.int_("qk_rope_head_dim")
    v_dim = c.int_("v_head_dim")
    attention = AttentionSpec(kind="mla", num_heads=heads, num_kv_heads=heads, head_dim=nope + rope,
                              v_head_dim=v_dim, q_lora_rank=q_lora, kv_lora_rank=kv_lora,
                              qk_rope_head_dim=rope, qkv_bias=c.bool_("attention_bias", False))
    extra = 2 * hidden + kv_lora + q_lora  # two RMSNorms, kv_a_layernorm, q_a_layernorm
    moe = _moe_flags(c, mt)
    layers: list[_Layer] = []
    for i in range(n):
        ffn = _moe_spec(c, mt, gated=True) if moe[i] else _dense_spec(c, mt, gated=True)
        layers.append(_Layer(attention=attention, ffn=ffn, extra=extra))
    return layers, hidden, []


def _parse_falcon(c: _Cfg) -> tuple[list[_Layer], int, list[str]]:
    """Falcon / RefinedWeb: parallel attention+MLP, multi-query or grouped KV, plain GELU MLP.

    [Almazrouei et al., "The Falcon Series of Open Language Models", arXiv:2311.16867, Sec. 4]
    """
    hidden = c.int_("hidden_size", "n_embed")
    n = c.int_("num_hidden_layers", "n_layer", maximum=MAX_NUM_LAYERS)
    heads = c.int_("num_attention_heads", "n_head")
    if hidden % heads:
        raise c.fail("num_attention_heads", f"{heads} does not divide hidden_size={hidden}")
    new_arch = c.bool_("new_decoder_architecture", False)
    if new_arch:
        kv_heads = c.int_("num_kv_heads", default=heads)
        num_ln = 2 * c.int_("num_ln_in_parallel_attn", default=2)
    else:
        kv_heads = 1 if c.bool_("multi_query", True) else heads
        num_ln = 2 if c.bool_("parallel_attn", True) else 4
    if heads % kv_heads:
        raise c.fail("num_kv_heads", f"{kv_heads} does not divide num_attention_heads={heads}")
    bias = c.bool_("bias", False)
    d = c.int_("head_dim", default=hidden // heads)
    attention = AttentionSpec(kind="gqa", num_heads=heads, num_kv_heads=kv_heads, head_dim=d, v_head_dim=d,
                              qkv_bias=bias, o_bias=bias)
    ffn = FfnSpec(kind="dense", intermediate_size=c.int_("ffn_hidden_size", default=4 * hidden), gated=False,
                  bias=bias)
    layer = _Layer(attention=attention, ffn=ffn, extra=num_ln * hidden)  # LayerNorm weight + bias
    return [layer] * n, 2 * hidden, []


def _parse_gptj(c: _Cfg) -> tuple[list[_Layer], int, list[str]]:
    """GPT-J: parallel attention+MLP, rotary on rotary_dim, biased plain MLP, untied LM head with bias.

    [Wang & Komatsuzaki, GPT-J-6B, github.com/kingoflolz/mesh-transformer-jax, 2021]
    """
    hidden = c.int_("n_embd", "hidden_size")
    n = c.int_("n_layer", "num_hidden_layers", maximum=MAX_NUM_LAYERS)
    heads = c.int_("n_head", "num_attention_heads")
    if hidden % heads:
        raise c.fail("n_head", f"{heads} does not divide n_embd={hidden}")
    d = hidden // heads
    attention = AttentionSpec(kind="gqa", num_heads=heads, num_kv_heads=heads, head_dim=d, v_head_dim=d)
    width = c.int_("n_inner", default=4 * hidden)
    ffn = FfnSpec(kind="dense", intermediate_size=width, gated=False, bias=True)
    vocab = c.int_("vocab_size")
    return [_Layer(attention=attention, ffn=ffn, extra=2 * hidden)] * n, 2 * hidden + vocab, []


def _parse_opt(c: _Cfg) -> tuple[list[_Layer], int, list[str]]:
    """OPT: pre-LN decoder with learned positions (offset 2), biased ReLU MLP, tied embeddings.

    [Zhang et al., "OPT: Open Pre-trained Transformer Language Models", arXiv:2205.01068, Table 1]
    """
    hidden = c.int_("hidden_size")
    n = c.int_("num_hidden_layers", maximum=MAX_NUM_LAYERS)
    heads = c.int_("num_attention_heads")
    if hidden % heads:
        raise c.fail("num_attention_heads", f"{heads} does not divide hidden_size={hidden}")
    if c.int_("word_embed_proj_dim", default=hidden) != hidden:
        raise c.fail("word_embed_proj_dim", "an embedding projection (OPT-350m) is not modelled")
    bias = c.bool_("enable_bias", True)
    d = hidden // heads
    attention = AttentionSpec(kind="gqa", num_heads=heads, num_kv_heads=heads, head_dim=d, v_head_dim=d,
                              qkv_bias=bias, o_bias=bias)
    ffn = FfnSpec(kind="dense", intermediate_size=c.int_("ffn_dim"), gated=False, bias=bias)
    positions = (c.int_("max_position_embeddings") + 2) * hidden
    final_ln = 2 * hidden if c.bool_("do_layer_norm_before", True) else 0
    return [_Layer(attention=attention, ffn=ffn, extra=4 * hidden)] * n, positions + final_ln, []


def _parse_bloom(c: _Cfg) -> tuple[list[_Layer], int, list[str]]:
    """BLOOM: ALiBi positions, embedding LayerNorm, biased GELU MLP of 4·hidden, tied embeddings.

    [BigScience, "BLOOM: A 176B-Parameter Open-Access Multilingual Language Model", arXiv:2211.05100]
    """
    hidden = c.int_("hidden_size", "n_embed")
    n = c.int_("n_layer", "num_hidden_layers", maximum=MAX_NUM_LAYERS)
    heads = c.int_("n_head", "num_attention_heads")
    if hidden % heads:
        raise c.fail("n_head", f"{heads} does not divide hidden_size={hidden}")
    d = hidden // heads
    attention = AttentionSpec(kind="gqa", num_heads=heads, num_kv_heads=heads, head_dim=d, v_head_dim=d,
                              qkv_bias=True, o_bias=True)
    ffn = FfnSpec(kind="dense", intermediate_size=4 * hidden, gated=False, bias=True)
    return [_Layer(attention=attention, ffn=ffn, extra=4 * hidden)] * n, 4 * hidden, []


#: tie_word_embeddings default of each family's config class when the key is absent
_TIED_BY_DEFAULT = frozenset({"falcon", "RefinedWeb", "RefinedWebModel", "opt", "bloom", "gemma", "gemma2",
                              "gemma3_text"})


def _quant_algo_dtype(algo: Any, where: str, extra_algos: Sequence[Any] = ()) -> str | None:
    """Storage dtype of a ModelOpt ``quant_algo`` (NVFP4, W4A16_NVFP4, FP8, W4A16_AWQ, ...)."""
    if algo is None:
        return None
    if not isinstance(algo, str):
        raise UnsupportedModel(f"{where}: quant_algo must be a string, got {algo!r}", field=where)
    name = algo.upper()
    if name == "MIXED_PRECISION":
        found = [_quant_algo_dtype(a, where) for a in extra_algos]
        known = [d for d in found if d is not None]
        if not known:
            raise UnsupportedModel(f"{where}: MIXED_PRECISION without quantized layers", field=where)
        return min(known, key=lambda d: _DTYPE_ORDER.index(d))
    if "FP4" in name:
        return "fp4"
    if "W4A" in name or "INT4" in name or "AWQ" in name:
        return "int4"
    if "FP8" in name:
        return "fp8"
    if "INT8" in name or "W8A8" in name:
        return "int8"
    raise UnsupportedModel(f"{where}: quantization {algo!r} is not one the planner knows", field=where)


_DTYPE_ORDER = ("fp4", "int4", "fp8", "int8")


def _layer_algos(block: Mapping[str, Any]) -> list[Any]:
    """Per-layer algorithms of a MIXED_PRECISION block (``quantized_layers`` or its catalog summary)."""
    layers = block.get("quantized_layers")
    if isinstance(layers, Mapping):
        return [v.get("quant_algo") for v in layers.values() if isinstance(v, Mapping)]
    algos = block.get("quantized_algos")
    return list(algos) if isinstance(algos, list) else []


def _bits_dtype(bits: Any, kind: Any) -> str | None:
    if bits == 4:
        return "fp4" if kind == "float" else "int4"
    if bits == 8:
        return "fp8" if kind == "float" else "int8"
    return None


def _native_dtypes(top: Mapping[str, Any], text: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(weight, kv) dtypes declared by ``quantization_config`` or a merged ``hf_quant_config``."""
    weight: str | None = None
    kv: str | None = None
    hq = top.get("hf_quant_config")
    if isinstance(hq, Mapping):
        inner = hq.get("quantization", hq)
        if isinstance(inner, Mapping):
            where = "hf_quant_config.quantization"
            weight = _quant_algo_dtype(inner.get("quant_algo"), where + ".quant_algo", _layer_algos(inner))
            kv = _quant_algo_dtype(inner.get("kv_cache_quant_algo"), where + ".kv_cache_quant_algo")
    q = text.get("quantization_config") or top.get("quantization_config")
    if isinstance(q, Mapping) and weight is None:
        where = "quantization_config"
        method = q.get("quant_method")
        if method in ("fp8", "fbgemm_fp8"):
            weight = "fp8"
        elif method == "mxfp4":
            weight = "fp4"
        elif method in ("gptq", "awq", "awq_marlin", "gptq_marlin"):
            weight = _bits_dtype(q.get("bits"), "int")
            if weight is None:
                raise UnsupportedModel(f"{where}.bits: {q.get('bits')!r} bits are not modelled",
                                       field=where + ".bits")
        elif method == "bitsandbytes":
            weight = "int4" if q.get("load_in_4bit") else "int8" if q.get("load_in_8bit") else None
        elif method == "compressed-tensors" or (method is None and "config_groups" in q
                                                and "quant_algo" not in q):
            found = []
            for group in (q.get("config_groups") or {}).values():
                w = group.get("weights") if isinstance(group, Mapping) else None
                if isinstance(w, Mapping):
                    found.append(_bits_dtype(w.get("num_bits"), w.get("type")))
            known = [d for d in found if d is not None]
            if not known:
                raise UnsupportedModel(f"{where}.config_groups: no weight format the planner knows",
                                       field=where + ".config_groups")
            weight = min(known, key=lambda d: _DTYPE_ORDER.index(d))
        elif method == "modelopt" or (method is None and "quant_algo" in q):
            weight = _quant_algo_dtype(q.get("quant_algo"), where + ".quant_algo", _layer_algos(q))
        elif method is not None:
            raise UnsupportedModel(f"{where}.quant_method: {method!r} is not one the planner knows",
                                   field=where + ".quant_method")
        scheme = q.get("kv_cache_scheme")
        if isinstance(scheme, str):
            kv = kv or _quant_algo_dtype(scheme, where + ".kv_cache_scheme")
        elif isinstance(scheme, Mapping):
            kv = kv or _bits_dtype(scheme.get("num_bits"), scheme.get("type"))
    return weight, kv


def from_hf_config(
    config: Mapping[str, Any], model_id: str = "inline", *, source: str = ""
) -> ModelArchitecture:
    """Build the architecture described by a Hugging Face ``config.json``.

    Parameters
    ----------
    config : mapping
        The parsed ``config.json``. A multimodal config is costed through its ``text_config`` (the
        vision tower is not). A ModelOpt ``hf_quant_config.json`` may be merged in under the key
        ``hf_quant_config`` to declare the checkpoint's quantization.
    model_id : str
        The id to give the architecture.
    source : str, optional
        Citation to record; the parser appends its costing notes.

    Returns
    -------
    ModelArchitecture

    Raises
    ------
    planner.errors.UnsupportedModel
        For unknown model types, block types the planner cannot cost faithfully, missing required
        fields and invalid numbers (non-positive sizes, heads that do not divide, more experts per
        token than experts, values beyond ``MAX_DIMENSION`` / ``MAX_NUM_LAYERS``). The message and
        the ``field`` extra name the offending field.
    """
    if not isinstance(config, Mapping):
        raise UnsupportedModel("the model config must be a JSON object", field="model_config")
    wrapper = config.get("model_type")
    if not isinstance(wrapper, str) or not wrapper:
        raise UnsupportedModel("model_type: required field is missing", field="model_type")
    if wrapper in _REFUSED_TYPES:
        raise UnsupportedModel(f"model_type {wrapper}: {_REFUSED_TYPES[wrapper]}", field="model_type")
    notes: list[str] = []
    text_config = config.get("text_config")
    if isinstance(text_config, Mapping):
        text: Mapping[str, Any] = text_config
        prefix = "text_config."
        mt = text.get("model_type") or _WRAPPER_TEXT_TYPES.get(wrapper)
        if not isinstance(mt, str):
            raise UnsupportedModel("text_config.model_type: required field is missing",
                                   field="text_config.model_type")
        notes.append(f"text model ({mt}) of the multimodal config {wrapper}; vision encoder not costed")
    else:
        text, prefix, mt = config, "", wrapper
    if mt in _REFUSED_TYPES:
        raise UnsupportedModel(f"{prefix}model_type {mt}: {_REFUSED_TYPES[mt]}", field=prefix + "model_type")
    c = _Cfg(text, prefix)
    if mt in _LLAMA_LIKE:
        layers, extra, more = _parse_llama_like(c, mt)
    elif mt in _MLA_TYPES:
        layers, extra, more = _parse_mla(c, mt)
    elif mt in ("falcon", "RefinedWeb", "RefinedWebModel"):
        layers, extra, more = _parse_falcon(c)
    elif mt == "gptj":
        layers, extra, more = _parse_gptj(c)
    elif mt == "opt":
        layers, extra, more = _parse_opt(c)
    elif mt == "bloom":
        layers, extra, more = _parse_bloom(c)
    else:
        raise UnsupportedModel(
            f"{prefix}model_type {mt!r} is not one the planner can cost (supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)})", field=prefix + "model_type")
    notes.extend(more)

    if "tie_word_embeddings" in text and text["tie_word_embeddings"] is not None:
        tied = c.bool_("tie_word_embeddings", False)
    elif isinstance(config.get("tie_word_embeddings"), bool):
        tied = bool(config["tie_word_embeddings"])
    else:
        tied = mt in _TIED_BY_DEFAULT
    if mt == "bloom":
        max_positions = c.int_("seq_length", "max_position_embeddings", default=2048)
    elif mt == "gptj":
        max_positions = c.int_("n_positions", "max_position_embeddings")
    elif mt in ("falcon", "RefinedWeb", "RefinedWebModel"):
        max_positions = c.int_("max_position_embeddings", default=2048)
    else:
        max_positions = c.int_("max_position_embeddings")
    mtp = c.int_("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules", default=0, minimum=0,
                 maximum=MAX_NUM_LAYERS)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) excluded from the counts")
    weight, kv = _native_dtypes(config, text)
    cited = source or f"Hugging Face config.json ({model_id})"
    return ModelArchitecture(
        id=model_id,
        model_type=mt,
        hidden_size=c.int_("hidden_size", "n_embd", "n_embed"),
        vocab_size=c.int_("vocab_size"),
        tie_word_embeddings=tied,
        layer_groups=_group_layers(layers),
        max_position_embeddings=max_positions,
        native_weight_dtype=weight,
        native_kv_dtype=kv,
        source="; ".join([cited, *notes]),
        extra_params=extra,
        num_mtp_layers=mtp,
    )


# ==================================================================================================
# The catalog
# ==================================================================================================

#: the package's catalog directory (source checkout and installed wheel alike)
CATALOG_DIR = Path(__file__).resolve().parent / "model_catalog"

_VARIANT_SUFFIX = re.compile(r"-(instruct|chat|base|hf|it|thinking)(-\d{4})?$")
_QUANT_SUFFIXES = {
    "fp8": "fp8", "fp8-dynamic": "fp8", "fp8-static": "fp8", "fp8-block": "fp8", "nvfp4": "fp4",
    "mxfp4": "fp4", "fp4": "fp4", "w4a16": "int4", "int4": "int4", "awq": "int4", "gptq-int4": "int4",
    "w8a8": "int8", "int8": "int8", "gptq-int8": "int8",
}
_QUANT_SUFFIX = re.compile(
    r"-(" + "|".join(sorted(map(re.escape, _QUANT_SUFFIXES), key=len, reverse=True)) + r")$"
)
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")


def _norm(name: str) -> str:
    """Lookup key: case-insensitive, whitespace runs become '-'."""
    return re.sub(r"\s+", "-", name.strip().lower())


def _strip_variants(key: str) -> str:
    while True:
        stripped = _VARIANT_SUFFIX.sub("", key)
        if stripped == key:
            return key
        key = stripped


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    """One catalog model: its config, citation, aliases and (for refused ones) the reason."""

    id: str
    file: str
    source: str
    aliases: tuple[str, ...]
    config: Mapping[str, Any]
    native_weight_dtype: str | None = None
    unsupported_reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class ModelCatalog:
    """The built-in models, looked up case-insensitively by id, alias, or a variant's name.

    Lookup order: an id or alias (also without its organization, e.g. ``Qwen3-32B``); the same
    without a trailing parenthetical remark; the name without a quantization suffix (``-FP8``,
    ``-NVFP4``, ``-AWQ``, ...), which resolves to the base architecture with that native dtype;
    the name without ``-Instruct``/``-Chat``/``-Base``/``-hf``/``-it``/``-Thinking`` suffixes.
    """

    entries: Mapping[str, CatalogEntry]
    keys: Mapping[str, str]
    _parsed: dict[str, ModelArchitecture] = field(default_factory=dict, repr=False, compare=False)

    def ids(self, include_unsupported: bool = False) -> list[str]:
        """Canonical ids, sorted; refused entries only when asked for."""
        return sorted(
            i for i, e in self.entries.items() if include_unsupported or e.unsupported_reason is None
        )

    def unsupported(self) -> dict[str, str]:
        """Refused entries: id -> reason."""
        return {i: e.unsupported_reason for i, e in sorted(self.entries.items()) if e.unsupported_reason}

    def __contains__(self, model_id: object) -> bool:
        if not isinstance(model_id, str):
            return False
        try:
            self._find(model_id)
        except UnknownModel:
            return False
        return True

    def _lookup(self, key: str) -> str | None:
        if key in self.keys:
            return self.keys[key]
        stem = _strip_variants(key)
        return self.keys.get(stem)

    def _find(self, model_id: str) -> tuple[str, str | None]:
        """(canonical id, dtype named by a quantization suffix or None)."""
        key = _norm(model_id)
        candidates = [key]
        bare = _norm(_PARENTHETICAL.sub("", model_id))
        if bare and bare != key:
            candidates.append(bare)
        for cand in candidates:
            for form in (cand, cand.rsplit("/", 1)[-1]):
                found = self._lookup(form)
                if found is not None:
                    return found, None
                match = _QUANT_SUFFIX.search(form)
                if match:
                    found = self._lookup(form[: match.start()])
                    if found is not None:
                        return found, _QUANT_SUFFIXES[match.group(1)]
        close = difflib.get_close_matches(key, list(self.keys), n=12, cutoff=0.5)
        if "/" in key:
            close += difflib.get_close_matches(key.rsplit("/", 1)[-1], list(self.keys), n=12, cutoff=0.5)
        closest: list[str] = []
        for k in close:
            if self.keys[k] not in closest:
                closest.append(self.keys[k])
        raise UnknownModel(f"unknown model {model_id!r}", closest_ids=closest[:5])

    def resolve(self, model_id: str) -> str:
        """Canonical id of the catalog entry whose architecture ``model_id`` names."""
        return self._find(model_id)[0]

    def get(self, model_id: str) -> ModelArchitecture:
        """The architecture of ``model_id`` (any accepted name).

        Raises
        ------
        planner.errors.UnknownModel
            No entry matches; ``closest_ids`` lists suggestions.
        planner.errors.UnsupportedModel
            The entry is in the catalog but the planner cannot cost it (the reason says why).
        """
        canonical, quant = self._find(model_id)
        entry = self.entries[canonical]
        if entry.unsupported_reason is not None:
            raise UnsupportedModel(f"{canonical}: {entry.unsupported_reason}", model_id=canonical)
        arch = self._parsed.get(canonical)
        if arch is None:
            arch = dataclasses.replace(
                from_hf_config(entry.config, model_id=canonical, source=entry.source), aliases=entry.aliases
            )
            self._parsed[canonical] = arch
        if quant is None or quant == arch.native_weight_dtype:
            return arch
        return dataclasses.replace(
            arch, id=model_id.strip(), aliases=(), native_weight_dtype=quant,
            source=f"architecture of {canonical}; native weight dtype {quant} from the name's suffix; "
            f"{arch.source}",
        )

    def architectures(self) -> Iterator[ModelArchitecture]:
        """Every supported entry, parsed, in id order."""
        for model_id in self.ids():
            yield self.get(model_id)


def _lookup_keys(entries: Mapping[str, CatalogEntry]) -> dict[str, str]:
    """Lookup key -> canonical id: ids and aliases (explicit), then names without organization and
    variant suffixes where unambiguous (16-bit entries win over quantized ones)."""
    keys: dict[str, str] = {}
    for entry in entries.values():
        for name in (entry.id, *entry.aliases):
            key = _norm(name)
            if keys.get(key, entry.id) != entry.id:
                raise CatalogError(f"model catalog: {name!r} names both {keys[key]} and {entry.id}")
            keys[key] = entry.id
    derived: dict[str, set[str]] = {}
    for entry in entries.values():
        for name in (entry.id, *entry.aliases):
            full = _norm(name)
            for form in {full, full.rsplit("/", 1)[-1]}:
                for k in {form, _strip_variants(form)}:
                    derived.setdefault(k, set()).add(entry.id)
    for key, owners in derived.items():
        if key in keys:
            continue
        if len(owners) > 1:
            plain = {o for o in owners if entries[o].native_weight_dtype is None}
            owners = plain if len(plain) == 1 else owners
        if len(owners) == 1:
            keys[key] = next(iter(owners))
    return keys


def load_model_catalog(directory: Path | None = None) -> ModelCatalog:
    """Read ``index.json`` and the config files of the model catalog.

    Every file is read as ``planner.hardware.read_catalog_json`` reads a hardware catalog file: a
    regular file, no symbolic link, at most ``planner.hardware.MAX_CATALOG_FILE_BYTES``, UTF-8 JSON
    nested at most ``planner.hardware.MAX_CATALOG_JSON_DEPTH`` deep. A config's ``file`` in the
    index is a relative path inside the directory: an absolute path, a ``..`` component, a
    symbolic link on the way, or anything that resolves outside the directory is refused.

    Parameters
    ----------
    directory : pathlib.Path, optional
        A catalog directory; default: the one shipped inside the package (``CATALOG_DIR``). It is
        resolved once, like any configured path, so it may itself be a symbolic link.

    Raises
    ------
    planner.errors.CatalogError
        A missing, malformed or refused index or config file (names the file and why).
    """
    root = _catalog_root(CATALOG_DIR if directory is None else Path(directory))
    index_path = root / "index.json"
    index = read_catalog_json(index_path, display=str(index_path), strict=False)
    models = index.get("models") if isinstance(index, Mapping) else None
    if not isinstance(models, Mapping):
        raise CatalogError(f"model catalog index {index_path}: 'models' must be an object",
                           file=str(index_path))
    entries: dict[str, CatalogEntry] = {}
    configs: dict[str, Mapping[str, Any]] = {}
    for model_id, meta in models.items():
        file_name = meta.get("file") if isinstance(meta, Mapping) else None
        if not isinstance(file_name, str):
            raise CatalogError(f"model catalog index: {model_id}.file is missing", file=str(index_path))
        if file_name not in configs:
            path = _confined_config_path(root, file_name, index_path=index_path, model_id=model_id)
            config = read_catalog_json(path, display=str(path), strict=False)
            if not isinstance(config, dict):
                raise CatalogError(f"model catalog file {path}: the top level must be a JSON object",
                                   file=str(path))
            configs[file_name] = config
        entries[model_id] = CatalogEntry(
            id=model_id,
            file=file_name,
            source=str(meta.get("source", "")),
            aliases=tuple(meta.get("aliases", ())),
            config=configs[file_name],
            native_weight_dtype=meta.get("native_weight_dtype"),
            unsupported_reason=meta.get("unsupported"),
        )
    return ModelCatalog(entries=entries, keys=_lookup_keys(entries))


def _catalog_root(directory: Path) -> Path:
    """The resolved catalog directory (the configured path itself is the one link followed)."""
    if not directory.is_dir():
        raise CatalogError(f"model catalog directory {directory} does not exist or is not a directory",
                           file=str(directory))
    return directory.resolve()


def _confined_config_path(root: Path, file_name: str, *, index_path: Path, model_id: str) -> Path:
    """``root / file_name`` (``root`` resolved) once no link or ``..`` can lead it outside ``root``.

    Both separators count (``a\\..\\b`` is refused on every platform); a ``..`` component is
    refused even when it would stay inside, so the index cannot depend on the layout around it.

    Raises
    ------
    planner.errors.CatalogError
        Naming the index, the model and the refused ``file``.
    """

    def refuse(why: str) -> CatalogError:
        return CatalogError(
            f"model catalog index {index_path}: models.{model_id}.file {file_name!r}: {why}",
            file=str(index_path), field=f"models.{model_id}.file",
        )

    if not file_name.strip() or "\x00" in file_name:
        raise refuse("must be a non-empty relative path without NUL characters")
    windows = PureWindowsPath(file_name)
    if PurePosixPath(file_name).is_absolute() or windows.is_absolute() or windows.drive or windows.root:
        raise refuse("absolute paths are refused")
    parts = PurePosixPath(file_name.replace("\\", "/")).parts
    if ".." in parts:
        raise refuse("'..' components are refused")
    current = root
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise refuse(f"symbolic links are refused ({current} is one)")
    if not current.resolve().is_relative_to(root):
        raise refuse(f"resolves outside the catalog directory {root}")
    return current
