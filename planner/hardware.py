"""Accelerator specifications: the frozen ``GpuSpec`` and the loader of ``hardware_catalog/``.

Every datasheet figure carries its source. Achievable-efficiency parameters (how close real kernels
come to peak) belong to an architecture *family* (``hardware_catalog/families/<family>.json``); a GPU
whose family was never fitted inherits the parameters of the family named in that file's
``inherits_from`` and says so (``efficiency_inherited``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class EfficiencyParams:
    """Achievable-rate parameters of one architecture family (fitted by ``scripts/fit_kernels.py``).

    All fractions are of the datasheet peak. Times in seconds.
    """

    #: best fraction of dense tensor peak a large GEMM reaches, per compute dtype ("bf16", "fp8", ...)
    gemm_peak_fraction: Mapping[str, float]
    #: reduction depth at which the GEMM main loop reaches half its asymptotic efficiency [elements]
    gemm_k_half: float
    #: fraction of HBM bandwidth a streaming kernel reaches
    memory_bandwidth_fraction: float
    #: fixed per-kernel time on the GPU (launch, prologue, epilogue) [s]
    kernel_fixed_s: float
    #: output tile (rows, cols) of the GEMM kernels, for tile and wave quantization
    gemm_tile_m: int
    gemm_tile_n: int
    #: best fraction of tensor peak reached by prefill (flash) attention, per dtype
    attention_peak_fraction: Mapping[str, float]
    #: query length at which prefill attention reaches half its asymptotic efficiency [tokens]
    attention_q_half: float
    #: fraction of HBM bandwidth reached by decode attention reading the KV cache
    decode_attention_bandwidth_fraction: float
    #: fixed time of one attention kernel (prefill or decode: split-KV reduction, softmax state) [s]
    attention_fixed_s: float
    #: fraction of scale-up link bandwidth reached by ring all-reduce
    link_bandwidth_fraction: float
    #: fixed latency of one collective on the scale-up fabric [s]
    collective_latency_s: float
    #: what these numbers were fitted on (file names, row selection, script)
    fitted_on: str = ""


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator's datasheet figures (SI units) and its family's efficiency parameters."""

    id: str
    vendor: str
    name: str
    family: str
    form_factor: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    #: dense (non-sparse) peak per dtype: keys among fp32, tf32, bf16, fp16, fp8, int8, fp4
    peak_flops_per_s: Mapping[str, float]
    #: scale-up (NVLink, Infinity Fabric, ICI, ...) bandwidth per direction per GPU [bytes/s]
    scale_up_bandwidth_bytes_per_s: float
    scale_up_domain_size: int
    #: scale-out NIC bandwidth per GPU, per direction [bytes/s]
    scale_out_bandwidth_bytes_per_s: float
    #: host link (PCIe) per direction [bytes/s]
    pcie_bandwidth_bytes_per_s: float
    num_compute_units: int
    l2_cache_bytes: float
    tdp_w: float
    launch_year: int
    price_per_gpu_hour_usd: float | None
    efficiency: EfficiencyParams
    efficiency_origin: str
    efficiency_inherited: bool
    #: field name -> citation for every figure above
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def supports(self, compute_dtype: str) -> bool:
        return self.peak_flops_per_s.get(compute_dtype, 0.0) > 0.0
