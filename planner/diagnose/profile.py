"""A calibration profile: a user's measurements folded into the engine and GPU efficiency parameters.

``/v1/calibrate`` fits one (``planner.diagnose.calibrate``); every other endpoint accepts it inline as
``calibration`` and applies it to the catalog's GPU and engine entries before costing anything. The scales
multiply the catalog's fitted values, so a profile fitted on one GPU carries its *relative* correction to
another (the brief's rule: derive from the catalog, do not replace it); the overheads are absolute.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from planner.costs.types import EngineProfile
from planner.hardware import GpuSpec

#: (name, lower bound, upper bound, unit) of every parameter a profile can carry; the bounds are the fit's
#: (a factor of 4 either way for the scales, and host overheads up to what no engine shows)
PARAMETERS = (
    ("gemm_efficiency_scale", 0.25, 4.0, "×"),
    ("gemm_k_half_scale", 0.25, 4.0, "×"),
    ("memory_efficiency_scale", 0.25, 4.0, "×"),
    ("collective_efficiency_scale", 0.25, 4.0, "×"),
    ("step_overhead_s", 0.0, 0.1, "s"),
    ("request_overhead_s", 0.0, 2.0, "s"),
)
#: no kernel reaches more than its datasheet peak, whatever a fit says
MAX_FRACTION = 1.0


@dataclass(frozen=True, kw_only=True)
class CalibrationProfile:
    """Corrections to the catalog. Scales multiply the fitted fractions (1 = no change); overheads replace
    the engine's when set (None = keep the engine's)."""

    #: multiplies the asymptotic fraction of tensor peak a large GEMM reaches (every compute dtype)
    gemm_efficiency_scale: float = 1.0
    #: multiplies the reduction depth at which a GEMM reaches half its asymptotic efficiency: > 1 means
    #: small and skinny GEMMs fall further below peak (the shape of the GEMM efficiency curve)
    gemm_k_half_scale: float = 1.0
    #: multiplies the achieved fraction of HBM bandwidth (streaming kernels and decode attention)
    memory_efficiency_scale: float = 1.0
    #: multiplies the achieved fraction of scale-up link bandwidth, and divides the collective latency
    collective_efficiency_scale: float = 1.0
    #: host time of one scheduler iteration the GPU does not hide [s]
    step_overhead_s: float | None = None
    #: front-end time of one request outside the GPU iterations (HTTP, tokenization, admission) [s]
    request_overhead_s: float | None = None
    #: what the profile was fitted on (free text, from ``/v1/calibrate``)
    fitted_on: str = ""

    @property
    def is_identity(self) -> bool:
        return (self.gemm_efficiency_scale == 1.0 and self.gemm_k_half_scale == 1.0
                and self.memory_efficiency_scale == 1.0 and self.collective_efficiency_scale == 1.0
                and self.step_overhead_s is None and self.request_overhead_s is None)


def composed(first: CalibrationProfile | None, then: CalibrationProfile) -> CalibrationProfile:
    """The profile that applies ``first`` and then ``then`` (scales multiply; ``then``'s overheads win where
    it sets them): what a fit made on an already calibrated problem means against the catalog."""
    if first is None:
        return then
    return CalibrationProfile(
        gemm_efficiency_scale=first.gemm_efficiency_scale * then.gemm_efficiency_scale,
        gemm_k_half_scale=first.gemm_k_half_scale * then.gemm_k_half_scale,
        memory_efficiency_scale=first.memory_efficiency_scale * then.memory_efficiency_scale,
        collective_efficiency_scale=first.collective_efficiency_scale * then.collective_efficiency_scale,
        step_overhead_s=then.step_overhead_s if then.step_overhead_s is not None else first.step_overhead_s,
        request_overhead_s=(then.request_overhead_s if then.request_overhead_s is not None
                            else first.request_overhead_s),
        fitted_on=then.fitted_on,
    )


def calibrated_gpu(gpu: GpuSpec, profile: CalibrationProfile | None) -> GpuSpec:
    """``gpu`` with the profile's GEMM, memory and collective corrections (fractions capped at 1)."""
    if profile is None or profile.is_identity:
        return gpu
    eff = gpu.efficiency
    mem, coll = profile.memory_efficiency_scale, profile.collective_efficiency_scale
    gemm = {k: min(v * profile.gemm_efficiency_scale, MAX_FRACTION) for k, v in eff.gemm_peak_fraction.items()}
    return replace(gpu, efficiency=replace(
        eff,
        gemm_peak_fraction=MappingProxyType(gemm),
        gemm_k_half=eff.gemm_k_half * profile.gemm_k_half_scale,
        memory_bandwidth_fraction=min(eff.memory_bandwidth_fraction * mem, MAX_FRACTION),
        decode_attention_bandwidth_fraction=min(eff.decode_attention_bandwidth_fraction * mem, MAX_FRACTION),
        link_bandwidth_fraction=min(eff.link_bandwidth_fraction * coll, MAX_FRACTION),
        collective_latency_s=eff.collective_latency_s / coll,
        collective_latency_per_peer_s=eff.collective_latency_per_peer_s / coll,
        collective_pipeline_s=eff.collective_pipeline_s / coll,
    ))


def calibrated_engine(engine: EngineProfile, profile: CalibrationProfile | None) -> EngineProfile:
    """``engine`` with the profile's collective latency and overheads (the GEMM scale goes to the GPU, where
    it can be capped at the datasheet peak)."""
    if profile is None or profile.is_identity:
        return engine
    coll = profile.collective_efficiency_scale
    out = replace(
        engine,
        allreduce_latency_s=None if engine.allreduce_latency_s is None else engine.allreduce_latency_s / coll,
        allreduce_two_shot_latency_s=engine.allreduce_two_shot_latency_s / coll,
        allreduce_bandwidth_fraction=(None if engine.allreduce_bandwidth_fraction is None
                                      else engine.allreduce_bandwidth_fraction * coll),
        allreduce_two_shot_bandwidth_fraction=(None if engine.allreduce_two_shot_bandwidth_fraction is None
                                               else engine.allreduce_two_shot_bandwidth_fraction * coll),
    )
    if profile.step_overhead_s is not None:
        out = replace(out, step_overhead_s=profile.step_overhead_s)
    if profile.request_overhead_s is not None:
        out = replace(out, request_overhead_s=profile.request_overhead_s)
    return out
