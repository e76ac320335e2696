"""Fit the Hopper family's efficiency parameters and the engines' kernel scales to the H100 kernel tables.

Usage::

    python scripts/fit_kernels.py            # fit, print the parameters and the in-sample errors
    python scripts/fit_kernels.py --write    # also rewrite hardware_catalog/families/hopper.json and the
                                             # kernel fields of planner/calibration/engines.json

Data: ``../shared/data/kernels/h100_sxm/`` (TensorRT-LLM 1.3.0rc20 and vLLM 0.24.0 kernel timings, mean
of CUDA-graph replays). Only the *fit* rows (``~holdout_mask``) are used; the held-out rows are scored by
``scripts/accuracy_report.py``. Each stage fits a few physically meaningful parameters by robust least
squares on ``log(predicted / measured)`` (soft-L1 loss, Powell's method), keeping the
parameters of earlier stages fixed:

1. GEMM (bf16 from both engines, fp8 per-tensor from TensorRT-LLM): peak fractions per dtype, the
   main-loop ``k_half``, the streaming bandwidth fraction and the fixed kernel time.
2. Prefill (context) attention, bf16, both engines: attention peak fraction, ``q_half``, fixed time.
3. Decode (generation) attention, bf16 KV: the KV-streaming bandwidth fraction.
4. nccl-tests all-reduce (fp16, NCCL 2.27/2.29): NCCL's pipelined ring (``kernels.nccl_allreduce_time_s``):
   bus bandwidth fraction at 2 GPUs and its growth with n, fixed latency and its part per peer, pipeline
   fill per peer.
5. Per engine: a GEMM and an attention efficiency multiplier against the family (vLLM, TensorRT-LLM;
   SGLang's kernels are vLLM's FlashAttention/cuBLAS family and it has no tables, so it takes vLLM's),
   a grouped-GEMM multiplier and a fixed routing/permutation time for the fused MoE kernels (bf16,
   balanced routing), and each engine's CUDA-graph custom all-reduce (``fit_custom_allreduce``): its latency
   (median of messages <= 64 KiB, whose time is latency-dominated), its one-shot and two-shot kernels'
   bandwidth fractions and the two-shot kernel's extra latency, and the message size above which the
   engine hands over to NCCL.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.costs import kernels as K  # noqa: E402
from planner.hardware import EfficiencyParams, GpuSpec, find_gpu, load_catalog  # noqa: E402
from planner.validation.datasets import holdout_mask, kernel_table  # noqa: E402

DEFAULT_SHARED = ROOT.parent / "shared"
FAMILY_FILE = ROOT / "hardware_catalog" / "families" / "hopper.json"
ENGINE_FILE = ROOT / "planner" / "calibration" / "engines.json"
TABLES = [
    ("trtllm", "gemm", "bf16"), ("vllm", "gemm", "bf16"), ("trtllm", "gemm", "fp8"),
    ("trtllm", "context_attention", "bf16"), ("vllm", "context_attention", "bf16"),
    ("trtllm", "generation_attention", "bf16"), ("vllm", "generation_attention", "bf16"),
    ("nccl", "all_reduce", "fp16"), ("trtllm", "custom_allreduce", "bf16"), ("vllm", "custom_allreduce", "bf16"),
    ("sglang", "custom_allreduce", "bf16"), ("trtllm", "moe", "bf16"), ("vllm", "moe", "bf16"),
]
MAX_FIT_ROWS = 12000  # per table, deterministic subsample of the fit rows (keeps the fit under a minute)


def _fit_rows(table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = ~holdout_mask(table)
    idx = np.flatnonzero(keep)
    if idx.size > MAX_FIT_ROWS:
        idx = idx[np.linspace(0, idx.size - 1, MAX_FIT_ROWS).astype(int)]
    return {k: v[idx] for k, v in table.items()}


def _with(gpu: GpuSpec, **changes: object) -> GpuSpec:
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, **changes))


def _log_ratio(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(pred, 1e-12) / meas)


class _Result:
    def __init__(self, x: np.ndarray) -> None:
        self.x = x


def _robust_fit(residuals, x0, lo, hi) -> _Result:  # noqa: ANN001
    """Minimize the soft-L1 loss of log-ratio residuals with Powell's derivative-free method.

    The cost model has discrete steps (tile, wave and split-K counts), so finite-difference Jacobians
    are zero almost everywhere; Powell's line searches do not need them.
    """
    lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)

    def loss(x: np.ndarray) -> float:
        r = residuals(np.clip(x, lo_a, hi_a)) / 0.1
        return float(np.sum(2.0 * (np.sqrt(1.0 + r * r) - 1.0)))

    res = minimize(loss, np.asarray(x0, dtype=float), method="Powell", bounds=list(zip(lo_a, hi_a)),
                   options={"xtol": 1e-3, "ftol": 1e-6, "maxfev": 4000})
    return _Result(np.clip(res.x, lo_a, hi_a))


def _ape(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    e = np.abs(pred / meas - 1.0) * 100
    return float(np.median(e)), float(np.percentile(e, 90))


#: GEMMs are fitted on the shapes transformer layers have: both weight dimensions >= 256
MIN_WEIGHT_DIM = 256


def _llm_shapes(t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = (t["n"] >= MIN_WEIGHT_DIM) & (t["k"] >= MIN_WEIGHT_DIM)
    return {name: col[keep] for name, col in t.items()}


def fit_gemm(gpu: GpuSpec, tables: dict[str, dict[str, np.ndarray]]) -> tuple[GpuSpec, dict]:
    """bf16 first (shape parameters shared by every dtype), then the fp8 peak fraction alone."""
    bf16 = [_llm_shapes(tables[("trtllm", "gemm", "bf16")]), _llm_shapes(tables[("vllm", "gemm", "bf16")])]
    fp8 = _llm_shapes(tables[("trtllm", "gemm", "fp8")])

    def model(theta: np.ndarray) -> GpuSpec:
        f_bf16, k_half, f_mem, fixed_us, p = theta
        return _with(gpu, gemm_peak_fraction={"bf16": f_bf16, "fp16": f_bf16},
                     gemm_k_half=k_half, memory_bandwidth_fraction=f_mem, kernel_fixed_s=fixed_us * 1e-6,
                     overlap_exponent=p)

    def residuals(theta: np.ndarray) -> np.ndarray:
        g = model(theta)
        out = []
        for t in bf16:
            pred = K.gemm_time_s(g, m=t["m"], n=t["n"], k=t["k"], compute_dtype="bf16", weight_bytes_per_element=2)
            out.append(_log_ratio(pred, t["latency_ms"] * 1e-3))
        return np.concatenate(out)

    res = _robust_fit(residuals, [0.85, 64.0, 0.8, 3.0, 3.0], [0.3, 1.0, 0.3, 0.5, 1.0],
                      [1.0, 2048.0, 1.0, 30.0, 12.0])
    g = model(res.x)

    def r_fp8(theta: np.ndarray) -> np.ndarray:
        g8 = _with(g, gemm_peak_fraction={**g.efficiency.gemm_peak_fraction, "fp8": theta[0]})
        pred = K.gemm_time_s(g8, m=fp8["m"], n=fp8["n"], k=fp8["k"], compute_dtype="fp8", weight_bytes_per_element=1)
        return _log_ratio(pred, fp8["latency_ms"] * 1e-3)

    f8 = _robust_fit(r_fp8, [0.7], [0.2], [1.0]).x[0]
    g = _with(g, gemm_peak_fraction={**g.efficiency.gemm_peak_fraction, "fp8": f8, "int8": f8, "fp4": f8})
    names = ["f_bf16", "k_half", "f_mem", "fixed_us", "overlap_exponent", "f_fp8"]
    return g, {"theta": [*res.x.tolist(), f8], "names": names}


def _ctx_attention_pred(g: GpuSpec, t: dict[str, np.ndarray], scale: float = 1.0) -> np.ndarray:
    return K.prefill_attention_time_s(
        g, batch_size=t["batch_size"], q_tokens=t["seq_len"], cached_tokens=0, num_heads=t["num_heads"],
        num_kv_heads=t["num_key_value_heads"], head_dim=t["head_dim"], sliding_window=t["window_size"],
        kv_bytes_per_element=2.0, efficiency_scale=scale,
    )


#: how each engine's decode-attention kernel assigns thread blocks (see decode_attention_time_s): FA3 in
#: vLLM packs the query heads of a GQA group into one block; TensorRT-LLM's XQA/MMHA flow is per query head
BLOCKS_PER = {"vllm": "kv_head", "sglang": "kv_head", "trtllm": "q_head"}


def _gen_attention_pred(g: GpuSpec, t: dict[str, np.ndarray], scale: float = 1.0, block_s: float = 0.0,
                        blocks_per: str = "kv_head") -> np.ndarray:
    return K.decode_attention_time_s(
        g, batch_size=t["batch_size"], context_tokens=t["kv_cached"] + 1, num_heads=t["num_heads"],
        num_kv_heads=t["num_key_value_heads"], head_dim=t["head_dim"], sliding_window=t["window_size"],
        kv_bytes_per_element=2.0, efficiency_scale=scale, block_s=block_s, blocks_per=blocks_per,
    )


def _bf16_attention(t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = (t["kv_cache_dtype"] == "bfloat16") & (t["attn_dtype"] == "bfloat16")
    return {k: v[keep] for k, v in t.items()}


def fit_attention(gpu: GpuSpec, tables: dict) -> tuple[GpuSpec, dict]:
    ctx = [_bf16_attention(tables[(e, "context_attention", "bf16")]) for e in ("trtllm", "vllm")]
    gen = [_bf16_attention(tables[(e, "generation_attention", "bf16")]) for e in ("trtllm", "vllm")]

    def model(theta: np.ndarray) -> GpuSpec:
        f_att, q_half, fixed_us, f_dec, softmax_dims = theta
        return _with(gpu, attention_peak_fraction={"bf16": f_att, "fp16": f_att},
                     attention_q_half=q_half, attention_fixed_s=fixed_us * 1e-6,
                     decode_attention_bandwidth_fraction=f_dec, attention_softmax_dims=softmax_dims)

    def residuals(theta: np.ndarray) -> np.ndarray:
        g = model(theta)
        out = [_log_ratio(_ctx_attention_pred(g, t), t["latency_ms"] * 1e-3) for t in ctx]
        out += [_log_ratio(_gen_attention_pred(g, t), t["latency_ms"] * 1e-3) for t in gen]
        return np.concatenate(out)

    res = _robust_fit(residuals, [0.6, 256.0, 8.0, 0.7, 64.0], [0.1, 1.0, 0.5, 0.2, 1.0],
                      [1.2, 16384.0, 60.0, 1.0, 1024.0])
    names = ["f_att", "q_half", "fixed_us", "f_dec", "softmax_dims"]
    return model(res.x), {"theta": res.x.tolist(), "names": names}


def fit_allreduce(gpu: GpuSpec, nccl: dict[str, np.ndarray]) -> tuple[GpuSpec, dict]:
    """NCCL's pipelined ring (``kernels.nccl_allreduce_time_s``): the bus bandwidth fraction at 2 GPUs and
    its growth exponent with n, the fixed latency and its part per peer, the pipeline fill per peer."""
    keep = (nccl["collective"] == "all_reduce") & (nccl["nccl_dtype"] == "half")
    t = {k: v[keep] for k, v in nccl.items()}
    max_gpus = int(np.max(t["num_gpus"]))

    def model(theta: np.ndarray) -> GpuSpec:
        f_link, lat_us, per_peer_us, pipe_us, exponent = theta
        return _with(gpu, link_bandwidth_fraction=f_link, collective_latency_s=lat_us * 1e-6,
                     collective_latency_per_peer_s=per_peer_us * 1e-6, collective_pipeline_s=pipe_us * 1e-6,
                     link_bandwidth_exponent=exponent, collective_max_gpus=max_gpus)

    def residuals(theta: np.ndarray) -> np.ndarray:
        g = model(theta)
        pred = K.nccl_allreduce_time_s(g, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])
        return _log_ratio(pred, t["latency_ms"] * 1e-3)

    res = _robust_fit(residuals, [0.7, 5.0, 0.5, 1.0, 0.3], [0.1, 0.0, 0.0, 0.0, 0.01],
                      [1.0, 100.0, 20.0, 100.0, 1.0])
    return model(res.x), {"theta": res.x.tolist(),
                          "names": ["f_link", "latency_us", "per_peer_us", "pipeline_us", "exponent"]}


#: message sizes tried as the largest a custom all-reduce takes before its engine hands over to NCCL
CUSTOM_SWITCH_BYTES = tuple(float(2**k) for k in range(20, 27))


def fit_custom_allreduce(gpu: GpuSpec, table: dict[str, np.ndarray], graph: np.ndarray) -> dict[str, float]:
    """An engine's CUDA-graph custom all-reduce (``kernels.allreduce_time_s``): its latency (median of the
    messages <= 64 KiB, latency-dominated); the one-shot and two-shot kernels' bandwidth fractions and the
    two-shot kernel's extra latency, fitted on the messages up to a switch size; and the switch size (of
    ``CUSTOM_SWITCH_BYTES``) whose regimes fit the whole table best: median plus 0.3 × p90 of the absolute
    error, so the tail counts."""
    n, size = table["num_gpus"][graph], table["message_bytes"][graph]
    meas = table["latency_ms"][graph] * 1e-3
    lat = float(np.median(meas[size <= 65536]))

    def predict(theta: np.ndarray, switch: float, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        return K.allreduce_time_s(gpu, num_gpus=n[rows], message_bytes=size[rows], latency_s=lat,
                                  custom_bandwidth_fraction=theta[0], custom_max_bytes=switch,
                                  two_shot_bandwidth_fraction=theta[1], two_shot_latency_s=theta[2] * 1e-6)

    best: tuple[float, np.ndarray, float] | None = None
    for switch in CUSTOM_SWITCH_BYTES:
        below = size <= switch
        def residuals(x: np.ndarray, below=below, switch=switch) -> np.ndarray:
            return _log_ratio(predict(x, switch, below), meas[below])

        theta = _robust_fit(residuals, [0.6, 0.7, 5.0], [0.05, 0.05, 0.0], [1.5, 1.5, 50.0]).x
        err = np.abs(predict(theta, switch) / meas - 1.0)
        score = float(np.median(err) + 0.3 * np.percentile(err, 90))
        if best is None or score < best[0]:
            best = (score, theta, switch)
    assert best is not None
    _, theta, switch = best
    return {"allreduce_latency_s": round(lat, 8), "allreduce_bandwidth_fraction": round(float(theta[0]), 4),
            "allreduce_two_shot_bandwidth_fraction": round(float(theta[1]), 4),
            "allreduce_two_shot_latency_s": round(float(theta[2]) * 1e-6, 9),
            "allreduce_custom_max_bytes": switch}


def _moe_pred(g: GpuSpec, t: dict[str, np.ndarray], scale: float, overhead_s: float) -> np.ndarray:
    return K.moe_time_s(
        g, num_tokens=t["num_tokens"], hidden_size=t["hidden_size"], intermediate_size=t["inter_size"],
        experts_per_token=t["topk"], num_experts=t["num_experts"], moe_tp=t["moe_tp_size"],
        moe_ep=t["moe_ep_size"], compute_dtype="bf16", weight_bytes_per_element=2.0, efficiency_scale=scale,
        overhead_s=overhead_s,
    )


def fit_engine_scales(gpu: GpuSpec, tables: dict) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for engine in ("trtllm", "vllm"):
        g_tab = tables[(engine, "gemm", "bf16")]
        big = g_tab["m"] >= 256  # the multiplier acts on compute; fit it where compute binds

        def r_gemm(theta: np.ndarray, t=g_tab, big=big) -> np.ndarray:
            pred = K.gemm_time_s(gpu, m=t["m"][big], n=t["n"][big], k=t["k"][big], compute_dtype="bf16",
                                 weight_bytes_per_element=2, efficiency_scale=theta[0])
            return _log_ratio(pred, t["latency_ms"][big] * 1e-3)

        s_gemm = _robust_fit(r_gemm, [1.0], [0.5], [1.5]).x[0]
        a_tab = _bf16_attention(tables[(engine, "context_attention", "bf16")])
        d_tab = _bf16_attention(tables[(engine, "generation_attention", "bf16")])

        def r_att(theta: np.ndarray, a=a_tab, d=d_tab, per=BLOCKS_PER[engine]) -> np.ndarray:
            g = _with(gpu, attention_fixed_s=theta[1] * 1e-6)
            return np.concatenate([
                _log_ratio(_ctx_attention_pred(g, a, theta[0]), a["latency_ms"] * 1e-3),
                _log_ratio(_gen_attention_pred(g, d, theta[0], theta[2] * 1e-6, per), d["latency_ms"] * 1e-3),
            ])

        s_att, fixed_att, block_us = _robust_fit(
            r_att, [1.0, gpu.efficiency.attention_fixed_s * 1e6, 1.0], [0.5, 0.5, 0.0], [1.5, 60.0, 20.0]).x
        moe = tables[(engine, "moe", "bf16")]
        moe = {k: v[moe["distribution"] == "balanced"] for k, v in moe.items()}

        def r_moe(theta: np.ndarray, t=moe, s_gemm=s_gemm) -> np.ndarray:
            return _log_ratio(_moe_pred(gpu, t, s_gemm * theta[0], theta[1] * 1e-6), t["latency_ms"] * 1e-3)

        s_moe, moe_us = _robust_fit(r_moe, [0.8, 10.0], [0.2, 0.0], [1.5, 200.0]).x
        ar = tables[(engine, "custom_allreduce", "bf16")]
        graph = np.array(["graph" in str(b) or str(b) == "trtllm" for b in ar.get("backend", ar.get(
            "implementation", np.array(["trtllm"] * len(ar["latency_ms"]))))])
        out[engine] = {"gemm_efficiency_scale": round(float(s_gemm), 4),
                       "attention_efficiency_scale": round(float(s_att), 4),
                       "attention_fixed_s": round(float(fixed_att) * 1e-6, 9),
                       "decode_attention_block_s": round(float(block_us) * 1e-6, 9),
                       "decode_attention_blocks_per": BLOCKS_PER[engine],
                       "moe_efficiency_scale": round(float(s_moe), 4),
                       "moe_overhead_s": round(float(moe_us) * 1e-6, 9),
                       **fit_custom_allreduce(gpu, ar, graph)}
    sg = tables.get(("sglang", "custom_allreduce", "bf16"))
    # SGLang's decode attention is FlashInfer/FA3 like vLLM's: it takes vLLM's attention fit
    out["sglang"] = dict(out["vllm"])
    if sg is not None:
        graph = np.array(["graph" in str(b) for b in sg["backend"]])
        out["sglang"].update(fit_custom_allreduce(gpu, sg, graph))
    return out


def report(gpu: GpuSpec, tables: dict, engines: dict) -> None:
    t = tables[("nccl", "all_reduce", "fp16")]
    t = {k: v[(t["collective"] == "all_reduce") & (t["nccl_dtype"] == "half")] for k, v in t.items()}
    pred = K.nccl_allreduce_time_s(gpu, num_gpus=t["num_gpus"], message_bytes=t["message_bytes"])
    print("  fit-rows nccl all_reduce fp16: median/p90 APE = %.1f / %.1f %%"
          % _ape(pred, t["latency_ms"] * 1e-3))
    for e in ("trtllm", "vllm", "sglang"):
        t = tables[(e, "custom_allreduce", "bf16")]
        kind = t.get("backend", t.get("implementation"))
        graph = np.array(["graph" in str(b) or str(b) == "trtllm" for b in kind])
        p = engines[e]
        pred = K.allreduce_time_s(gpu, num_gpus=t["num_gpus"][graph], message_bytes=t["message_bytes"][graph],
                                  latency_s=p["allreduce_latency_s"],
                                  custom_bandwidth_fraction=p["allreduce_bandwidth_fraction"],
                                  custom_max_bytes=p["allreduce_custom_max_bytes"],
                                  two_shot_bandwidth_fraction=p["allreduce_two_shot_bandwidth_fraction"],
                                  two_shot_latency_s=p["allreduce_two_shot_latency_s"])
        print(f"  fit-rows {e} custom all-reduce (CUDA graph): %.1f / %.1f %%"
              % _ape(pred, t["latency_ms"][graph] * 1e-3))
    for key in (("trtllm", "gemm", "bf16"), ("vllm", "gemm", "bf16"), ("trtllm", "gemm", "fp8")):
        t = tables[key]
        dt = "fp8" if key[2] == "fp8" else "bf16"
        pred = K.gemm_time_s(gpu, m=t["m"], n=t["n"], k=t["k"], compute_dtype=dt,
                             weight_bytes_per_element=1 if dt == "fp8" else 2)
        print(f"  fit-rows {key}: median/p90 APE = %.1f / %.1f %%" % _ape(pred, t["latency_ms"] * 1e-3))
    for e in ("trtllm", "vllm"):
        t = _bf16_attention(tables[(e, "context_attention", "bf16")])
        p = engines[e]
        g = _with(gpu, attention_fixed_s=p["attention_fixed_s"])
        pred = _ctx_attention_pred(g, t, p["attention_efficiency_scale"])
        print(f"  fit-rows {e} context attention: %.1f / %.1f %%" % _ape(pred, t["latency_ms"] * 1e-3))
        t = _bf16_attention(tables[(e, "generation_attention", "bf16")])
        p = engines[e]
        g = _with(gpu, attention_fixed_s=p["attention_fixed_s"])
        pred = _gen_attention_pred(g, t, p["attention_efficiency_scale"], p["decode_attention_block_s"],
                                   p["decode_attention_blocks_per"])
        print(f"  fit-rows {e} generation attention: %.1f / %.1f %%" % _ape(pred, t["latency_ms"] * 1e-3))


def _params_json(eff: EfficiencyParams, fitted_on: str) -> dict:
    d = dataclasses.asdict(eff)
    d["fitted_on"] = fitted_on

    def rnd(x: object) -> object:
        if isinstance(x, float):
            return float(f"{x:.5g}")
        if isinstance(x, dict):
            return {k: rnd(v) for k, v in sorted(x.items())}
        return x

    return {k: rnd(v) for k, v in d.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tables = {key: _fit_rows(kernel_table(args.shared, key)) for key in TABLES}
    gpu = find_gpu(load_catalog(), "h100-sxm")
    gpu, gemm = fit_gemm(gpu, tables)
    print("GEMM:", dict(zip(gemm["names"], np.round(gemm["theta"], 4))))
    gpu, att = fit_attention(gpu, tables)
    print("attention:", dict(zip(att["names"], np.round(att["theta"], 4))))
    gpu, ar = fit_allreduce(gpu, tables[("nccl", "all_reduce", "fp16")])
    print("all-reduce:", dict(zip(ar["names"], np.round(ar["theta"], 4))))
    engines = fit_engine_scales(gpu, tables)
    print("engines:", engines)
    report(gpu, tables, engines)
    for e in ("trtllm", "vllm"):
        t = tables[(e, "moe", "bf16")]
        t = {k: v[t["distribution"] == "balanced"] for k, v in t.items()}
        p = engines[e]
        pred = _moe_pred(gpu, t, p["gemm_efficiency_scale"] * p["moe_efficiency_scale"], p["moe_overhead_s"])
        print(f"  fit-rows {e} moe bf16 balanced: %.1f / %.1f %%" % _ape(pred, t["latency_ms"] * 1e-3))
    if args.write:
        fitted_on = (
            "scripts/fit_kernels.py on the fit rows (~holdout_mask) of shared/data/kernels/h100_sxm: GEMM bf16 "
            "(TensorRT-LLM 1.3.0rc20 + vLLM 0.24.0), GEMM fp8 (TensorRT-LLM), context and generation attention "
            "bf16 (both engines), nccl-tests all_reduce fp16 (NCCL 2.27.3/2.29.2); H100 SXM only"
        )
        family = {"family": "hopper", **_params_json(gpu.efficiency, fitted_on)}
        FAMILY_FILE.write_text(json.dumps(family, indent=2, sort_keys=True) + "\n")
        current = json.loads(ENGINE_FILE.read_text())
        for engine, fields in engines.items():
            current[engine].update(fields)
            note = current[engine].get("fitted_on", "")
            kern = ("kernel scales and custom all-reduce: scripts/fit_kernels.py on shared/data/kernels/h100_sxm"
                    + (" (SGLang has no GEMM/attention tables: takes vLLM's scales)" if engine == "sglang" else ""))
            parts = [p for p in note.split("; ") if p and not p.startswith("kernel scales") and
                     not p.startswith("initial values")]
            current[engine]["fitted_on"] = "; ".join([kern, *parts])
        ENGINE_FILE.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
        print("wrote", FAMILY_FILE, ENGINE_FILE)


if __name__ == "__main__":
    main()
