"""One prefill pass and one decode step of a whole model on one worker, operator by operator.

A worker is ``tp · pp · dp`` GPUs. Per layer group of the model we cost, on one GPU:

- the attention projections (column-split outputs, row-split inputs, replicated low-rank MLA adapters),
- attention itself (flash prefill over the new tokens and any cached prefix; decode reads the KV cache;
  MLA prefill expands the latent cache through ``kv_b``, MLA decode attends in the latent space),
- the MLP, or the MoE (router, shared experts, routed experts over the expected distinct experts),
- norms, activations and residual adds (HBM streaming),
- TP all-reduce after the attention and FFN outputs, EP all-to-all (dispatch + combine) with expert
  parallelism, and PP activation sends between stages,
- the LM head on the last token of every sequence only,

then add the engine's per-iteration host overhead. A pass's latency is the sum over all layers of all
pipeline stages (a single batch crosses every stage). Everything broadcasts over numpy arrays of token
counts so a serving model can tabulate many shapes in one call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from planner.costs import kernels as K
from planner.costs.memory import kv_heads_per_gpu, memory_plan, moe_parallelism, validate_parallelism
from planner.costs.types import Bound, CostContext, OperatorCost, PassCost
from planner.errors import InvalidInput, ModelDoesNotFit
from planner.models import LayerGroup, Linear, ModelArchitecture
from planner.units import DTYPE_BYTES

FloatArray = NDArray[np.float64]

ACT_BYTES = 2.0  # activations stay bf16/fp16 in every engine we model
#: most elements (linears × token cells) costed in one batched GEMM pass (``_Pass.gemm_times``): beyond
#: about 32 kB per array the temporaries leave the L1/L2 caches and one linear at a time is faster
BATCHED_GEMM_ELEMENTS = 4096


@dataclass(frozen=True, kw_only=True)
class _Op:
    """An operator's totals over the pass (arrays broadcast over the token-count inputs)."""

    name: str
    time_s: FloatArray
    flops: FloatArray
    bytes_moved: FloatArray
    kind: Bound


def fuse_siblings(linears: tuple[Linear, ...], layer_input_features: int) -> tuple[Linear, ...]:
    """Fuse the projections that read the layer's input with the same TP split into one GEMM each.

    Every engine we model concatenates these weights: QKV (vLLM ``QKVParallelLinear``), gate+up
    (``MergedColumnParallelLinear``), MLA's q_a+kv_a (``fused_qkv_a_proj``), Gated DeltaNet's input
    projections. One wide GEMM pays one launch and fills the GPU better than several narrow ones.
    Projections of intermediate tensors (MLA's q_b, kv_b; the output projections) stay separate.
    """
    out: list[Linear] = []
    first: dict[str, int] = {}
    for lin in linears:
        key = lin.split
        if lin.in_features == layer_input_features and key in ("column", "none") and key in first:
            j = first[key]
            prev = out[j]
            out[j] = Linear(name=f"{prev.name}+{lin.name}", in_features=prev.in_features,
                            out_features=prev.out_features + lin.out_features, split=key)
            continue
        if lin.in_features == layer_input_features and key in ("column", "none"):
            first[key] = len(out)
        out.append(lin)
    return tuple(out)


#: the fused projections of a (model, layer group), by the pair's identities (each entry holds the pair, so
#: an identity is never reused while its entry lives); cleared when it reaches ``_FUSED_ENTRIES``
_FUSED: dict[tuple[int, int], tuple[object, object, tuple[Linear, ...], tuple[Linear, ...]]] = {}
_FUSED_ENTRIES = 256


def _fused_linears(model: ModelArchitecture, group: LayerGroup
                   ) -> tuple[tuple[Linear, ...], tuple[Linear, ...]]:
    """(attention, dense FFN) projections of one layer of ``group``, siblings fused (``fuse_siblings``); the
    FFN's are empty for a MoE. Built once per (model, group): every cost-model pass reads them, and building
    them took ~8 % of a small table's time."""
    key = (id(model), id(group))
    hit = _FUSED.get(key)
    if hit is not None and hit[0] is model and hit[1] is group:
        return hit[2], hit[3]
    att = fuse_siblings(model.attention_linears(group), model.hidden_size)
    ffn = fuse_siblings(model.ffn_linears(group), model.hidden_size) if group.ffn.kind == "dense" else ()
    if len(_FUSED) >= _FUSED_ENTRIES:
        _FUSED.clear()
    _FUSED[key] = (model, group, att, ffn)
    return att, ffn


