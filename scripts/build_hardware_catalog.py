"""Build ``hardware_catalog/<id>.json`` from the shared accelerator datasheet table.

Usage::

    python scripts/build_hardware_catalog.py [CSV] [--out DIR]

``CSV`` defaults to ``../shared/data/gpus_datasheet.csv`` beside the checkout; ``DIR`` defaults to the
package directory ``hardware_catalog/``. One file per CSV row is written, with every figure in SI units
and a source string that keeps the CSV's column, raw value and source codes (S1, S12, ...). Figures the
CSV does not carry (family, SM/CU counts, last-level cache, host link) come from ``ARCHITECTURE`` below,
each with its citation. The output is deterministic: sorted keys, exact decimal arithmetic, integers
wherever a value is whole, so re-running the script gives byte-identical files.

The family files (``hardware_catalog/families/*.json``) are not written here: the kernel fit
(``scripts/fit_kernels.py``) owns their parameters.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared/data/gpus_datasheet.csv"
DEFAULT_OUT = REPO / "hardware_catalog"
CSV_NAME = "gpus_datasheet.csv"

GIB = Decimal(2**30)
MIB = Decimal(2**20)
GIGA = Decimal(10**9)
TERA = Decimal(10**12)
BITS_PER_BYTE = Decimal(8)

#: Legend of the CSV's source codes. The CSV has no explicit legend; these names are the CSV's own
#: wording next to each code in its ``sources`` column (the full wording is copied into each file's
#: ``notes``). The build fails on a code missing here, so a new code gets a name before it ships.
SOURCE_LEGEND: Mapping[str, str] = {
    "S1": "aiconfigurator system YAMLs (e.g. h100_sxm.yaml)",
    "S2": "GenZ hardware table (e.g. A100_80GB_GPU)",
    "S3": "LLM-Viewer hardware table",
    "S4": "llm-analysis GPU configs",
    "S5": "Lightning FLOPs table",
    "S6": "torchtitan peak-FLOPs table",
    "S7": "ml-engineering accelerator tables",
    "S8": "ROCm documentation (mi250.md, mi300.md, gpu-arch-specs)",
    "S9": "scaling-book (How To Scale Your Model)",
    "S10": "Google Cloud TPU documentation (docs.cloud.google.com/tpu/docs)",
    "S11": "transcriptions of NVIDIA product spec tables",
    "S12": "vendor pages and price survey dated 2026-09-19",
    "S13": "DeepEP docs (legacy.md)",
    "S14": "trade press (H20)",
    "S15": "philisun.com and aiwiki H800 articles",
    "S16": "AMD MI250X launch spec table transcription",
    "S17": "Intel Gaudi 3 white paper, product brief and hl-smi output",
    "S18": "ORNL Lux documentation",
    "S19": "Hot Chips 2024 (MI300X)",
    "S20": "NVIDIA datasheet quotes (power)",
    "S21": "NVIDIA DGX SuperPOD reference architectures",
    "S22": "blog spec table",
    "S23": "transcriptions of NVIDIA spec pages (bridges, L4, L40S)",
    "S24": "transcription of AMD MI355X datasheet GD-176",
    "S25": "public Intel product table",
}

EXPECTED_COLUMNS = (
    "id", "vendor", "name", "form_factor", "memory_type", "hbm_capacity_gb",
    "hbm_capacity_gib_if_decimal", "hbm_capacity_gib_reported", "hbm_bandwidth_tbs", "fp32_tflops",
    "tf32_tflops_dense", "bf16_fp16_tflops_dense", "fp8_tflops_dense", "int8_tops_dense",
    "fp4_tflops_dense", "precisions_not_supported", "vendor_sheet_sparsity_convention",
    "scale_up_interconnect", "scale_up_bw_bidir_gbs", "scale_up_bw_unidir_gbs", "max_scale_up_domain",
    "scale_out_nic_gbps_per_accel", "tdp_w", "launch_year", "price_hyperscaler_usd_per_hr",
    "price_neocloud_usd_per_hr", "price_refs", "sources", "notes",
)

# --------------------------------------------------------------------------------------------------
# Figures not in the CSV, with their citations
# --------------------------------------------------------------------------------------------------
A100_WP = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"
H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)"
ADA_WP = "NVIDIA Ada GPU Architecture whitepaper (2023)"
BLACKWELL_WP = "NVIDIA Blackwell Architecture Technical Brief (2024)"
BLACKWELL_ULTRA = "NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra' (2025)"
B200_CNC = "Chips and Cheese, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling' (2025), measured"
CDNA2_WP = "AMD CDNA 2 Architecture whitepaper (2021)"
CDNA3_WP = "AMD CDNA 3 Architecture whitepaper (2023)"
CDNA4_WP = "AMD CDNA 4 Architecture whitepaper (2025)"
GAUDI2_WP = "Intel Habana Gaudi2 whitepaper (2022)"
GAUDI3_WP = "Intel Gaudi 3 AI Accelerator white paper (2024)"
TPU_DOCS = "Google Cloud TPU system architecture docs (cloud.google.com/tpu/docs/{})"
SCALING_BOOK = "scaling-book 'How to Think About TPUs' (jax-ml.github.io/scaling-book/tpus)"

#: per-direction bytes/s of an x16 host link, in the datasheets' convention (NVIDIA: "PCIe Gen5:
#: 128 GB/s" bidirectional for x16; 128b/130b encoding overhead not subtracted)
PCIE_X16_GBS = {"Gen4": 32, "Gen5": 64, "Gen6": 128}


def _pcie(gen: str, citation: str, approximate: bool = False) -> tuple[Decimal, str]:
    prefix = "approximate: " if approximate else ""
    gbs = PCIE_X16_GBS[gen]
    return (
        Decimal(gbs) * GIGA,
        f"{prefix}PCIe {gen} x16 = {gbs} GB/s per direction ({2 * gbs} GB/s bidirectional, datasheet "
        f"convention) per {citation}",
    )


def _units(count: int, what: str, citation: str, approximate: bool = False) -> tuple[int, str]:
    prefix = "approximate: " if approximate else ""
    return count, f"{prefix}{count} {what} per {citation}"


def _cache(mib: Decimal | int, what: str, citation: str, approximate: bool = False) -> tuple[Decimal, str]:
    prefix = "approximate: " if approximate else ""
    return (
        Decimal(mib) * MIB,
        f"{prefix}{mib} MiB {what} per {citation} (SRAM sizes are binary: vendor 'MB' read as MiB)",
    )


def _hopper(sms: int, sm_citation: str, l2_mib: int = 50, l2_citation: str = H100_WP,
            approximate_sms: bool = False, approximate_l2: bool = False) -> dict[str, Any]:
    return {
        "family": "hopper",
        "num_compute_units": _units(sms, "SMs", sm_citation, approximate_sms),
        "l2_cache_bytes": _cache(l2_mib, "L2", l2_citation, approximate_l2),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen5", H100_WP),
    }


_AMPERE = {
    "family": "ampere",
    "num_compute_units": _units(108, "SMs", A100_WP),
    "l2_cache_bytes": _cache(40, "L2", A100_WP),
    "pcie_bandwidth_bytes_per_s": _pcie("Gen4", A100_WP),
}
_B200_LIKE_L2 = _cache(126, "L2 (two dies)", B200_CNC)
_GB_HOST = (
    Decimal(225) * GIGA,
    "approximate: host link is NVLink-C2C to the Grace CPU, not PCIe: 900 GB/s bidirectional per "
    f"superchip ({BLACKWELL_WP}), assumed shared by its two GPUs = 225 GB/s per direction per GPU",
)
_TPU_HOST = (
    Decimal(PCIE_X16_GBS["Gen4"]) * GIGA,
    "approximate: Google does not publish the TPU host link; PCIe Gen4 x16 (32 GB/s per direction) "
    "assumed",
)


def _tpu_vmem(page: str) -> tuple[Decimal, str]:
    return (
        Decimal(128) * MIB,
        f"approximate: on-chip VMEM (software-managed; TPUs have no L2), assumed 128 MiB as on "
        f"TPU v5e per {SCALING_BOOK}; not published in {TPU_DOCS.format(page)}",
    )


#: id -> family and the figures the CSV does not carry: (value, source) pairs
ARCHITECTURE: Mapping[str, Mapping[str, Any]] = {
    "a100-40gb-sxm": _AMPERE,
    "a100-80gb-sxm": _AMPERE,
    "a100-80gb-pcie": _AMPERE,
    "h100-sxm": _hopper(132, f"{H100_WP} (H100 SXM5)"),
    "h100-pcie": _hopper(114, f"{H100_WP} (H100 PCIe)"),
    "h100-nvl": _hopper(132, "NVIDIA H100 NVL product brief (full GH100 SXM5 configuration)",
                        approximate_sms=True),
    "h200-sxm": _hopper(132, f"{H100_WP}; H200 has the H100 SXM5 compute configuration (CSV notes)"),
    "h200-nvl": _hopper(132, f"{H100_WP}; H200 NVL assumed to keep the H200 SM count",
                        approximate_sms=True),
    "h20": _hopper(78, "trade press Geekbench reading (zangshuxian.com, the CSV's S14)",
                   l2_citation=f"{H100_WP}, assumed as on H100 (same GH100 die)",
                   approximate_sms=True, approximate_l2=True),
    "h800-sxm": _hopper(132, f"{H100_WP}; H800 is the H100 SXM5 die with cut NVLink (CSV notes, S15)",
                        approximate_sms=True),
    "l4": {
        "family": "ada",
        "num_compute_units": _units(58, "SMs", "NVIDIA L4 datasheet (7,424 CUDA cores / 128 per SM)"),
        "l2_cache_bytes": _cache(48, "L2 of the AD104 chip", ADA_WP, approximate=True),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen4", "NVIDIA L4 datasheet (CSV scale_up_interconnect)"),
    },
    "l40s": {
        "family": "ada",
        "num_compute_units": _units(142, "SMs", "NVIDIA L40S datasheet (18,176 CUDA cores / 128 per SM)"),
        "l2_cache_bytes": _cache(96, "L2 of the full AD102 chip", ADA_WP, approximate=True),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen4", "NVIDIA L40S datasheet (CSV scale_up_interconnect)"),
    },
    "b200": {
        "family": "blackwell",
        "num_compute_units": _units(148, "SMs (74 of 80 per die, two dies)", B200_CNC),
        "l2_cache_bytes": _B200_LIKE_L2,
        "pcie_bandwidth_bytes_per_s": _pcie("Gen5", BLACKWELL_WP),
    },
    "gb200": {
        "family": "blackwell",
        "num_compute_units": _units(148, "SMs, assumed equal to B200", B200_CNC, approximate=True),
        "l2_cache_bytes": (_B200_LIKE_L2[0], "approximate: assumed equal to B200: " + _B200_LIKE_L2[1]),
        "pcie_bandwidth_bytes_per_s": _GB_HOST,
    },
    "b300": {
        "family": "blackwell",
        "num_compute_units": _units(160, "SMs (full Blackwell Ultra)", BLACKWELL_ULTRA, approximate=True),
        "l2_cache_bytes": (_B200_LIKE_L2[0], "approximate: assumed equal to B200: " + _B200_LIKE_L2[1]),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen6", BLACKWELL_ULTRA),
    },
    "gb300": {
        "family": "blackwell",
        "num_compute_units": _units(160, "SMs (full Blackwell Ultra)", BLACKWELL_ULTRA),
        "l2_cache_bytes": (_B200_LIKE_L2[0], "approximate: assumed equal to B200: " + _B200_LIKE_L2[1]),
        "pcie_bandwidth_bytes_per_s": _GB_HOST,
    },
    "mi250x": {
        "family": "cdna2",
        "num_compute_units": _units(220, "CUs (110 per GCD, two GCDs per OAM)", CDNA2_WP),
        "l2_cache_bytes": _cache(16, "L2 (8 MiB per GCD; CDNA 2 has no Infinity Cache)", CDNA2_WP),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen4", CDNA2_WP),
    },
    "mi300x": {
        "family": "cdna3",
        "num_compute_units": _units(304, "CUs", CDNA3_WP),
        "l2_cache_bytes": _cache(256, "AMD Infinity Cache (last level; L2 is 4 MiB per XCD)", CDNA3_WP),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen5", CDNA3_WP),
    },
    "mi325x": {
        "family": "cdna3",
        "num_compute_units": _units(304, "CUs (same CDNA 3 die as MI300X; ROCm gpu-arch-specs)", CDNA3_WP),
        "l2_cache_bytes": _cache(256, "AMD Infinity Cache (same die as MI300X)", CDNA3_WP),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen5", CDNA3_WP),
    },
    "mi355x": {
        "family": "cdna4",
        "num_compute_units": _units(256, "CUs", CDNA4_WP),
        "l2_cache_bytes": _cache(256, "AMD Infinity Cache (last level; L2 is 4 MiB per XCD)", CDNA4_WP),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen5", CDNA4_WP),
    },
    "gaudi2": {
        "family": "gaudi",
        "num_compute_units": _units(24, "Tensor Processor Cores (TPCs; matrix math runs on 2 MMEs)",
                                    GAUDI2_WP),
        "l2_cache_bytes": _cache(48, "on-die SRAM", GAUDI2_WP),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen4", GAUDI2_WP),
    },
    "gaudi3": {
        "family": "gaudi",
        "num_compute_units": _units(64, "Tensor Processor Cores (TPCs; matrix math runs on 8 MMEs)",
                                    GAUDI3_WP),
        "l2_cache_bytes": _cache(96, "on-die SRAM", GAUDI3_WP),
        "pcie_bandwidth_bytes_per_s": _pcie("Gen5", GAUDI3_WP),
    },
    "tpu-v5e": {
        "family": "tpu",
        "num_compute_units": _units(1, "TensorCore (4 MXUs)", TPU_DOCS.format("v5e")),
        "l2_cache_bytes": (
            Decimal(128) * MIB, f"128 MiB on-chip VMEM (software-managed; TPUs have no L2) per {SCALING_BOOK}"
        ),
        "pcie_bandwidth_bytes_per_s": _TPU_HOST,
    },
    "tpu-v5p": {
        "family": "tpu",
        "num_compute_units": _units(2, "TensorCores", TPU_DOCS.format("tpu7x") + " comparison table"),
        "l2_cache_bytes": _tpu_vmem("v5p"),
        "pcie_bandwidth_bytes_per_s": _TPU_HOST,
    },
    "tpu-v6e": {
        "family": "tpu",
        "num_compute_units": _units(1, "TensorCore (2 MXUs)", TPU_DOCS.format("v6e")),
        "l2_cache_bytes": _tpu_vmem("v6e"),
        "pcie_bandwidth_bytes_per_s": _TPU_HOST,
    },
    "tpu7x": {
        "family": "tpu",
        "num_compute_units": _units(2, "TensorCores (dual chiplet)", TPU_DOCS.format("tpu7x")),
        "l2_cache_bytes": _tpu_vmem("tpu7x"),
        "pcie_bandwidth_bytes_per_s": _TPU_HOST,
    },
}

#: memory decisions that the general rule (vendor "GB" of HBM = GiB) does not cover
MEMORY_OVERRIDES: Mapping[str, tuple[Decimal, str]] = {
    "l4": (
        Decimal("22.5"),
        "approximate: 24 GiB of GDDR6 (CSV hbm_capacity_gb=24, read as GiB like all DRAM die capacities) "
        "less the 1/16 the driver reserves for ECC, which is on by default on data-center cards = 22.5 GiB "
        "(nvidia-smi shows about 23034 MiB; same rule as the L40S reading in the CSV)",
    ),
    "l40s": (
        Decimal(45),
        "48 GiB of GDDR6 (CSV hbm_capacity_gb=48, read as GiB) less the 1/16 reserved for ECC (on by "
        "default) = 45 GiB, matching CSV hbm_capacity_gib_reported=44.99 (46068 MiB, aiconfigurator)",
    ),
    "tpu7x": (
        Decimal(192),
        "Google publishes 192 GiB (CSV hbm_capacity_gib_reported=192); the CSV's hbm_capacity_gb=206.2 is "
        "that value converted to decimal GB, so 192 GiB is used",
    ),
}

#: scale-out figures for rows whose CSV cell is blank: (Gb/s per accelerator, source)
SCALE_OUT_FILLS: Mapping[str, tuple[Decimal, str]] = {
    "h100-nvl": (Decimal(400), "approximate: CSV blank; assumed one 400 Gb/s ConnectX-7 NIC per GPU, as "
                 "the CSV gives for the other Hopper rows"),
    "h200-nvl": (Decimal(400), "approximate: CSV blank; assumed one 400 Gb/s ConnectX-7 NIC per GPU, as "
                 "the CSV gives for the other Hopper rows"),
    "h20": (Decimal(400), "approximate: CSV blank; assumed 400 Gb/s per GPU as in HGX H100/H800 nodes (CSV "
            "rows h100-sxm, h800-sxm)"),
    "l4": (Decimal(200), "approximate: CSV blank; aiconfigurator's 200 Gb/s placeholder (CSV notes)"),
    "mi250x": (Decimal(200), "approximate: CSV blank; assumed one 200 Gb/s NIC per OAM (four per 4-OAM "
               "node, as in OLCF Frontier nodes)"),
    "mi300x": (Decimal(400), "approximate: CSV blank (platform dependent); assumed one 400 Gb/s NIC per "
               "GPU as in 8-GPU MI300X cloud nodes"),
    "mi325x": (Decimal(400), "approximate: CSV blank (platform dependent); assumed one 400 Gb/s NIC per "
               "GPU as in 8-GPU MI300X cloud nodes"),
    "mi355x": (Decimal(400), "approximate: CSV blank; assumed one 400 Gb/s NIC per GPU (AMD Pollara 400 "
               "class)"),
    "tpu-v6e": (Decimal(100), f"CSV blank; 100 Gb/s DCN per chip = 4 x 200 Gb/s NIC per 8-chip host per "
                f"{TPU_DOCS.format('v6e')} and the tpu7x comparison table"),
    "tpu7x": (Decimal(100), f"CSV blank; 100 Gb/s DCN per chip per {TPU_DOCS.format('tpu7x')}"),
}

#: scale-up domain sizes for rows whose CSV cell is blank: (GPUs, source)
DOMAIN_FILLS: Mapping[str, tuple[int, str]] = {
    "h20": (8, "approximate: CSV blank; an 8-GPU HGX board is expected (CSV notes) but not confirmed"),
}

#: CSV column -> catalog dtype of peak_flops_per_s; fp16 is filled from the BF16/FP16 column
FLOPS_COLUMNS = (
    ("fp32", "fp32_tflops"),
    ("tf32", "tf32_tflops_dense"),
    ("bf16", "bf16_fp16_tflops_dense"),
    ("fp16", "bf16_fp16_tflops_dense"),
    ("fp8", "fp8_tflops_dense"),
    ("int8", "int8_tops_dense"),
    ("fp4", "fp4_tflops_dense"),
)

#: FP16 figures that are not the BF16 figure: (TFLOP/s or None to omit, source)
FP16_OVERRIDES: Mapping[str, tuple[Decimal | None, str]] = {
    "gaudi3": (
        Decimal(459),
        "459 TFLOP/s: FP16 on the Gaudi 3 MME runs at a quarter of BF16 (CSV notes: 'FP16 on MME is 459 "
        "(NOT equal to BF16)', S7 ml-engineering)",
    ),
}
GAUDI3_CLOCK = (
    "Whitepaper figure; parts reportedly ship at 1,600 MHz, giving about 1,677 TFLOPS (CSV notes, S7): "
    "approximate as an achievable clock"
)
#: remarks appended to one figure's source: (id, field or "peak_flops_per_s.<dtype>") -> text
REMARKS: Mapping[tuple[str, str], str] = {
    ("gaudi3", "peak_flops_per_s.bf16"): GAUDI3_CLOCK,
    ("gaudi3", "peak_flops_per_s.fp8"): GAUDI3_CLOCK,
    ("gaudi2", "peak_flops_per_s.fp16"): "Approximate: Intel publishes BF16 only; FP16 assumed at the BF16 "
    "rate (on Gaudi 3 it is a quarter of it)",
    ("mi250x", "peak_flops_per_s.fp32"): "Matrix FP32 is 95.7 TFLOPS (CSV notes)",
    ("b300", "peak_flops_per_s.int8"): "INT8 is cut on Blackwell Ultra (CSV notes; ml-engineering's 4,500 "
    "conflicts)",
    ("gb300", "peak_flops_per_s.int8"): "INT8 is cut on Blackwell Ultra (CSV notes)",
    ("mi300x", "scale_up_bandwidth_bytes_per_s"): "Aggregate over the 7 peers of a fully connected 8-GPU "
    "node; one peer link is 64 GB/s per direction (CSV notes)",
    ("mi325x", "scale_up_bandwidth_bytes_per_s"): "Aggregate over the 7 peers of a fully connected 8-GPU "
    "node; one peer link is 64 GB/s per direction (as MI300X)",
    ("mi355x", "scale_up_bandwidth_bytes_per_s"): "Aggregate over 7 peer links of 76.8 GB/s per direction "
    "(CSV notes resolve ORNL's per-direction reading as bidirectional)",
    ("mi250x", "scale_up_bandwidth_bytes_per_s"): "Conflict: ml-engineering counts 7 links = 350 GB/s "
    "(CSV notes)",
    ("h800-sxm", "scale_up_bandwidth_bytes_per_s"): "DeepEP measures about 153-158 GB/s achievable "
    "intranode (CSV notes, S13)",
    ("l4", "scale_up_bandwidth_bytes_per_s"): "No NVLink: this is the PCIe Gen4 x16 host link, as the CSV "
    "gives it",
    ("l40s", "scale_up_bandwidth_bytes_per_s"): "No NVLink: this is the PCIe Gen4 x16 host link, as the CSV "
    "gives it",
    ("l4", "scale_up_domain_size"): "The CSV counts PCIe-only cards as a domain of 1",
    ("l40s", "scale_up_domain_size"): "The CSV counts PCIe-only cards as a domain of 1",
    ("tpu-v5e", "scale_up_bandwidth_bytes_per_s"): "ICI 2D torus: per-chip total over 4 ports, neighbours "
    "only; Google doc revisions also print 1600 Gbps (CSV sources)",
    ("tpu-v6e", "scale_up_bandwidth_bytes_per_s"): "ICI 2D torus: per-chip total over 4 ports, neighbours "
    "only; some Google doc revisions print 3200 or 3584 Gbps",
    ("tpu-v5p", "scale_up_bandwidth_bytes_per_s"): "ICI 3D torus: per-chip total, neighbours only",
    ("tpu7x", "scale_up_bandwidth_bytes_per_s"): "ICI 3D torus: per-chip total, neighbours only",
    ("tpu-v5p", "scale_up_domain_size"): "Pod size; the largest schedulable slice is 6,144 chips (CSV notes)",
}

#: TPUs' MXUs compute in bf16; Google publishes no FP16 rate, so fp16 is omitted for these vendors
NO_FP16_VENDORS = ("Google",)


# --------------------------------------------------------------------------------------------------
# Conversion helpers
# --------------------------------------------------------------------------------------------------
def _dec(text: str) -> Decimal | None:
    text = text.strip()
    return Decimal(text) if text else None


def _json_number(value: Decimal | int) -> int | float:
    """An exact integer where the value is whole, else the shortest float repr (stable across runs)."""
    value = Decimal(value)
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def _figure(value: Decimal | int | None, unit: str, source: str) -> dict[str, Any]:
    return {
        "value": None if value is None else _json_number(value),
        "unit": unit,
        "source": source,
    }


def _codes(row: Mapping[str, str]) -> str:
    codes: list[str] = []
    for code in re.findall(r"\bS\d+\b", row["sources"]):
        if code not in SOURCE_LEGEND:
            raise SystemExit(f"{row['id']}: source code {code} has no entry in SOURCE_LEGEND")
        if code not in codes:
            codes.append(code)
    return "[row sources " + (",".join(codes) if codes else "in notes") + "]"


def _cite(row: Mapping[str, str], *cells: str) -> str:
    """``CSV col=raw, ... [row sources S1,S12,...]``: the row's cells in gpus_datasheet.csv."""
    shown = ", ".join(f"{col}={row[col].strip() or 'blank'}" for col in cells) or "notes"
    return f"CSV {shown} {_codes(row)}"


