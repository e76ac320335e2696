"""Model architectures built from Hugging Face ``config.json`` files.

A model is a tuple of ``LayerGroup``s: runs of identical decoder layers (same attention kind, same
feed-forward). DeepSeek-V3 is ``(3 × MLA + dense MLP, 58 × MLA + MoE)``; gpt-oss alternates sliding
and full attention; Qwen3.5 mixes linear-attention (Gated DeltaNet) and full-attention layers.
The cost model walks the groups; parameter counts and KV bytes come from the same description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AttentionKind = Literal["gqa", "mla", "linear"]
Split = Literal["column", "row", "none"]


@dataclass(frozen=True, kw_only=True)
class Linear:
    """One weight matrix of a layer: ``y = x W`` with ``W`` of shape (in_features, out_features).

    ``split`` says how tensor parallelism shards it: ``column`` splits out_features, ``row`` splits
    in_features (and is followed by an all-reduce), ``none`` is replicated on every TP rank.
    """

    name: str
    in_features: int
    out_features: int
    split: Split

    @property
    def num_params(self) -> int:
        return self.in_features * self.out_features


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """Attention block of a layer.

    ``gqa`` covers MHA (num_kv_heads == num_heads), GQA and MQA. ``mla`` is DeepSeek's multi-head
    latent attention: the cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token and layer.
    ``linear`` is a recurrent linear-attention block (Gated DeltaNet, Mamba-like): no per-token
    cache, a fixed state per sequence.
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


@dataclass(frozen=True, kw_only=True)
class LayerGroup:
    num_layers: int
    attention: AttentionSpec
    ffn: FfnSpec