def _linear_shape(lin: Linear, tp: int) -> tuple[int, int]:
    """(n, k) of a linear layer's shard on one TP rank."""
    if lin.split == "column":
        return max(1, lin.out_features // tp), lin.in_features
    if lin.split == "row":
        return lin.out_features, max(1, lin.in_features // tp)
    return lin.out_features, lin.in_features


#: an operator's (FLOPs, HBM bytes) over the pass, computed only when the pass keeps its breakdown
Work = Callable[[], tuple[ArrayLike, ArrayLike]]


def _scaled(scale: ArrayLike, work: tuple[ArrayLike, ArrayLike]) -> tuple[FloatArray, FloatArray]:
    """(FLOPs, bytes) each multiplied by ``scale`` (an operator's mask times its layer count)."""
    flops, bytes_moved = work
    return np.multiply(scale, flops), np.multiply(scale, bytes_moved)


class _Pass:
    """Accumulates operator costs for one pass; internal helper of prefill/decode below.

    ``times_only`` keeps each operator's time alone (the latency functions: a search tabulates thousands of
    iterations and reads only their sum); otherwise every operator's FLOPs and bytes too (the breakdown)."""

    def __init__(self, ctx: CostContext, times_only: bool = False) -> None:
        self.ctx = ctx
        self.gpu = ctx.gpu
        self.par = ctx.parallelism
        self.w_bytes = DTYPE_BYTES[ctx.weight_dtype]
        self.kv_bytes = DTYPE_BYTES[ctx.kv_dtype]
        self.cdtype = K.compute_dtype_for(ctx.gpu, ctx.weight_dtype)
        self.times_only = times_only
        self.ops: dict[str, _Op] = {}
        #: per operator its time [s], in the order the operators first appear (as ``ops``)
        self.times: dict[str, FloatArray] = {}

    def add(self, name: str, kind: Bound, time_s: ArrayLike, work: Work) -> None:
        """Add ``time_s`` [s] to operator ``name``; ``work`` gives its (FLOPs, bytes), unless
        ``times_only``."""
        t = np.asarray(time_s, dtype=np.float64)
        if name in self.times:
            t = self.times[name] + t
        self.times[name] = t
        if self.times_only:
            return
        flops, bytes_moved = work()
        f = np.asarray(flops, dtype=np.float64)
        b = np.asarray(bytes_moved, dtype=np.float64)
        if name in self.ops:
            old = self.ops[name]
            f, b = old.flops + f, old.bytes_moved + b
        self.ops[name] = _Op(name=name, time_s=t, flops=f, bytes_moved=b, kind=kind)

    def latency_s(self) -> FloatArray:
        """The pass's latency [s]: the sum of its operators' times."""
        return sum(self.times.values(), np.zeros(()))

    def gemm_times(self, lins: Sequence[Linear], tokens: FloatArray, layers: float, *,
                   sixteen_bit: bool = False) -> list[FloatArray]:
        """Time [s] of ``layers`` GEMMs of each linear of ``lins`` over ``tokens`` rows (see :meth:`linear`).

        Small token arrays (``BATCHED_GEMM_ELEMENTS``) cost all the linears in one numpy pass, one row per
        linear: the kernels' numpy overhead per call dominates there, and every element is computed as
        it would be alone (the kernels are elementwise). Larger ones are costed one linear at a time, and
        so are scalar token counts (the breakdowns): numpy computes the powers of scalars and of arrays with
        different routines, which can differ in the last bit."""
        shapes = [_linear_shape(lin, self.par.tp) for lin in lins]
        eng = self.ctx.engine
        w_bytes, cdtype = (2.0, "bf16") if sixteen_bit else (self.w_bytes, self.cdtype)
        options = dict(compute_dtype=cdtype, weight_bytes_per_element=w_bytes,
                       efficiency_scale=eng.gemm_efficiency_scale, count=layers)
        m = np.asarray(tokens, dtype=np.float64)
        if len(shapes) > 1 and m.ndim > 0 and len(shapes) * m.size <= BATCHED_GEMM_ELEMENTS:
            column = (len(shapes),) + (1,) * m.ndim
            n = np.array([nk[0] for nk in shapes], dtype=np.float64).reshape(column)
            k = np.array([nk[1] for nk in shapes], dtype=np.float64).reshape(column)
            return list(K.gemm_time_s(self.gpu, m=m, n=n, k=k, **options))  # type: ignore[arg-type]
        return [K.gemm_time_s(self.gpu, m=m, n=n, k=k, **options) for n, k in shapes]  # type: ignore[arg-type]

    def linear(self, name: str, lin: Linear, tokens: FloatArray, layers: float, *, sixteen_bit: bool = False,
               active: FloatArray | float = 1.0, time_s: FloatArray | None = None) -> None:
        """A GEMM per layer; ``sixteen_bit`` for weights quantized checkpoints keep in bf16 (LM head, routers);
        ``active`` masks cells of a vectorized pass where the operator does not run; ``time_s``: its time from
        :meth:`gemm_times`, when the caller costed it with other linears."""
        n, k = _linear_shape(lin, self.par.tp)
        w_bytes = 2.0 if sixteen_bit else self.w_bytes
        t = self.gemm_times((lin,), tokens, layers, sixteen_bit=sixteen_bit)[0] if time_s is None else time_s

        def work() -> tuple[FloatArray, FloatArray]:
            flops = layers * 2.0 * tokens * n * k
            traffic = layers * K.gemm_hbm_bytes(self.gpu, tokens, n, k, weight_bytes_per_element=w_bytes)
            return active * flops, active * traffic

        self.add(name, "compute", active * t, work)


def _decode_attention(p: _Pass, group: LayerGroup, layers: float, batch: FloatArray, context: FloatArray) -> None:
    """Attention of ``batch`` decoding sequences, each with ``context`` tokens cached (zero when batch = 0)."""
    ctx, gpu, par = p.ctx, p.gpu, p.par
    att, eng = group.attention, ctx.engine
    on = (np.asarray(batch) > 0).astype(np.float64)
    b = np.maximum(np.asarray(batch, dtype=np.float64) / par.dp, 1.0)
    heads = max(1, att.num_heads // par.tp)
    window = att.sliding_window or 0
    blocks = {"fixed_s": eng.attention_fixed_s, "block_s": eng.decode_attention_block_s,
              "blocks_per": eng.decode_attention_blocks_per, "efficiency_scale": eng.attention_efficiency_scale}
    if att.kind == "gqa":
        kvh = kv_heads_per_gpu(att.num_kv_heads, par.tp)
        t = K.decode_attention_time_s(
            gpu, batch_size=b, context_tokens=context + 1.0, num_heads=heads, num_kv_heads=kvh,
            head_dim=att.head_dim, v_head_dim=att.v_head_dim, sliding_window=window,
            kv_bytes_per_element=p.kv_bytes, **blocks,
        )

        def work() -> tuple[FloatArray, FloatArray]:
            nbytes = K.decode_attention_bytes(
                batch_size=b, context_tokens=context + 1.0, num_kv_heads=kvh, head_dim=att.head_dim,
                v_head_dim=att.v_head_dim, sliding_window=window, kv_bytes_per_element=p.kv_bytes,
            )
            f = K.attention_flops(batch_size=b, q_tokens=1.0, cached_tokens=context, num_heads=heads,
                                  head_dim=att.head_dim, v_head_dim=att.v_head_dim, sliding_window=window)
            return f, nbytes
    elif att.kind == "mla":
        # absorbed MLA: all heads attend over the shared latent cache (one "KV head" of width `latent`)
        latent = att.kv_lora_rank + att.qk_rope_head_dim
        # the latent is both K and V: ``latent`` elements per token are read (v_head_dim 0 for the byte count;
        # this under-counts the PV FLOPs by kv_lora/latent, immaterial for a memory-bound kernel)
        t = K.decode_attention_time_s(
            gpu, batch_size=b, context_tokens=context + 1.0, num_heads=heads, num_kv_heads=1,
            head_dim=latent, v_head_dim=0, kv_bytes_per_element=p.kv_bytes, **blocks,
        )

        def work() -> tuple[FloatArray, FloatArray]:
            nbytes = b * (context + 1.0) * latent * p.kv_bytes
            f = K.attention_flops(batch_size=b, q_tokens=1.0, cached_tokens=context, num_heads=heads,
                                  head_dim=latent, v_head_dim=att.kv_lora_rank)
            return f, nbytes
    else:
        return
    p.add("attention.decode", "memory", on * layers * t, lambda: _scaled(on * layers, work()))


def _prefill_attention(
    p: _Pass, group: LayerGroup, layers: float, seqs: FloatArray, q_tokens: FloatArray, cached: FloatArray
) -> None:
    """Attention of ``seqs`` prompts (or chunks) of ``q_tokens`` new tokens after ``cached`` earlier ones."""
    ctx, gpu, par = p.ctx, p.gpu, p.par
    att, eng = group.attention, ctx.engine
    on = (np.asarray(seqs) > 0).astype(np.float64)
    n = np.maximum(np.asarray(seqs, dtype=np.float64) / par.dp, 1.0)
    q_tokens = np.maximum(q_tokens, 1.0)  # costed only where seqs > 0; keeps the off cells finite
    heads = max(1, att.num_heads // par.tp)
    window = att.sliding_window or 0
    common = {"efficiency_scale": eng.attention_efficiency_scale, "fixed_s": eng.attention_fixed_s}
    if att.kind == "gqa":
        kvh = kv_heads_per_gpu(att.num_kv_heads, par.tp)
        t = K.prefill_attention_time_s(
            gpu, batch_size=n, q_tokens=q_tokens, cached_tokens=cached, num_heads=heads, num_kv_heads=kvh,
            head_dim=att.head_dim, v_head_dim=att.v_head_dim, sliding_window=window,
            kv_bytes_per_element=p.kv_bytes, **common,
        )
        kv_heads, kv_elem_bytes = kvh, p.kv_bytes
    elif att.kind == "mla":
        # the cached prefix's latents are expanded through kv_b like the new tokens' (MHA-style prefill)
        has_prefix = on * (np.asarray(cached) > 0)
        if np.any(has_prefix > 0):
            kv_b = next(lin for lin in ctx.model.attention_linears(group) if lin.name == "kv_b")
            p.linear("attn.kv_b.cached", kv_b, n * cached, layers, active=has_prefix)
        t = K.prefill_attention_time_s(
            gpu, batch_size=n, q_tokens=q_tokens, cached_tokens=cached, num_heads=heads, num_kv_heads=heads,
            head_dim=att.head_dim, v_head_dim=att.v_head_dim, kv_bytes_per_element=2.0, **common,
        )
        kv_heads, kv_elem_bytes = heads, 2.0
    else:
        return

    def work() -> tuple[FloatArray, FloatArray]:
        b = n * (q_tokens + cached) * kv_heads * (att.head_dim + att.v_head_dim) * kv_elem_bytes
        f = K.attention_flops(batch_size=n, q_tokens=q_tokens, cached_tokens=cached, num_heads=heads,
                              head_dim=att.head_dim, v_head_dim=att.v_head_dim, sliding_window=window)
        return f, b

    p.add("attention.prefill", "compute", on * layers * t, lambda: _scaled(on * layers, work()))


def _group_ops(
    p: _Pass, group: LayerGroup, layers: float, *, decode_batch: FloatArray, decode_context: FloatArray,
    prefill_seqs: FloatArray, prefill_q: FloatArray, prefill_cached: FloatArray,
) -> None:
    """Add one layer group's operators to the pass: ``decode_batch`` decoding sequences and ``prefill_seqs``
    prompt chunks of ``prefill_q`` new tokens share one iteration (a mixed batch when both are > 0)."""
    ctx, gpu, par = p.ctx, p.gpu, p.par
    model = ctx.model
    att = group.attention
    hidden = model.hidden_size
    tp = par.tp
    tokens = decode_batch + prefill_seqs * prefill_q
    # attention data parallelism: each dp rank runs attention on its share of the batch
    att_tokens = tokens / par.dp
    att_batch = np.maximum((decode_batch + prefill_seqs) / par.dp, 1.0)
    att_lins, ffn_lins = _fused_linears(model, group)
    ffn = group.ffn
    # the projections of the layer in one costing where they share their rows (no attention DP: the
    # attention's tokens are the FFN's), else the attention's and the FFN's apart
    if par.dp == 1:
        gemm_s = p.gemm_times(att_lins + ffn_lins, tokens, layers)
    else:
        gemm_s = p.gemm_times(att_lins, att_tokens, layers) + p.gemm_times(ffn_lins, tokens, layers)
    for lin, t_lin in zip(att_lins, gemm_s[: len(att_lins)], strict=True):
        p.linear(f"attn.{lin.name}" if att.kind != "linear" else f"linear_attn.{lin.name}", lin, att_tokens,
                 layers, time_s=t_lin)
    _decode_attention(p, group, layers, decode_batch, decode_context)
    _prefill_attention(p, group, layers, prefill_seqs, prefill_q, prefill_cached)
    if att.kind in ("gqa", "mla"):
        if att.kind == "gqa":
            width = kv_heads_per_gpu(att.num_kv_heads, tp) * (att.head_dim + att.v_head_dim)
        else:
            width = att.kv_lora_rank + att.qk_rope_head_dim
        # writing the new tokens' K and V (or latents) into the paged cache
        kv_write = att_tokens * width * p.kv_bytes
        p.add("kv_cache.write", "memory", K.streaming_time_s(gpu, bytes_moved=layers * kv_write, count=layers),
              lambda: (0.0, layers * kv_write))
    else:  # linear attention: recurrent state update, chunked scan in prefill
        nv = max(1, att.linear_num_value_heads // tp)
        dk, dv = att.linear_key_head_dim, att.linear_value_head_dim
        state_bytes = att_batch * nv * dk * dv * 4.0  # fp32 recurrent state
        # delta-rule update and readout: ~ 6·dk·dv FLOPs per token and head
        f = 6.0 * att_tokens * nv * dk * dv
        io = 2.0 * state_bytes + att_tokens * nv * (2 * dk + 2 * dv) * ACT_BYTES
        rate = gpu.peak_flops_per_s["bf16"] * gpu.efficiency.attention_peak_fraction["bf16"]
        t = gpu.efficiency.kernel_fixed_s * 3 + np.maximum(
            f / rate, io / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.memory_bandwidth_fraction)
        )
        p.add("linear_attention.scan", "memory", layers * t, lambda: (layers * f, layers * io))
    eng = ctx.engine

    # TP all-reduce after the attention output projection
    attention_allreduce: tuple[FloatArray, FloatArray] | None = None
    if tp > 1:
        msg = att_tokens * hidden * ACT_BYTES
        t = K.engine_allreduce_time_s(gpu, eng, num_gpus=tp, message_bytes=msg)
        attention_allreduce = (msg, t)
        p.add("allreduce.attention", "communication", layers * t, lambda: (0.0, layers * 2.0 * msg))

    # feed-forward
    if ffn.kind == "dense":
        for lin, t_lin in zip(ffn_lins, gemm_s[len(att_lins):], strict=True):
            p.linear(f"mlp.{lin.name}", lin, tokens, layers, time_s=t_lin)
        width = ffn.intermediate_size / tp
        act_bytes = tokens * width * (3.0 if ffn.gated else 2.0) * ACT_BYTES
        p.add("mlp.activation", "memory", K.streaming_time_s(gpu, bytes_moved=layers * act_bytes, count=layers),
              lambda: (layers * tokens * width * 4.0, layers * act_bytes))
        ffn_comm_tokens = tokens
        ffn_comm_gpus = tp
    else:
        moe_tp, moe_ep = moe_parallelism(par)
        router = model.router_linear(group)
        if router is not None:
            p.linear("moe.router", router, tokens, layers, sixteen_bit=True)
        if ffn.num_shared_experts > 0:
            shared = fuse_siblings(model.shared_expert_linears(group), model.hidden_size)
            for lin, t_lin in zip(shared, p.gemm_times(shared, tokens, layers), strict=True):
                p.linear(f"moe.shared.{lin.name}", lin, tokens, layers, time_s=t_lin)
        all_tokens = tokens  # every token of the worker's batch is routed
        t = K.moe_time_s(
            gpu, num_tokens=all_tokens, hidden_size=hidden, intermediate_size=ffn.intermediate_size,
            experts_per_token=ffn.num_experts_per_token, num_experts=ffn.num_experts, moe_tp=moe_tp,
            moe_ep=moe_ep, gated=ffn.gated, compute_dtype=p.cdtype, weight_bytes_per_element=p.w_bytes,
            efficiency_scale=eng.gemm_efficiency_scale * eng.moe_efficiency_scale, overhead_s=eng.moe_overhead_s,
        )

        def moe_work() -> tuple[FloatArray, FloatArray]:
            mats = 3.0 if ffn.gated else 2.0
            slots = all_tokens * ffn.num_experts_per_token / moe_ep
            f = 2.0 * slots * mats * hidden * ffn.intermediate_size / moe_tp
            distinct = K.expected_distinct_experts(all_tokens, ffn.num_experts, ffn.num_experts_per_token)
            touched = np.clip(distinct / moe_ep, 1.0, ffn.num_experts / moe_ep)
            b = touched * mats * hidden * ffn.intermediate_size / moe_tp * p.w_bytes
            return layers * f, layers * b

        p.add("moe.experts", "compute", layers * t, moe_work)
        if moe_ep > 1 and par.dp > 1:
            # with attention DP each rank holds only its own tokens: dispatch and combine them to the
            # experts' owners (with dp = 1 every TP rank already has all tokens after the attention
            # all-reduce, computes its local experts, and the FFN all-reduce below combines them)
            msg = (tokens / par.dp) * ffn.num_experts_per_token * hidden * ACT_BYTES
            t = K.all_to_all_time_s(gpu, num_gpus=moe_ep, message_bytes=msg)
            p.add("alltoall.moe", "communication", layers * 2.0 * t, lambda: (0.0, layers * 2.0 * msg))
        ffn_comm_tokens = tokens / par.dp
        ffn_comm_gpus = tp
    if ffn_comm_gpus > 1:
        msg = ffn_comm_tokens * hidden * ACT_BYTES
        # without attention DP it is the attention's message over the same GPUs: the same time, reused
        if (attention_allreduce is not None and ffn_comm_gpus == tp
                and np.array_equal(msg, attention_allreduce[0])):
            t = attention_allreduce[1]
        else:
            t = K.engine_allreduce_time_s(gpu, eng, num_gpus=ffn_comm_gpus, message_bytes=msg)
        p.add("allreduce.ffn", "communication", layers * t, lambda: (0.0, layers * 2.0 * msg))

    # two fused residual-add + RMSNorm kernels per layer (each reads residual and input, writes both)
    norm_bytes = att_tokens * hidden * ACT_BYTES * 8.0
    p.add("norms_residuals", "memory", K.streaming_time_s(gpu, bytes_moved=layers * norm_bytes, count=2 * layers),
          lambda: (layers * att_tokens * hidden * 10.0, layers * norm_bytes))


def _run_pass(
    ctx: CostContext, *, decode_batch: FloatArray, decode_context: FloatArray, prefill_seqs: FloatArray,
    prefill_q: FloatArray, prefill_cached: FloatArray, times_only: bool = False,
) -> _Pass:
    validate_parallelism(ctx)
    p = _Pass(ctx, times_only)
    pp = ctx.parallelism.pp
    tokens = decode_batch + prefill_seqs * prefill_q
    batch = decode_batch + prefill_seqs
    for group in ctx.model.layer_groups:
        # a batch crosses every pipeline stage in turn: its latency sums all layers of all stages
        _group_ops(p, group, float(group.num_layers), decode_batch=decode_batch, decode_context=decode_context,
                   prefill_seqs=prefill_seqs, prefill_q=prefill_q, prefill_cached=prefill_cached)
    model = ctx.model
    # LM head (vocab-parallel over TP) on the last position of every sequence, then the logits gather
    lm_head = Linear(name="lm_head", in_features=model.hidden_size, out_features=model.vocab_size, split="column")
    p.linear("lm_head", lm_head, batch, 1.0, sixteen_bit=True)
    if ctx.parallelism.tp > 1:
        msg = batch * model.vocab_size * 4.0
        t = K.allreduce_time_s(ctx.gpu, num_gpus=ctx.parallelism.tp, message_bytes=msg / 2.0)
        p.add("gather.logits", "communication", t, lambda: (0.0, msg))
    # embedding lookup
    emb = tokens * model.hidden_size * ACT_BYTES
    p.add("embedding", "memory", K.streaming_time_s(ctx.gpu, bytes_moved=emb), lambda: (0.0, emb))
    if pp > 1:
        msg = tokens / ctx.parallelism.dp * model.hidden_size * ACT_BYTES
        link = ctx.gpu.scale_up_bandwidth_bytes_per_s
        t = (pp - 1) * K.p2p_time_s(ctx.gpu, message_bytes=msg, link_bandwidth_bytes_per_s=link)
        p.add("pp.send_recv", "communication", t, lambda: (0.0, (pp - 1) * msg))
    eng = ctx.engine
    overhead = eng.step_overhead_s + eng.per_sequence_overhead_s * batch
    p.add("engine.overhead", "overhead", overhead + 0.0 * tokens, lambda: (0.0, 0.0))
    return p


def prefill_latency_s(
    ctx: CostContext, *, prompt_tokens: ArrayLike, batch_size: ArrayLike = 1, cached_tokens: ArrayLike = 0
) -> FloatArray:
    """Latency of one prefill pass [s], vectorized over prompt lengths, batch sizes and cached prefixes.

    ``prompt_tokens`` counts the whole prompt of each sequence; ``cached_tokens`` of them are already in
    the KV cache (a prefix-cache hit or the earlier chunks of a chunked prefill) and skip computation.
    """
    return _prefill_pass(ctx, prompt_tokens, batch_size, cached_tokens, times_only=True).latency_s()


def decode_latency_s(ctx: CostContext, *, batch_size: ArrayLike, context_tokens: ArrayLike) -> FloatArray:
    """Latency of one decode step [s] for ``batch_size`` sequences of ``context_tokens`` cached tokens each."""
    return _decode_pass(ctx, batch_size, context_tokens, times_only=True).latency_s()


def _prefill_pass(ctx: CostContext, prompt_tokens: ArrayLike, batch_size: ArrayLike, cached_tokens: ArrayLike,
                  times_only: bool = False) -> _Pass:
    prompt = np.asarray(prompt_tokens, dtype=np.float64)
    batch = np.asarray(batch_size, dtype=np.float64)
    cached = np.asarray(cached_tokens, dtype=np.float64)
    q = np.maximum(prompt - cached, 1.0)
    zero = np.zeros(np.broadcast(prompt, batch, cached).shape)
    return _run_pass(ctx, decode_batch=zero, decode_context=zero, prefill_seqs=batch + zero, prefill_q=q,
                     prefill_cached=cached, times_only=times_only)


def _decode_pass(ctx: CostContext, batch_size: ArrayLike, context_tokens: ArrayLike,
                 times_only: bool = False) -> _Pass:
    batch = np.asarray(batch_size, dtype=np.float64)
    ctx_tokens = np.asarray(context_tokens, dtype=np.float64)
    zero = np.zeros(np.broadcast(batch, ctx_tokens).shape)
    return _run_pass(ctx, decode_batch=batch + zero, decode_context=ctx_tokens + zero, prefill_seqs=zero,
                     prefill_q=zero, prefill_cached=zero, times_only=times_only)


def mixed_step_latency_s(
    ctx: CostContext, *, decode_batch: ArrayLike, decode_context_tokens: ArrayLike,
    prefill_tokens: ArrayLike, prefill_cached_tokens: ArrayLike = 0, prefill_sequences: ArrayLike = 1,
) -> FloatArray:
    """One scheduler iteration of continuous batching with chunked prefill [s], vectorized.

    ``decode_batch`` running sequences (each with ``decode_context_tokens`` cached) emit one token each,
    while ``prefill_sequences`` prompt chunks of ``prefill_tokens`` new tokens in total, each after
    ``prefill_cached_tokens`` earlier tokens of its prompt, are prefilled in the same forward pass
    (Sarathi-Serve's stall-free batching; vLLM's chunked prefill). Either part may be zero.
    """
    dec = np.asarray(decode_batch, dtype=np.float64)
    dctx = np.asarray(decode_context_tokens, dtype=np.float64)
    pre = np.asarray(prefill_tokens, dtype=np.float64)
    cached = np.asarray(prefill_cached_tokens, dtype=np.float64)
    seqs = np.asarray(prefill_sequences, dtype=np.float64)
    zero = np.zeros(np.broadcast(dec, dctx, pre, cached, seqs).shape)
    seqs_on = np.where(pre > 0, np.maximum(seqs, 1.0), 0.0) + zero
    q = np.where(seqs_on > 0, pre / np.maximum(seqs_on, 1.0), 0.0)
    p = _run_pass(ctx, decode_batch=dec + zero, decode_context=dctx + zero, prefill_seqs=seqs_on, prefill_q=q,
                  prefill_cached=cached + zero, times_only=True)
    return p.latency_s()


_MIXED_KEYS = ("decode_batch", "decode_context_tokens", "prefill_tokens", "prefill_cached_tokens", "prefill_sequences")
_MIXED_DEFAULTS = {"prefill_cached_tokens": 0.0, "prefill_sequences": 1.0}


def mixed_step_latency_many(ctx: CostContext, requests: Sequence[Mapping[str, ArrayLike]]) -> list[FloatArray]:
    """:func:`mixed_step_latency_s` for several groups of arguments on one context in one pass: each group is
    broadcast to its own shape, all are flattened into one call, and the results are split back. The cost
    model's time goes mostly into per-operator work that does not grow with the array size, so batching the
    grids a search needs on one GPU costs about one call."""
    shapes, cols = [], {k: [] for k in _MIXED_KEYS}
    for req in requests:
        args = [np.asarray(req.get(k, _MIXED_DEFAULTS.get(k, 0.0)), dtype=np.float64) for k in _MIXED_KEYS]
        shape = np.broadcast(*args).shape  # np.broadcast_shapes's answer, without its Python overhead
        shapes.append(shape)
        zero = np.zeros(shape)  # adding zeros broadcasts (and copies) for a fraction of broadcast_to's overhead
        for k, a in zip(_MIXED_KEYS, args, strict=True):
            cols[k].append((a + zero).ravel())
    flat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    if flat["decode_batch"].size == 0:
        return [np.zeros(s) for s in shapes]
    t = mixed_step_latency_s(ctx, **flat)
    if t.shape != flat["decode_batch"].shape:
        t = np.broadcast_to(t, flat["decode_batch"].shape)
    out, start = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(t[start:start + n].reshape(shape))
        start += n
    return out


def _summarize(ctx: CostContext, p: _Pass, memory) -> PassCost:  # noqa: ANN001
    gpu = ctx.gpu
    peak = K._peak(gpu, p.cdtype)
    breakdown = []
    total_t = total_f = total_b = 0.0
    for op in p.ops.values():
        t, f, b = float(op.time_s), float(op.flops), float(op.bytes_moved)
        if t == 0.0 and f == 0.0 and b == 0.0:
            continue  # an operator this pass does not run (decode attention in a prefill, ...)
        total_t += t
        total_f += f
        total_b += b
        kind = op.kind
        if kind in ("compute", "memory"):
            # the bound is whichever roofline leg is longer at achievable rates
            t_c = f / (peak * gpu.efficiency.gemm_peak_fraction.get("bf16", 1.0)) if f else 0.0
            t_m = b / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.memory_bandwidth_fraction) if b else 0.0
            kind = "compute" if t_c >= t_m else "memory"
        breakdown.append(
            OperatorCost(
                name=op.name, time_s=t, flops=f, bytes_moved=b, bound=kind,
                arithmetic_intensity=f / b if b > 0 else 0.0,
                mfu=f / (t * peak) if t > 0 else 0.0,
                mbu=b / (t * gpu.hbm_bandwidth_bytes_per_s) if t > 0 else 0.0,
            )
        )
    by_kind: dict[str, float] = {}
    for op in breakdown:
        by_kind[op.bound] = by_kind.get(op.bound, 0.0) + op.time_s
    bound = max(by_kind, key=lambda k: by_kind[k])
    return PassCost(latency_s=total_t, flops=total_f, bytes_moved=total_b, bound=bound,  # type: ignore[arg-type]
                    breakdown=tuple(breakdown), memory=memory)


def _check_scalar(name: str, value: int, minimum: int) -> None:
    if int(value) != value or value < minimum:
        raise InvalidInput(f"{name} must be an integer >= {minimum}, got {value!r}", field=name)


def prefill_cost(ctx: CostContext, *, prompt_tokens: int, batch_size: int = 1, cached_tokens: int = 0) -> PassCost:
    """One prefill pass of ``batch_size`` prompts of ``prompt_tokens`` tokens, with per-operator breakdown.

    Raises ``ModelDoesNotFit`` when the weights and this batch's KV cache exceed the worker's memory.
    """
    _check_scalar("prompt_tokens", prompt_tokens, 1)
    _check_scalar("batch_size", batch_size, 1)
    _check_scalar("cached_tokens", cached_tokens, 0)
    if cached_tokens >= prompt_tokens:
        raise InvalidInput("cached_tokens must be smaller than prompt_tokens", field="cached_tokens")
    plan = memory_plan(ctx, max_context_tokens=prompt_tokens)
    _require_fit(ctx, plan, batch_size * prompt_tokens)
    return _summarize(ctx, _prefill_pass(ctx, prompt_tokens, batch_size, cached_tokens), plan)


def decode_cost(ctx: CostContext, *, batch_size: int, context_tokens: int) -> PassCost:
    """One decode step: ``batch_size`` sequences each with ``context_tokens`` tokens already cached."""
    _check_scalar("batch_size", batch_size, 1)
    _check_scalar("context_tokens", context_tokens, 1)
    plan = memory_plan(ctx, max_context_tokens=context_tokens + 1)
    _require_fit(ctx, plan, batch_size * (context_tokens + 1))
    return _summarize(ctx, _decode_pass(ctx, batch_size, context_tokens), plan)


def _require_fit(ctx: CostContext, plan, needed_tokens: int) -> None:  # noqa: ANN001
    if not plan.fits:
        raise ModelDoesNotFit(
            f"{ctx.model.id} ({ctx.weight_dtype}) needs {plan.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU "
            f"plus {plan.activation_bytes_per_gpu / 1e9:.1f} GB of activations, but {ctx.gpu.id} offers "
            f"{(plan.memory_bytes - plan.reserved_bytes_per_gpu) / 1e9:.1f} GB usable: use more GPUs (tp/pp/ep) "
            "or a narrower weight dtype",
            weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
            activation_bytes_per_gpu=plan.activation_bytes_per_gpu,
            usable_bytes_per_gpu=plan.memory_bytes - plan.reserved_bytes_per_gpu,
            kv_capacity_tokens=plan.kv_capacity_tokens,
            needed_kv_tokens=needed_tokens,
        )
    if plan.kv_capacity_tokens < needed_tokens:
        raise ModelDoesNotFit(
            f"the KV cache holds {plan.kv_capacity_tokens} tokens on this worker, but this pass needs "
            f"{needed_tokens}: use a smaller batch, more GPUs or a narrower kv_dtype",
            weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
            activation_bytes_per_gpu=plan.activation_bytes_per_gpu,
            usable_bytes_per_gpu=plan.memory_bytes - plan.reserved_bytes_per_gpu,
            kv_capacity_tokens=plan.kv_capacity_tokens,
            needed_kv_tokens=needed_tokens,
        )
