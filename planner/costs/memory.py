"""Memory plan of a worker: weights per GPU, activation workspace, KV-cache capacity.

Follows vLLM's accounting: the engine may use ``gpu_memory_utilization`` (default 0.9) of each GPU;
from that it subtracts the weights and the peak activation workspace of a profiling pass at
``max_num_batched_tokens``; the rest is KV cache (vLLM docs, "Engine arguments":
``--gpu-memory-utilization``, ``--max-num-batched-tokens``).
"""

from __future__ import annotations

import math

from planner.costs.types import CostContext, MemoryPlan, Parallelism
from planner.errors import UnsupportedConfiguration
from planner.units import DTYPE_BYTES

#: vLLM's default ``gpu_memory_utilization``
GPU_MEMORY_UTILIZATION_FRACTION = 0.9
#: tokens of the activation-profiling pass (vLLM's default max_num_batched_tokens for online serving)
PROFILE_TOKENS = 8192
#: bytes kept for the CUDA context, CUDA graphs, NCCL buffers and allocator fragmentation, beyond the
#: (1 - utilization) headroom; vLLM's own estimate of graph memory is of this order (~0.5-1.5 GiB)
RUNTIME_RESERVE_BYTES = 1.0 * 1024**3
ACT_BYTES = 2.0


def kv_heads_per_gpu(num_kv_heads: int, tp: int) -> int:
    """KV heads one TP rank holds: they are split when tp divides them, else replicated (vLLM)."""
    return max(1, math.ceil(num_kv_heads / tp))


