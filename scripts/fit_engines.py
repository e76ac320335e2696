"""Fit each engine's per-iteration host overhead to the H100 serving benchmarks.

Usage::

    python scripts/fit_engines.py           # fit and print
    python scripts/fit_engines.py --write   # also update planner/calibration/engines.json

Data: ``../shared/data/serving_benchmarks_h100.csv`` (aggregated rows only). In a closed-loop benchmark
with ``c`` clients, every decode iteration carries ``c`` running sequences, and per iteration ``c / osl``
requests finish and are replaced, so their prefill work is spread over the iterations. The mean
inter-token latency is therefore, per iteration (the steady state of continuous batching, Little's law):

    tpot ≈ t_decode(c, isl + osl/2) + (c / osl) · t_prefill(isl) + a + b · c                    # Eq. (1)

where the two GPU terms come from the cost model (kernels fitted separately on the kernel tables) and
``a`` (per-iteration host time: scheduling, launch, sampling not hidden by the GPU) and ``b`` (per
sequence: input preparation, sampling, detokenization) are the engine's overheads, fitted by robust
least squares on the relative error. Only rows where the amortized prefill is under 30 % of the
predicted TPOT are used, so that the fit is dominated by decode iterations. Rows whose model or
parallel layout the planner does not know are skipped and counted.

Then, per engine, the TTFT terms (see ``fit_ttft``): the front-end time of a request and the share of a
fixed-length closed loop that stays in lock-step:

    ttft ≈ o + (1 − φ)·T_random(row) + φ·T_lockstep(row)                                     # Eq. (2)
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.costs import CostContext, Parallelism, decode_latency_s, prefill_latency_s  # noqa: E402
from planner.costs.types import EngineProfile  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.hardware import find_gpu, load_catalog  # noqa: E402
from planner.models import load_model_catalog  # noqa: E402

DEFAULT_CSV = ROOT.parent / "shared" / "data" / "serving_benchmarks_h100.csv"
ENGINE_FILE = ROOT / "planner" / "calibration" / "engines.json"
MAX_PREFILL_SHARE = 0.3


def weight_dtype_of(row: dict[str, str]) -> str:
    """The benchmark's weight format as a planner dtype (``gemm_quant_mode`` / ``precision``)."""
    mode = (row.get("gemm_quant_mode") or row.get("precision") or "").lower()
    if mode.startswith("fp8"):
        return "fp8"
    if "fp4" in mode:
        return "fp4"
    return "bf16"


def _int(text: str, default: int = 1) -> int:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return default


def row_context(row: dict[str, str], engine: EngineProfile) -> CostContext:
    models = load_model_catalog()
    gpu = find_gpu(load_catalog(), "h100-sxm")
    model = models.get(row["model"])
    w = weight_dtype_of(row)
    tp = _int(row["tp_size"])
    dp = _int(row.get("attention_dp_size", ""), 1)
    ep = _int(row.get("moe_ep_size", ""), 1)
    par = Parallelism(tp=tp, pp=_int(row["pp_size"]), dp=dp, ep=ep)
    return CostContext(model=model, gpu=gpu, engine=engine, weight_dtype=w, kv_dtype=model.default_kv_dtype(w),
                       parallelism=par)