def _memory(row: Mapping[str, str]) -> dict[str, Any]:
    gpu_id = row["id"]
    if gpu_id in MEMORY_OVERRIDES:
        gib, reason = MEMORY_OVERRIDES[gpu_id]
        cells = ("hbm_capacity_gb", "hbm_capacity_gib_reported")
        return _figure(gib * GIB, "bytes", f"{gib} GiB: {reason}. {_cite(row, *cells)}")
    gb = _dec(row["hbm_capacity_gb"])
    reported = _dec(row["hbm_capacity_gib_reported"])
    if gb is None:
        raise SystemExit(f"{gpu_id}: hbm_capacity_gb is blank")
    reason = (
        f"{gb} GiB: vendor 'GB' of {row['memory_type'].strip()} read as GiB (capacity is a whole number "
        "of power-of-two-Gbit dies, or the enabled part of them)"
    )
    if reported is not None:
        if not Decimal("0.98") <= reported / gb <= Decimal(1):
            raise SystemExit(f"{gpu_id}: reported GiB {reported} disagrees with {gb}; add a MEMORY_OVERRIDE")
        reserve = " (less a driver reserve)" if reported < gb else ""
        reason += f"; the GiB reading {reported} agrees{reserve}"
    reason += "; the decimal reading is rejected"
    cells = ("hbm_capacity_gb", "hbm_capacity_gib_reported", "hbm_capacity_gib_if_decimal")
    return _figure(gb * GIB, "bytes", f"{reason}. {_cite(row, *cells)}")