def moe_parallelism(par: Parallelism) -> tuple[int, int]:
    """(moe_tp, moe_ep) of the expert layers: experts are spread over ``ep`` GPUs, each expert sliced over
    the remaining ``tp·dp / ep`` GPUs of the worker (vLLM / SGLang expert-parallel layout)."""
    if par.ep <= 1:
        return par.tp, 1
    return max(1, (par.tp * par.dp) // par.ep), par.ep


def validate_parallelism(ctx: CostContext) -> None:
    """Refuse parallel layouts the engines cannot run (with the reason)."""
    par = ctx.parallelism
    model = ctx.model
    for name in ("tp", "pp", "dp", "ep"):
        if getattr(par, name) < 1:
            raise UnsupportedConfiguration(f"parallelism.{name} must be >= 1", field=f"parallelism.{name}")
    if par.pp > model.num_layers:
        raise UnsupportedConfiguration(
            f"pp={par.pp} exceeds the model's {model.num_layers} layers", field="parallelism.pp"
        )
    for group in model.layer_groups:
        heads = group.attention.num_heads
        if group.attention.kind != "linear" and heads % par.tp != 0:
            raise UnsupportedConfiguration(
                f"tp={par.tp} does not divide the {heads} attention heads of {model.id}", field="parallelism.tp"
            )
        if group.ffn.kind == "moe":
            if par.ep > 1 and (par.tp * par.dp) % par.ep != 0:
                raise UnsupportedConfiguration(
                    f"ep={par.ep} must divide tp·dp={par.tp * par.dp}", field="parallelism.ep"
                )
            if group.ffn.num_experts % par.ep != 0:
                raise UnsupportedConfiguration(
                    f"ep={par.ep} does not divide the {group.ffn.num_experts} experts", field="parallelism.ep"
                )
    if any(g.ffn.kind == "moe" for g in model.layer_groups) is False and par.ep > 1:
        raise UnsupportedConfiguration(f"{model.id} is dense: expert parallelism needs an MoE model",
                                       field="parallelism.ep")
    if par.dp > 1 and par.ep == 1 and any(g.ffn.kind == "moe" for g in model.layer_groups):
        pass  # attention DP with replicated experts is allowed (each dp rank holds tp-sliced experts)
    if par.dp > 1 and all(g.ffn.kind == "dense" for g in model.layer_groups):
        raise UnsupportedConfiguration(
            "attention data parallelism (dp > 1) inside a worker is for MoE models; for a dense model use "
            "replicas", field="parallelism.dp",
        )


def weight_bytes_per_gpu(ctx: CostContext) -> float:
    """Weights one GPU holds: dense parts / (tp·pp), experts / (moe_tp·ep·pp), embeddings vocab-parallel."""
    model = ctx.model
    par = ctx.parallelism
    w = DTYPE_BYTES[ctx.weight_dtype]
    moe_tp, moe_ep = moe_parallelism(par)
    total = 0.0
    for group in model.layer_groups:
        att = sum(lin.num_params for lin in model.attention_linears(group))
        layer = att / par.tp
        if group.ffn.kind == "dense":
            layer += sum(lin.num_params for lin in model.ffn_linears(group)) / par.tp
        else:
            expert = sum(lin.num_params for lin in model.ffn_linears(group))
            layer += expert * group.ffn.num_experts / (moe_tp * moe_ep)
            if group.ffn.num_shared_experts > 0:
                layer += sum(lin.num_params for lin in model.shared_expert_linears(group)) / par.tp
            router = model.router_linear(group)
            if router is not None:
                layer += router.num_params * (2.0 / w)  # routers stay bf16
        total += layer * group.num_layers * w
    # embeddings and LM head stay 16-bit in quantized checkpoints; vocab-parallel over TP
    total /= par.pp
    if par.pp == 1:
        embed_params = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    else:
        # the first stage holds the embedding, the last the LM head (a tied pair is stored on both)
        embed_params = model.vocab_size * model.hidden_size
    total += embed_params * 2.0 / par.tp
    return total


def kv_bytes_per_token_per_gpu(ctx: CostContext, context_tokens: int | None = None) -> float:
    """KV-cache bytes per token on one GPU (its TP share of its pipeline stage's layers).

    With ``context_tokens`` (the length sequences reach), the figure is the average over such a
    sequence: a sliding-window layer holds at most ``window`` tokens (vLLM frees blocks that fall out of
    the window), and a linear-attention layer's fixed recurrent state (fp32) is spread over the
    sequence. Without it, every attention layer counts in full and linear layers not at all (the
    conservative long-context figure).
    """
    model = ctx.model
    par = ctx.parallelism
    kv = DTYPE_BYTES[ctx.kv_dtype]
    total = 0.0
    for group in model.layer_groups:
        att = group.attention
        if att.kind == "gqa":
            per_layer = kv_heads_per_gpu(att.num_kv_heads, par.tp) * (att.head_dim + att.v_head_dim) * kv
            if att.sliding_window and context_tokens:
                per_layer *= min(1.0, att.sliding_window / context_tokens)
        elif att.kind == "mla":
            per_layer = (att.kv_lora_rank + att.qk_rope_head_dim) * kv  # replicated on every TP rank
        else:
            per_layer = 0.0
            if context_tokens:
                heads = max(1, att.linear_num_value_heads // par.tp)
                state = heads * att.linear_key_head_dim * att.linear_value_head_dim * 4.0
                per_layer = state / context_tokens
        total += per_layer * group.num_layers
    return total / par.pp


def activation_bytes_per_gpu(ctx: CostContext, tokens: int = PROFILE_TOKENS) -> float:
    """Peak activation workspace of a forward pass over ``tokens`` tokens on one GPU [bytes].

    The widest live tensors of a layer: the residual stream and its normed copy, the fused QKV output,
    and the gate/up output of the MLP (or the routed-expert buffers), plus the fp32 logits of the
    sampled positions (vLLM samples at most max_num_seqs = 256 positions per step).
    """
    model = ctx.model
    par = ctx.parallelism
    widest = 0.0
    for group in model.layer_groups:
        att = sum(lin.out_features for lin in model.attention_linears(group) if lin.split == "column") / par.tp
        if group.ffn.kind == "dense":
            ffn = group.ffn.intermediate_size * (2 if group.ffn.gated else 1) / par.tp
        else:
            moe_tp, _ = moe_parallelism(par)
            ffn = group.ffn.num_experts_per_token * group.ffn.intermediate_size * 2 / moe_tp
        widest = max(widest, 3 * model.hidden_size + att + ffn)
    logits = 256 * model.vocab_size / par.tp * 4.0
    return tokens * widest * ACT_BYTES + logits


def memory_plan(ctx: CostContext, *, max_context_tokens: int | None = None) -> MemoryPlan:
    """Per-GPU memory budget and KV capacity of the worker.

    ``max_context_tokens`` is the length the sequences reach; it matters for sliding-window and
    linear-attention layers (see :func:`kv_bytes_per_token_per_gpu`).
    """
    gpu = ctx.gpu
    mem = gpu.memory_bytes
    reserved = mem * (1.0 - GPU_MEMORY_UTILIZATION_FRACTION) + RUNTIME_RESERVE_BYTES
    weights = weight_bytes_per_gpu(ctx)
    acts = activation_bytes_per_gpu(ctx)
    kv_space = mem - reserved - weights - acts
    per_token = kv_bytes_per_token_per_gpu(ctx, max_context_tokens)
    fits = kv_space > 0
    if per_token > 0:
        capacity = int(max(kv_space, 0.0) // per_token) * ctx.parallelism.dp
    else:  # only linear-attention layers: no per-token cache
        capacity = 2**62 if fits else 0
    return MemoryPlan(
        memory_bytes=mem,
        weight_bytes_per_gpu=weights,
        activation_bytes_per_gpu=acts,
        reserved_bytes_per_gpu=reserved,
        kv_cache_bytes_per_gpu=max(kv_space, 0.0),
        kv_bytes_per_token_per_gpu=per_token,
        kv_capacity_tokens=capacity,
        fits=fits,
    )
