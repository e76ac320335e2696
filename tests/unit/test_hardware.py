"""The hardware catalog: built-in files against the shared datasheet, the loader's validation, lookups.

The datasheet is ``shared/data/gpus_datasheet.csv`` beside the checkout (CI has it there too); the
figures below are recomputed from its cells with the unit conversions its header states.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from planner.errors import CatalogError, UnknownGpu
from planner.hardware import (
    KNOWN_DTYPES,
    GpuSpec,
    builtin_catalog_dir,
    find_gpu,
    gpu_to_dict,
    load_catalog,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
DATASHEET = SHARED / "data" / "gpus_datasheet.csv"
BUILD_SCRIPT = ROOT / "scripts" / "build_hardware_catalog.py"

#: the ``gpu`` ids of shared/API_CONTRACT.md
CONTRACT_IDS = (
    "a100-40gb-sxm a100-80gb-sxm a100-80gb-pcie h100-sxm h100-pcie h100-nvl h200-sxm h200-nvl h20 h800-sxm "
    "l4 l40s b200 b300 gb200 gb300 mi250x mi300x mi325x mi355x gaudi2 gaudi3 tpu-v5e tpu-v5p tpu-v6e tpu7x"
).split()
GIB = 2**30
#: CSV column of each catalog dtype (the BF16/FP16 column gives both)
DTYPE_COLUMNS = {
    "fp32": "fp32_tflops", "tf32": "tf32_tflops_dense", "bf16": "bf16_fp16_tflops_dense",
    "fp8": "fp8_tflops_dense", "int8": "int8_tops_dense", "fp4": "fp4_tflops_dense",
}


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, str]]:
    with DATASHEET.open(newline="", encoding="utf-8") as handle:
        return {row["id"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def catalog() -> dict[str, GpuSpec]:
    return dict(load_catalog())


def _cell(row: dict[str, str], column: str) -> float | None:
    text = row[column].strip()
    return float(text) if text else None


def _entry(gpu_id: str) -> dict[str, Any]:
    return json.loads((builtin_catalog_dir() / f"{gpu_id}.json").read_text(encoding="utf-8"))


def _write(directory: Path, name: str, data: dict[str, Any]) -> Path:
    path = directory / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------
# The built-in catalog against the datasheet
# ------------------------------------------------------------------------------------------------
def test_every_contract_id_loads_and_equals_the_datasheet_ids(catalog, rows):
    assert sorted(catalog) == sorted(CONTRACT_IDS) == sorted(rows)
    for gpu_id, spec in catalog.items():
        assert spec.id == gpu_id
        assert spec.vendor == rows[gpu_id]["vendor"]
        assert spec.name == rows[gpu_id]["name"]


@pytest.mark.parametrize(
    "gpu_id", ["h100-sxm", "a100-80gb-sxm", "h200-sxm", "b200", "mi300x", "gaudi2", "tpu-v6e"]
)
def test_figures_match_the_datasheet(catalog, rows, gpu_id):
    spec, row = catalog[gpu_id], rows[gpu_id]
    # TB/s, GB/s are decimal (shared/README.md); NIC Gb/s / 8 = bytes/s
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(_cell(row, "hbm_bandwidth_tbs") * 1e12, rel=1e-12)
    assert spec.scale_up_bandwidth_bytes_per_s == pytest.approx(
        _cell(row, "scale_up_bw_unidir_gbs") * 1e9, rel=1e-12
    )
    assert spec.scale_up_bandwidth_bytes_per_s == pytest.approx(
        _cell(row, "scale_up_bw_bidir_gbs") * 1e9 / 2, rel=1e-12
    )
    assert spec.scale_up_domain_size == int(row["max_scale_up_domain"])
    nic = _cell(row, "scale_out_nic_gbps_per_accel")
    if nic is not None:
        assert spec.scale_out_bandwidth_bytes_per_s == pytest.approx(nic * 1e9 / 8, rel=1e-12)
    assert spec.tdp_w == _cell(row, "tdp_w")
    assert spec.launch_year == int(row["launch_year"])
    # these rows' vendor "GB" of HBM are GiB, as their GiB readings (where given) confirm
    assert spec.memory_bytes == _cell(row, "hbm_capacity_gb") * GIB
    for dtype, column in DTYPE_COLUMNS.items():
        value = _cell(row, column)
        if value is None:
            assert dtype not in spec.peak_flops_per_s
        else:
            assert spec.peak_flops_per_s[dtype] == pytest.approx(value * 1e12, rel=1e-12)


def test_hbm_is_never_the_decimal_reading_and_agrees_with_gib_readings(catalog, rows):
    for gpu_id, spec in catalog.items():
        row = rows[gpu_id]
        # tpu7x's GB column is Google's 192 GiB converted to GB (its notes), not a vendor GB figure
        if row["memory_type"].startswith("HBM") and gpu_id != "tpu7x":
            decimal_gib = _cell(row, "hbm_capacity_gib_if_decimal")
            assert spec.memory_bytes / GIB > decimal_gib * 1.03, gpu_id
        reported = _cell(row, "hbm_capacity_gib_reported")
        if reported is not None:
            # a GiB reading (nvidia-smi, aiconfigurator, vendor GiB) is the capacity less at most 1.5%
            assert 0.985 <= reported / (spec.memory_bytes / GIB) <= 1.0 + 1e-9, gpu_id


def test_gddr_cards_lose_a_sixteenth_to_ecc(catalog, rows):
    for gpu_id in ("l4", "l40s"):
        gib = _cell(rows[gpu_id], "hbm_capacity_gb")
        assert catalog[gpu_id].memory_bytes == pytest.approx(gib * GIB * 15 / 16)
    # the CSV's own reading of the L40S: 46068 MiB
    assert catalog["l40s"].memory_bytes == pytest.approx(46068 * 2**20, rel=1e-3)


def test_peak_dtypes_follow_the_datasheet_columns_and_unsupported_list(catalog, rows):
    for gpu_id, spec in catalog.items():
        row = rows[gpu_id]
        assert set(spec.peak_flops_per_s) <= set(KNOWN_DTYPES)
        unsupported = {m.lower() for m in re.findall(r"\b(FP32|TF32|BF16|FP16|FP8|INT8|FP4)\b",
                                                    row["precisions_not_supported"])}
        for dtype in unsupported:
            assert not spec.supports(dtype), (gpu_id, dtype)
        for dtype, column in DTYPE_COLUMNS.items():
            assert spec.supports(dtype) == (_cell(row, column) is not None), (gpu_id, dtype)
        # fp16 runs at the bf16 rate except where the notes say otherwise; TPUs publish bf16 only
        if row["vendor"] == "Google":
            assert "fp16" not in spec.peak_flops_per_s
        elif gpu_id == "gaudi3":
            assert "459" in row["notes"] and spec.peak_flops_per_s["fp16"] == pytest.approx(459e12)
        else:
            assert spec.peak_flops_per_s["fp16"] == spec.peak_flops_per_s["bf16"]


def test_price_prefers_neocloud_then_hyperscaler(catalog, rows):
    for gpu_id, spec in catalog.items():
        row = rows[gpu_id]
        neocloud = _cell(row, "price_neocloud_usd_per_hr")
        hyperscaler = _cell(row, "price_hyperscaler_usd_per_hr")
        expected = neocloud if neocloud is not None else hyperscaler
        assert spec.price_per_gpu_hour_usd == expected, gpu_id


def test_every_figure_has_a_source_and_blank_cells_are_marked(catalog, rows):
    figure_fields = [
        "memory_bytes", "hbm_bandwidth_bytes_per_s", "scale_up_bandwidth_bytes_per_s", "scale_up_domain_size",
        "scale_out_bandwidth_bytes_per_s", "pcie_bandwidth_bytes_per_s", "num_compute_units",
        "l2_cache_bytes", "tdp_w", "launch_year", "price_per_gpu_hour_usd",
    ]
    for gpu_id, spec in catalog.items():
        expected = set(figure_fields) | {f"peak_flops_per_s.{d}" for d in spec.peak_flops_per_s}
        assert set(spec.sources) == expected, gpu_id
        assert all(text.strip() for text in spec.sources.values()), gpu_id
        # figures read from the datasheet keep the row's source codes
        codes = set(re.findall(r"\bS\d+\b", rows[gpu_id]["sources"]))
        for name in ("hbm_bandwidth_bytes_per_s", "peak_flops_per_s.bf16", "tdp_w"):
            assert codes <= set(re.findall(r"\bS\d+\b", spec.sources[name])), (gpu_id, name)
        # a blank CSV cell that the catalog fills is flagged as an assumption or cited elsewhere
        if not rows[gpu_id]["scale_out_nic_gbps_per_accel"].strip():
            assert "CSV blank" in spec.sources["scale_out_bandwidth_bytes_per_s"], gpu_id


def test_families_inherit_from_hopper_and_say_why(catalog):
    for spec in catalog.values():
        if spec.family == "hopper":
            assert not spec.efficiency_inherited
            assert spec.efficiency is catalog["h100-sxm"].efficiency
        else:
            assert spec.efficiency_inherited, spec.id
            assert spec.efficiency_origin.startswith("inherited from family hopper: "), spec.id
            assert spec.efficiency == catalog["h100-sxm"].efficiency
        if spec.vendor != "NVIDIA":
            assert "cross-vendor" in spec.efficiency_origin.lower(), spec.id
    assert {s.family for s in catalog.values()} == {
        "ampere", "hopper", "ada", "blackwell", "cdna2", "cdna3", "cdna4", "gaudi", "tpu"
    }


def test_specs_convert_with_dataclasses_asdict(catalog):
    # scripts/fit_kernels.py writes the family file from dataclasses.asdict(EfficiencyParams)
    params = dataclasses.asdict(catalog["h100-sxm"].efficiency)
    assert params["gemm_peak_fraction"] == dict(catalog["h100-sxm"].efficiency.gemm_peak_fraction)
    assert dataclasses.asdict(catalog["l4"])["peak_flops_per_s"] == dict(catalog["l4"].peak_flops_per_s)


def test_gpu_to_dict_is_json_with_every_figure_and_source(catalog):
    for spec in catalog.values():
        data = gpu_to_dict(spec)
        text = json.dumps(data, allow_nan=False)
        again = json.loads(text)
        assert again["memory_bytes"] == spec.memory_bytes
        assert again["peak_flops_per_s"] == dict(spec.peak_flops_per_s)
        assert again["sources"] == dict(spec.sources)
        assert again["efficiency"]["gemm_peak_fraction"] == dict(spec.efficiency.gemm_peak_fraction)
        assert again["efficiency_inherited"] is spec.efficiency_inherited


# ------------------------------------------------------------------------------------------------
# Lookup
# ------------------------------------------------------------------------------------------------
def test_find_gpu_is_case_insensitive(catalog):
    assert find_gpu(catalog, "H100-SXM") is catalog["h100-sxm"]
    assert find_gpu(catalog, "Tpu7X").id == "tpu7x"


@pytest.mark.parametrize(
    ("query", "expected"), [("h100-sxn", "h100-sxm"), ("mi300", "mi300x"), ("H200", "h200-sxm")]
)
def test_unknown_gpu_lists_closest_ids(catalog, query, expected):
    with pytest.raises(UnknownGpu) as info:
        find_gpu(catalog, query)
    closest = info.value.extra["closest_ids"]
    assert expected in closest and len(closest) <= 5
    assert query in info.value.detail


def test_unknown_gpu_far_from_everything_has_no_suggestions(catalog):
    with pytest.raises(UnknownGpu) as info:
        find_gpu(catalog, "zzzzzzzzzzzzzzzzzzzz")
    assert info.value.extra["closest_ids"] == []


# ------------------------------------------------------------------------------------------------
# User directories
# ------------------------------------------------------------------------------------------------
def test_user_dir_adds_a_gpu_and_overrides_one(tmp_path, catalog):
    new = _entry("h100-sxm")
    new["id"] = "h100-sxm-lab"
    new["name"] = "H100 SXM in our lab"
    new["figures"]["hbm_bandwidth_bytes_per_s"]["value"] = 3.0e12
    _write(tmp_path, "h100-sxm-lab.json", new)
    override = _entry("l4")
    ecc_off = {"value": 24 * GIB, "unit": "bytes", "source": "ECC off in our fleet"}
    override["figures"]["memory_bytes"] = ecc_off
    _write(tmp_path, "l4.json", override)
    (tmp_path / "README.txt").write_text("not a catalog file")
    (tmp_path / "l4.json~").write_text("{ editor backup")

    merged = load_catalog(tmp_path)
    assert set(merged) == set(catalog) | {"h100-sxm-lab"}
    assert merged["h100-sxm-lab"].hbm_bandwidth_bytes_per_s == 3.0e12
    assert merged["h100-sxm-lab"].peak_flops_per_s == catalog["h100-sxm"].peak_flops_per_s
    assert merged["l4"].memory_bytes == 24 * GIB
    assert merged["l4"].sources["memory_bytes"] == "ECC off in our fleet"
    assert merged["h100-sxm"] == catalog["h100-sxm"]
    # the built-in catalog itself is untouched
    assert load_catalog()["l4"].memory_bytes == catalog["l4"].memory_bytes


def test_user_families_add_parameters_and_inheritance(tmp_path, catalog):
    families = tmp_path / "families"
    families.mkdir()
    own = json.loads((builtin_catalog_dir() / "families" / "hopper.json").read_text())
    own.update(family="lab", fitted_on="fitted on our own GEMM sweep", memory_bandwidth_fraction=0.5)
    _write(families, "lab.json", own)
    child = {"family": "lab-child", "inherits_from": "lab", "reason": "same silicon"}
    _write(families, "lab-child.json", child)
    for gpu_id, family in (("gpu-a", "lab"), ("gpu-b", "lab-child")):
        entry = _entry("h100-sxm")
        entry.update(id=gpu_id, family=family)
        _write(tmp_path, f"{gpu_id}.json", entry)

    merged = load_catalog(tmp_path)
    a, b = merged["gpu-a"], merged["gpu-b"]
    assert not a.efficiency_inherited and a.efficiency_origin == "fitted on our own GEMM sweep"
    assert a.efficiency.memory_bandwidth_fraction == 0.5
    assert b.efficiency_inherited and b.efficiency == a.efficiency
    assert b.efficiency_origin.startswith("inherited from family lab: same silicon")
    assert merged["h100-sxm"].efficiency == catalog["h100-sxm"].efficiency


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    def edit(entry: dict[str, Any]) -> None:
        del entry["figures"][key]
    return edit


def _set_figure(key: str, value: Any, field: str = "value") -> Callable[[dict[str, Any]], None]:
    def edit(entry: dict[str, Any]) -> None:
        entry["figures"][key][field] = value
    return edit


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(entry: dict[str, Any]) -> None:
        entry[key] = value
    return edit


def _set_peak(dtype: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(entry: dict[str, Any]) -> None:
        entry["figures"]["peak_flops_per_s"][dtype] = {"value": value, "unit": "FLOP/s", "source": "x"}
    return edit


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_drop("memory_bytes"), "figures.memory_bytes"),
        (_set_figure("hbm_bandwidth_bytes_per_s", -3.35e12), "figures.hbm_bandwidth_bytes_per_s.value"),
        (_set_figure("hbm_bandwidth_bytes_per_s", 0), "figures.hbm_bandwidth_bytes_per_s.value"),
        (_set_figure("hbm_bandwidth_bytes_per_s", "3.35e12"), "figures.hbm_bandwidth_bytes_per_s.value"),
        (_set_figure("scale_up_domain_size", 8.5), "figures.scale_up_domain_size.value"),
        (_set_figure("scale_up_domain_size", True), "figures.scale_up_domain_size.value"),
        (_set_figure("memory_bytes", None), "figures.memory_bytes.value"),
        (_set_figure("memory_bytes", "GB", "unit"), "figures.memory_bytes.unit"),
        (_set_figure("tdp_w", "", "source"), "figures.tdp_w.source"),
        (_set_peak("fp6", 1e15), "figures.peak_flops_per_s.fp6"),
        (_set_peak("bf16", -1.0), "figures.peak_flops_per_s.bf16.value"),
        (_set("id", "h100-other"), "id"),
        (_set("family", "volta"), "family"),
        (_set("vendor", 7), "vendor"),
        (_set("figure", {}), "figure"),
    ],
)
def test_bad_user_file_is_refused_naming_file_and_field(tmp_path, edit, field):
    entry = _entry("h100-sxm")
    edit(entry)
    _write(tmp_path, "h100-sxm.json", entry)
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    error = info.value
    assert error.extra["field"] == field
    assert error.extra["file"].endswith("h100-sxm.json")
    assert "h100-sxm.json" in error.detail and repr(field) in error.detail


@pytest.mark.parametrize(
    "text",
    ['{"id": "h100-sxm", ', '[1, 2]', '{"id": "a", "id": "b"}', '{"id": NaN}', "\ufffe\x00"],
)
def test_unreadable_json_is_refused(tmp_path, text):
    (tmp_path / "h100-sxm.json").write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert info.value.extra["file"].endswith("h100-sxm.json")


def test_symlinks_are_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = _write(outside, "h100-sxm.json", _entry("h100-sxm"))
    user = tmp_path / "user"
    user.mkdir()
    (user / "h100-sxm.json").symlink_to(target)
    with pytest.raises(CatalogError) as info:
        load_catalog(user)
    assert info.value.extra["file"].endswith("h100-sxm.json")
    assert "symbolic link" in info.value.detail


def test_symlinked_families_dir_is_refused(tmp_path):
    real = tmp_path / "real-families"
    real.mkdir()
    user = tmp_path / "user"
    user.mkdir()
    (user / "families").symlink_to(real, target_is_directory=True)
    with pytest.raises(CatalogError) as info:
        load_catalog(user)
    assert info.value.extra["file"].endswith("families")


def test_missing_user_dir_is_an_error(tmp_path):
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path / "nope")
    assert "nope" in info.value.detail


def test_upper_case_file_name_is_refused(tmp_path):
    entry = _entry("h100-sxm")
    entry["id"] = "H100-Lab"
    _write(tmp_path, "H100-Lab.json", entry)
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert info.value.extra["field"] == "id"


@pytest.mark.parametrize(
    ("family", "field"),
    [
        ({"family": "lab", "inherits_from": "volta", "reason": "x"}, "inherits_from"),
        ({"family": "lab", "inherits_from": "hopper", "reason": ""}, "reason"),
        ({"family": "lab", "inherits_from": "lab", "reason": "x"}, "inherits_from"),
        ({"family": "other", "inherits_from": "hopper", "reason": "x"}, "family"),
        ({"family": "lab", "fitted_on": "x"}, "attention_fixed_s"),
    ],
)
def test_bad_family_file_is_refused(tmp_path, family, field):
    (tmp_path / "families").mkdir()
    _write(tmp_path / "families", "lab.json", family)
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert info.value.extra["file"].endswith("lab.json")
    assert info.value.extra["field"] == field


@pytest.mark.parametrize(
    ("key", "value"),
    [("memory_bandwidth_fraction", 1.2), ("gemm_tile_m", 127.5), ("gemm_peak_fraction", {"fp8": 0.5}),
     ("kernel_fixed_s", -1e-6), ("attention_peak_fraction", {"bf16": 0.5, "fp12": 0.5})],
)
def test_out_of_range_family_parameters_are_refused(tmp_path, key, value):
    params = json.loads((builtin_catalog_dir() / "families" / "hopper.json").read_text())
    params[key] = value
    (tmp_path / "families").mkdir()
    _write(tmp_path / "families", "hopper.json", params)
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert info.value.extra["field"].split(".")[0] == key


def test_inheritance_cycle_is_refused(tmp_path):
    (tmp_path / "families").mkdir()
    _write(tmp_path / "families", "a.json", {"family": "a", "inherits_from": "b", "reason": "x"})
    _write(tmp_path / "families", "b.json", {"family": "b", "inherits_from": "a", "reason": "x"})
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert "cycle" in info.value.detail


# ------------------------------------------------------------------------------------------------
# The build script and packaging
# ------------------------------------------------------------------------------------------------
def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_hardware_catalog", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_script_reproduces_the_committed_files(tmp_path):
    build = _build_module()
    written = build.build(DATASHEET, tmp_path / "first")
    build.build(DATASHEET, tmp_path / "second")
    assert sorted(p.stem for p in written) == sorted(CONTRACT_IDS)
    committed = builtin_catalog_dir()
    for path in written:
        text = path.read_bytes()
        assert text == (tmp_path / "second" / path.name).read_bytes(), path.name
        stale = f"{path.name} is stale: re-run {BUILD_SCRIPT.name}"
        assert text == (committed / path.name).read_bytes(), stale


def test_build_script_knows_every_source_code(rows):
    legend = _build_module().SOURCE_LEGEND
    used = {code for row in rows.values() for code in re.findall(r"\bS\d+\b", row["sources"])}
    assert used <= set(legend)


def test_catalog_loads_from_an_installed_layout(tmp_path):
    """A wheel holds planner/ and the package-data globs of pyproject.toml: the catalog must be among them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["hardware_catalog"]
    site = tmp_path / "site"
    shutil.copytree(ROOT / "planner", site / "planner", ignore=shutil.ignore_patterns("__pycache__"))
    source = builtin_catalog_dir()
    for path in source.rglob("*"):
        relative = path.relative_to(source).as_posix()
        if path.is_file() and (relative == "__init__.py" or any(fnmatch(relative, g) for g in globs)):
            (site / "hardware_catalog" / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, site / "hardware_catalog" / relative)
    probe = (
        "import json; from planner.hardware import builtin_catalog_dir, load_catalog; "
        "c = load_catalog(); print(json.dumps([str(builtin_catalog_dir()), len(c)]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    where, count = json.loads(result.stdout)
    assert Path(where).resolve() == (site / "hardware_catalog").resolve()
    assert count == len(CONTRACT_IDS)


def test_catalog_values_are_finite(catalog):
    for spec in catalog.values():
        numbers = [spec.memory_bytes, spec.hbm_bandwidth_bytes_per_s, spec.l2_cache_bytes,
                   spec.scale_out_bandwidth_bytes_per_s, spec.pcie_bandwidth_bytes_per_s,
                   *spec.peak_flops_per_s.values()]
        assert all(math.isfinite(x) and x > 0 for x in numbers), spec.id