def _peak_flops(row: Mapping[str, str]) -> dict[str, Any]:
    flops: dict[str, Any] = {}
    for dtype, column in FLOPS_COLUMNS:
        tflops = _dec(row[column])
        if dtype == "fp16":
            if row["vendor"] in NO_FP16_VENDORS:
                continue
            if row["id"] in FP16_OVERRIDES:
                value, reason = FP16_OVERRIDES[row["id"]]
                if value is not None:
                    flops[dtype] = _figure(value * TERA, "FLOP/s", f"{reason}. {_cite(row)}")
                continue
        if tflops is None:
            continue
        what = "dense TOPS" if dtype == "int8" else "dense TFLOPS"
        if dtype == "fp32":
            vector = "FP32 is non-tensor" in row["vendor_sheet_sparsity_convention"]
            what = "TFLOPS, non-tensor (vector) FP32" if vector else "TFLOPS FP32 as listed"
        if dtype == "fp16":
            what = "dense TFLOPS (the CSV's BF16/FP16 column)"
        source = f"{tflops} {what}. {_cite(row, column)}"
        flops[dtype] = _figure(tflops * TERA, "FLOP/s", source)
    if not flops:
        raise SystemExit(f"{row['id']}: no peak FLOP/s figure")
    return flops


def _scale_up(row: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    unidir = _dec(row["scale_up_bw_unidir_gbs"])
    if unidir is None:
        raise SystemExit(f"{row['id']}: scale_up_bw_unidir_gbs is blank")
    link = row["scale_up_interconnect"].strip()
    bandwidth = _figure(
        unidir * GIGA,
        "bytes/s",
        f"{unidir} GB/s per direction over '{link}'. {_cite(row, 'scale_up_bw_unidir_gbs')}",
    )
    domain_text = _dec(row["max_scale_up_domain"])
    if domain_text is None:
        size, reason = DOMAIN_FILLS[row["id"]]
        domain = _figure(size, "count", f"{size} GPUs: {reason}. {_cite(row, 'max_scale_up_domain')}")
    else:
        what = "chips" if row["vendor"] == "Google" else "GPUs"
        domain = _figure(domain_text, "count", f"{domain_text} {what}. {_cite(row, 'max_scale_up_domain')}")
    return bandwidth, domain


def _scale_out(row: Mapping[str, str]) -> dict[str, Any]:
    gbps = _dec(row["scale_out_nic_gbps_per_accel"])
    if gbps is None:
        gbps, reason = SCALE_OUT_FILLS[row["id"]]
        text = f"{gbps} Gb/s / 8 per direction: {reason}"
    else:
        text = f"{gbps} Gb/s NIC per accelerator / 8, per direction"
    source = f"{text}. {_cite(row, 'scale_out_nic_gbps_per_accel')}"
    return _figure(gbps * GIGA / BITS_PER_BYTE, "bytes/s", source)


def _price(row: Mapping[str, str]) -> dict[str, Any]:
    neocloud = _dec(row["price_neocloud_usd_per_hr"])
    hyperscaler = _dec(row["price_hyperscaler_usd_per_hr"])
    refs = row["price_refs"].strip() or "none"
    cells = ("price_neocloud_usd_per_hr", "price_hyperscaler_usd_per_hr")
    if neocloud is not None:
        value, text = neocloud, "neocloud on-demand (preferred)"
    elif hyperscaler is not None:
        value, text = hyperscaler, "hyperscaler on-demand (no neocloud price)"
    else:
        value, text = None, "no public on-demand price"
    return _figure(value, "USD/h", f"{text}; price_refs: {refs}. {_cite(row, *cells)}")


def build_entry(row: Mapping[str, str]) -> dict[str, Any]:
    """The catalog JSON object of one CSV row."""
    gpu_id = row["id"].strip()
    if gpu_id not in ARCHITECTURE:
        raise SystemExit(f"{gpu_id}: no ARCHITECTURE entry (family, compute units, cache, host link)")
    arch = ARCHITECTURE[gpu_id]
    bandwidth_tbs = _dec(row["hbm_bandwidth_tbs"])
    tdp = _dec(row["tdp_w"])
    year = _dec(row["launch_year"])
    if bandwidth_tbs is None or year is None:
        raise SystemExit(f"{gpu_id}: hbm_bandwidth_tbs and launch_year are required")
    scale_up, domain = _scale_up(row)
    figures: dict[str, Any] = {
        "memory_bytes": _memory(row),
        "hbm_bandwidth_bytes_per_s": _figure(
            bandwidth_tbs * TERA,
            "bytes/s",
            f"{bandwidth_tbs} TB/s (1e12 bytes/s). {_cite(row, 'hbm_bandwidth_tbs')}",
        ),
        "peak_flops_per_s": _peak_flops(row),
        "scale_up_bandwidth_bytes_per_s": scale_up,
        "scale_up_domain_size": domain,
        "scale_out_bandwidth_bytes_per_s": _scale_out(row),
        "tdp_w": _figure(
            tdp,
            "W",
            (f"{tdp} W" if tdp is not None else "not published by the vendor") + f". {_cite(row, 'tdp_w')}",
        ),
        "launch_year": _figure(year, "year", _cite(row, "launch_year")),
        "price_per_gpu_hour_usd": _price(row),
    }
    for name in ("num_compute_units", "l2_cache_bytes", "pcie_bandwidth_bytes_per_s"):
        value, source = arch[name]
        unit = {"num_compute_units": "count", "l2_cache_bytes": "bytes"}.get(name, "bytes/s")
        figures[name] = _figure(value, unit, source)
    for (remark_id, key), remark in REMARKS.items():
        if remark_id != gpu_id:
            continue
        name, _, dtype = key.partition(".")
        figure = figures[name][dtype] if dtype else figures[name]
        figure["source"] = f"{figure['source']}. {remark}"
    notes = row["notes"].strip()
    return {
        "id": gpu_id,
        "vendor": row["vendor"].strip(),
        "name": row["name"].strip(),
        "family": arch["family"],
        "form_factor": row["form_factor"].strip(),
        "notes": (
            f"{notes} FLOP/s convention: {row['vendor_sheet_sparsity_convention'].strip()}. "
            f"Not supported: {row['precisions_not_supported'].strip() or 'none listed'}. "
            f"CSV sources: {row['sources'].strip()}"
        ),
        "figures": figures,
    }


def render(entry: Mapping[str, Any]) -> str:
    """Deterministic JSON text of one entry."""
    return json.dumps(entry, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def read_rows(csv_path: Path) -> list[dict[str, str]]:
    with csv_path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [col for col in EXPECTED_COLUMNS if col not in (reader.fieldnames or ())]
        if missing:
            raise SystemExit(f"{csv_path}: missing columns {missing}")
        rows = list(reader)
    ids = [row["id"].strip() for row in rows]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"{csv_path}: duplicate ids")
    unknown = sorted(set(ARCHITECTURE) - set(ids))
    if unknown:
        raise SystemExit(f"{csv_path}: ARCHITECTURE lists ids absent from the CSV: {unknown}")
    return rows


def build(csv_path: Path, out_dir: Path) -> list[Path]:
    """Write one ``<id>.json`` per CSV row into ``out_dir``; returns the written paths (sorted)."""
    rows = read_rows(csv_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for row in sorted(rows, key=lambda r: r["id"]):
        entry = build_entry(row)
        path = out_dir / f"{entry['id']}.json"
        path.write_text(render(entry), encoding="utf-8", newline="\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV, help="gpus_datasheet.csv")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args(argv)
    written = build(args.csv, args.out)
    print(f"wrote {len(written)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
