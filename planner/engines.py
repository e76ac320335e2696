"""Serving-engine profiles (vLLM, SGLang, TensorRT-LLM): host overheads and kernel-efficiency scales.

The numbers live in ``planner/calibration/engines.json``, written by ``scripts/fit_kernels.py`` (kernel
scales, custom all-reduce latency, from the H100 kernel tables) and ``scripts/fit_engines.py`` (per-step
and per-sequence host overhead, from the H100 serving benchmarks); each entry says what it was fitted on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from planner.costs.types import EngineProfile
from planner.errors import InvalidInput

ENGINE_IDS = ("vllm", "sglang", "trtllm")
#: whether each engine's default scheduler puts prompt chunks into the decodes' iterations: vLLM's V1 scheduler
#: fills each step's token budget with the running decodes first and prompt chunks after them; TensorRT-LLM's
#: in-flight batching mixes context chunks with generation; SGLang runs prefill batches apart unless
#: ``--enable-mixed-chunk`` is given (its ServerArgs default ``enable_mixed_chunk = False``). Documented
#: behaviour, not fitted
MIXES_PREFILL_WITH_DECODE = {"vllm": True, "trtllm": True, "sglang": False}
CALIBRATION_FILE = Path(__file__).resolve().parent / "calibration" / "engines.json"


def _optional(entry: Mapping[str, object], key: str) -> float | None:
    value = entry.get(key)
    return None if value is None else float(value)  # type: ignore[arg-type]


@lru_cache(maxsize=1)
def load_engine_profiles() -> Mapping[str, EngineProfile]:
    """The built-in engine profiles, keyed by engine id."""
    raw = json.loads(CALIBRATION_FILE.read_text())
    profiles = {}
    for engine_id in ENGINE_IDS:
        entry = raw[engine_id]
        profiles[engine_id] = EngineProfile(
            id=engine_id,
            step_overhead_s=float(entry["step_overhead_s"]),
            per_sequence_overhead_s=float(entry["per_sequence_overhead_s"]),
            gemm_efficiency_scale=float(entry["gemm_efficiency_scale"]),
            attention_efficiency_scale=float(entry["attention_efficiency_scale"]),
            allreduce_latency_s=(
                None if entry.get("allreduce_latency_s") is None else float(entry["allreduce_latency_s"])
            ),
            allreduce_bandwidth_fraction=_optional(entry, "allreduce_bandwidth_fraction"),
            allreduce_two_shot_bandwidth_fraction=_optional(entry, "allreduce_two_shot_bandwidth_fraction"),
            allreduce_two_shot_latency_s=float(entry.get("allreduce_two_shot_latency_s", 0.0)),
            allreduce_custom_max_bytes=_optional(entry, "allreduce_custom_max_bytes"),
            attention_fixed_s=(
                None if entry.get("attention_fixed_s") is None else float(entry["attention_fixed_s"])
            ),
            decode_attention_blocks_per=str(entry.get("decode_attention_blocks_per", "kv_head")),
            decode_attention_block_s=float(entry.get("decode_attention_block_s", 0.0)),
            moe_efficiency_scale=float(entry.get("moe_efficiency_scale", 1.0)),
            moe_overhead_s=float(entry.get("moe_overhead_s", 0.0)),
            request_overhead_s=float(entry.get("request_overhead_s", 0.0)),
            closed_loop_coherence=float(entry.get("closed_loop_coherence", 0.0)),
            mixes_prefill_with_decode=MIXES_PREFILL_WITH_DECODE[engine_id],
            fitted_on=str(entry.get("fitted_on", "")),
        )
    return MappingProxyType(profiles)


def find_engine(engine_id: str) -> EngineProfile:
    """The profile of ``engine_id`` (case-insensitive); ``InvalidInput`` naming the choices otherwise."""
    profiles = load_engine_profiles()
    key = engine_id.lower()
    if key not in profiles:
        raise InvalidInput(f"unknown engine {engine_id!r}; choose one of {', '.join(ENGINE_IDS)}", field="engine")
    return profiles[key]