def gpu_terms(row: dict[str, str], engine: EngineProfile) -> tuple[float, float]:
    """(decode GPU time per iteration, amortized prefill GPU time per iteration) [s] for a row."""
    ctx = row_context(row, engine)
    c, isl, osl = _int(row["concurrency"]), _int(row["isl"]), _int(row["osl"])
    t_dec = float(decode_latency_s(ctx, batch_size=c, context_tokens=isl + osl // 2))
    t_pre = float(prefill_latency_s(ctx, prompt_tokens=isl, batch_size=1))
    return t_dec, t_pre * c / osl


def fit_ttft(engine_id: str, current: dict, shared_dir: Path) -> dict | None:
    """Fit the engine's front-end overhead and closed-loop coherence on its aggregated rows' mean TTFT.

    Each row's TTFT is evaluated twice with the closed form (planner.serving.evaluate): with independent
    client phases (T_r) and all in lock-step groups (T_l), both without front-end time; the prediction
    ``o + (1 − φ)·T_r + φ·T_l`` (Eq. (2)) is linear in the two parameters, fitted by robust least squares on
    the relative error. Reported with leave-one-model-out errors (each model's rows predicted by a fit on
    the other models' rows).
    """
    import dataclasses

    from planner.engines import load_engine_profiles
    from planner.serving.evaluate import evaluate
    from planner.validation.datasets import serving_benchmarks
    from planner.validation.serving import RowRefused, benchmark_problem

    gpu = find_gpu(load_catalog(), "h100-sxm")
    models = load_model_catalog()
    base = load_engine_profiles()[engine_id]
    random_phase = dataclasses.replace(base, request_overhead_s=0.0, closed_loop_coherence=0.0)
    lockstep = dataclasses.replace(base, request_overhead_s=0.0, closed_loop_coherence=1.0)
    data = []
    for row in serving_benchmarks(shared_dir):
        if row["backend"] != engine_id or row["mode"] != "agg":
            continue
        try:
            model = models.get(row["model"])
            p_r = benchmark_problem(row, model=model, gpu=gpu, engines={engine_id: random_phase})
            p_l = dataclasses.replace(p_r, engine=lockstep)
            t_r, t_l = evaluate(p_r).ttft_s.mean, evaluate(p_l).ttft_s.mean
        except (RowRefused, PlannerError):
            continue
        meas = row.get("measured_ttft_s")
        if meas:
            data.append((t_r, t_l, float(meas), row["model"]))
    if len(data) < 10:
        return None
    arr = np.array([d[:3] for d in data])
    names = np.array([d[3] for d in data])

    def fit(a: np.ndarray) -> np.ndarray:
        def res(theta: np.ndarray) -> np.ndarray:
            return (theta[0] * 1e-3 + (1 - theta[1]) * a[:, 0] + theta[1] * a[:, 1]) / a[:, 2] - 1.0
        return least_squares(res, x0=[1.0, 0.2], bounds=([0.0, 0.0], [200.0, 1.0]), loss="soft_l1",
                             f_scale=0.1).x

    theta = fit(arr)
    pred = theta[0] * 1e-3 + (1 - theta[1]) * arr[:, 0] + theta[1] * arr[:, 1]
    ape = np.abs(pred / arr[:, 2] - 1) * 100
    lomo = []
    for m in sorted(set(names)):
        if np.sum(names != m) < 10:
            continue
        t = fit(arr[names != m])
        sub = arr[names == m]
        p_m = t[0] * 1e-3 + (1 - t[1]) * sub[:, 0] + t[1] * sub[:, 1]
        lomo.extend(np.abs(p_m / sub[:, 2] - 1) * 100)
    lomo_txt = (f"leave-one-model-out median {np.median(lomo):.1f}%" if lomo else
                "leave-one-model-out: only one model")
    print(f"{engine_id}: TTFT front-end {theta[0]:.1f} ms, closed-loop coherence {theta[1]:.3f}; {len(data)} rows; "
          f"in-sample median APE {np.median(ape):.1f}% p90 {np.percentile(ape, 90):.1f}%; {lomo_txt}")
    at_bound = bool(theta[0] >= 199.0)  # phi = 1 is the mechanism's own limit (a deterministic loop), not a failure
    return {"request_overhead_s": float(f"{theta[0] * 1e-3:.5g}"), "closed_loop_coherence": float(f"{theta[1]:.4g}"),
            "n": len(data), "models": sorted(set(names)), "lomo": lomo_txt, "at_bound": at_bound}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = [r for r in csv.DictReader(args.csv.open()) if r["mode"] == "agg" and r["concurrency"]]
    current = json.loads(ENGINE_FILE.read_text())
    results = {}
    for engine_id in ("vllm", "sglang", "trtllm"):
        # GPU terms without host overhead: a zero-overhead copy of the engine's kernel profile
        base = current[engine_id]
        engine = EngineProfile(id=engine_id, step_overhead_s=0.0, per_sequence_overhead_s=0.0,
                               gemm_efficiency_scale=base["gemm_efficiency_scale"],
                               attention_efficiency_scale=base["attention_efficiency_scale"],
                               allreduce_latency_s=base.get("allreduce_latency_s"))
        data, skipped = [], {}
        for r in rows:
            if r["backend"] != engine_id:
                continue
            try:
                t_dec, t_pre = gpu_terms(r, engine)
            except PlannerError as exc:
                skipped[type(exc).__name__] = skipped.get(type(exc).__name__, 0) + 1
                continue
            meas = float(r["measured_tpot_ms"]) * 1e-3
            data.append((t_dec, t_pre, _int(r["concurrency"]), meas, r["model"]))
        usable = [d for d in data if d[1] < MAX_PREFILL_SHARE * (d[0] + d[1])]
        if len(usable) < 5:
            print(f"{engine_id}: {len(usable)} decode-dominated rows: keeping the current overheads")
            results[engine_id] = None
            continue
        arr = np.array([d[:4] for d in usable], dtype=float)

        def residuals(theta: np.ndarray, arr: np.ndarray = arr) -> np.ndarray:
            pred = arr[:, 0] + arr[:, 1] + theta[0] * 1e-3 + theta[1] * 1e-6 * arr[:, 2]
            return pred / arr[:, 3] - 1.0

        fit = least_squares(residuals, x0=[1.0, 10.0], bounds=([0.0, 0.0], [20.0, 500.0]), loss="soft_l1",
                            f_scale=0.05)
        a_s, b_s = fit.x[0] * 1e-3, fit.x[1] * 1e-6
        ape = np.abs(residuals(fit.x)) * 100
        models = sorted({d[4] for d in usable})
        print(f"{engine_id}: step overhead {a_s * 1e3:.3f} ms, per sequence {b_s * 1e6:.1f} us; "
              f"{len(usable)} rows of {len(data)} ({', '.join(models)}); skipped {skipped}; "
              f"in-sample TPOT APE median {np.median(ape):.1f}% p90 {np.percentile(ape, 90):.1f}%")
        results[engine_id] = (a_s, b_s, len(usable), models)
    if results.get("sglang") is None and results.get("vllm") is not None:
        results["sglang"] = results["vllm"]
        print("sglang: takes vLLM's overheads (no decode-dominated SGLang rows)")
    ttft = {}
    for engine_id in ("vllm", "sglang", "trtllm"):
        if args.write:  # the TTFT fit evaluates with the host overheads just fitted
            _write(current, engine_id, results)
        ttft[engine_id] = fit_ttft(engine_id, current, args.csv.parent.parent)
    for engine_id, fitted in ttft.items():
        if fitted is not None and engine_id != "vllm" and fitted["at_bound"] and ttft.get("vllm"):
            # a fit that runs into its bounds says the model's structure does not hold for this engine:
            # do not ship its degenerate numbers, take vLLM's and say so
            print(f"{engine_id}: TTFT fit hit its bounds; taking vLLM's TTFT parameters instead")
            fitted = dict(ttft["vllm"], lomo=f"fit on its own rows hit the bounds ({fitted['lomo']}); vLLM's values")
            ttft[engine_id] = fitted
    if args.write:
        for engine_id, fitted in ttft.items():
            if fitted is None:
                continue
            current[engine_id]["request_overhead_s"] = fitted["request_overhead_s"]
            current[engine_id]["closed_loop_coherence"] = fitted["closed_loop_coherence"]
            # drop the previous TTFT note (and the pieces older versions of this script split off it)
            stale = ("TTFT", "leave-one-model-out", "fit on its own rows", "vLLM's values")
            parts = [p for p in current[engine_id].get("fitted_on", "").split("; ") if p and not p.startswith(stale)]
            parts.append(f"TTFT front-end and closed-loop coherence: scripts/fit_engines.py, Eq. (2), on {fitted['n']} "
                         f"aggregated rows ({', '.join(fitted['models'])}), {fitted['lomo']}")
            current[engine_id]["fitted_on"] = "; ".join(parts)
        ENGINE_FILE.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
        print("wrote", ENGINE_FILE)


def _write(current: dict, engine_id: str, results: dict) -> None:
    res = results.get(engine_id)
    if res is None:
        return
    a_s, b_s, n, models = res
    current[engine_id]["step_overhead_s"] = float(f"{a_s:.5g}")
    current[engine_id]["per_sequence_overhead_s"] = float(f"{b_s:.5g}")
    note = current[engine_id].get("fitted_on", "")
    parts = [p for p in note.split("; ") if p and not p.startswith("host overheads")
             and not p.startswith("initial values")]
    src = "vLLM's rows" if engine_id == "sglang" and results["sglang"] is results["vllm"] else "its rows"
    parts.append(f"host overheads: scripts/fit_engines.py, Eq. (1), on {n} decode-dominated aggregated "
                 f"rows ({src}) of shared/data/serving_benchmarks_h100.csv: {', '.join(models)}")
    current[engine_id]["fitted_on"] = "; ".join(parts)
    ENGINE_FILE.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    from planner.engines import load_engine_profiles
    load_engine_profiles.cache_clear()


if __name__ == "__main__":
    main()
