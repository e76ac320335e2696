"""Accelerator specifications: the frozen ``GpuSpec`` and the loader of ``hardware_catalog/``.

Every datasheet figure carries its source. Achievable-efficiency parameters (how close real kernels
come to peak) belong to an architecture *family* (``hardware_catalog/families/<family>.json``); a GPU
whose family was never fitted inherits the parameters of the family named in that file's
``inherits_from`` and says so (``efficiency_inherited``).
"""

from __future__ import annotations

import difflib
import errno
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from planner.errors import CatalogError, UnknownGpu


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
    #: fraction of scale-up link bandwidth reached by ring all-reduce (its bus bandwidth) on two GPUs
    link_bandwidth_fraction: float
    #: fixed latency of one collective on the scale-up fabric [s]
    collective_latency_s: float
    #: the collective's latency added per peer beyond the first (each GPU more is a step more) [s]
    collective_latency_per_peer_s: float = 0.0
    #: a pipelined collective's fill time per peer: the segments' latency it trades against their
    #: bandwidth (``kernels.allreduce_time_s``) [s]
    collective_pipeline_s: float = 0.0
    #: growth of the bus bandwidth fraction with the GPU count, ``(n / 2) ** exponent``, up to
    #: ``collective_max_gpus`` (NCCL switches algorithms with n: NVLink SHARP at 8 on NVSwitch)
    link_bandwidth_exponent: float = 0.0
    #: the largest GPU count the collective's fit saw: its bandwidth growth stops there
    collective_max_gpus: int = 8
    #: per-score cost of the softmax (exp, max, sum on the CUDA cores) in prefill attention, expressed as
    #: extra head dimensions of tensor-core work [elements]; FA3 overlaps it with the matmuls only in part
    #: (Shah et al., "FlashAttention-3", 2024, Sec. 3: H100 has 989 TFLOP/s of matmul but 3.9 TFLOP/s of exp)
    attention_softmax_dims: float = 0.0
    #: soft-maximum exponent blending compute and memory time (Eq. (1) of planner/costs/kernels.py):
    #: large = perfect overlap of loads and math (a pure roofline), 1 = no overlap (they add)
    overlap_exponent: float = 3.0
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
    #: board power [W]; None where the vendor publishes none (Google TPUs)
    tdp_w: float | None
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


# --------------------------------------------------------------------------------------------------
# Catalog loader
# --------------------------------------------------------------------------------------------------
#: package holding the built-in catalog files (shipped as package data)
CATALOG_PACKAGE = "hardware_catalog"
FAMILIES_DIR_NAME = "families"
#: compute dtypes a catalog may give a peak for
KNOWN_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
#: a catalog file larger than this is refused unread [bytes]; also bounds the model catalog's files
MAX_CATALOG_FILE_BYTES = 256 * 1024
#: deepest nesting of JSON arrays and objects a catalog file may have (GPU files need 4, the
#: Hugging Face configs of the model catalog 7)
MAX_CATALOG_JSON_DEPTH = 32

_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_GPU_KEYS = frozenset({"id", "vendor", "name", "family", "form_factor", "notes", "figures"})
_FIGURE_KEYS = frozenset({"value", "unit", "source"})
#: GpuSpec figure -> (unit written in the file, "float" | "int", may be null)
_FIGURES: Mapping[str, tuple[str, str, bool]] = {
    "memory_bytes": ("bytes", "float", False),
    "hbm_bandwidth_bytes_per_s": ("bytes/s", "float", False),
    "scale_up_bandwidth_bytes_per_s": ("bytes/s", "float", False),
    "scale_up_domain_size": ("count", "int", False),
    "scale_out_bandwidth_bytes_per_s": ("bytes/s", "float", False),
    "pcie_bandwidth_bytes_per_s": ("bytes/s", "float", False),
    "num_compute_units": ("count", "int", False),
    "l2_cache_bytes": ("bytes", "float", False),
    "tdp_w": ("W", "float", True),
    "launch_year": ("year", "int", False),
    "price_per_gpu_hour_usd": ("USD/h", "float", True),
}
_FLOPS_UNIT = "FLOP/s"
_FIRST_LAUNCH_YEAR = 1990


def _efficiency_kinds() -> Mapping[str, str]:
    """EfficiencyParams field -> how a family file's value is checked.

    ``fractions`` a dtype -> (0, 1] mapping, ``fraction`` in (0, 1], ``tile`` a positive integer,
    ``duration`` a non-negative time [s], ``positive`` any finite positive number.
    """
    kinds: dict[str, str] = {}
    for item in fields(EfficiencyParams):
        annotation = str(item.type)
        if item.name == "fitted_on":
            continue
        if annotation.startswith("Mapping"):
            kinds[item.name] = "fractions"
        elif annotation == "int":
            kinds[item.name] = "tile"
        elif item.name.endswith("_fraction"):
            kinds[item.name] = "fraction"
        elif item.name.endswith("_s"):
            kinds[item.name] = "duration"
        else:
            kinds[item.name] = "positive"
    return MappingProxyType(kinds)


_EFFICIENCY_KINDS = _efficiency_kinds()


@dataclass(frozen=True, kw_only=True)
class _CatalogFile:
    """One file to read: where it is and how errors name it."""

    path: Path
    display: str


@dataclass(frozen=True, kw_only=True)
class _FamilyEntry:
    """A parsed family file: its own parameters, or the family it inherits from and why."""

    source: _CatalogFile
    params: EfficiencyParams | None
    inherits_from: str = ""
    reason: str = ""


def builtin_catalog_dir() -> Path:
    """Directory of the built-in catalog (the ``hardware_catalog`` package).

    Works from a source checkout, an editable install and an installed wheel (the JSON files are
    package data); a zipped install, which has no directory, raises ``CatalogError``.
    """
    root = resources.files(CATALOG_PACKAGE)
    if not isinstance(root, Path):
        raise CatalogError(
            f"the {CATALOG_PACKAGE} package is not a directory on disk ({root!r})",
            file=CATALOG_PACKAGE,
            field="",
        )
    return root


def load_catalog(user_dir: Path | None = None) -> Mapping[str, GpuSpec]:
    """Read and validate the built-in catalog, then the user's directory on top of it.

    Every ``<id>.json`` of the built-in directory is read, then every ``<id>.json`` of ``user_dir``
    (when given): a user file with a new id adds an accelerator, one with an existing id replaces the
    built-in entry as a whole. ``families/<family>.json`` files are merged the same way. Files whose
    name does not end in ``.json`` (and hidden files) are ignored.

    Parameters
    ----------
    user_dir : Path, optional
        An operator's catalog directory (the API reads it from ``PLANNER_HARDWARE_DIR``; this module
        never reads the environment). The directory itself is resolved once, like any path an
        operator configures, so it may be a symbolic link; inside it, symbolic links, anything that
        resolves outside it, entries that are not regular files (a ``families`` that is not a
        directory, a FIFO named ``x.json``), files over ``MAX_CATALOG_FILE_BYTES``, non-UTF-8 text
        and JSON nested deeper than ``MAX_CATALOG_JSON_DEPTH`` are refused.

    Returns
    -------
    Mapping[str, GpuSpec]
        Read-only mapping from lower-case id to spec, sorted by id.

    Raises
    ------
    CatalogError
        For the first invalid file, with ``file`` and ``field`` naming what is wrong.
    """
    builtin = builtin_catalog_dir()
    gpu_files = _list_json(builtin, display=CATALOG_PACKAGE)
    family_files = _list_json(builtin / FAMILIES_DIR_NAME, display=f"{CATALOG_PACKAGE}/{FAMILIES_DIR_NAME}")
    if user_dir is not None:
        user_root = _user_root(Path(user_dir))
        gpu_files.update(_list_json(user_root, display=str(user_dir), confine=True))
        families = user_root / FAMILIES_DIR_NAME
        family_display = str(Path(user_dir) / FAMILIES_DIR_NAME)
        if families.is_symlink():
            _fail(family_display, "", "symbolic links are refused")
        if families.exists():
            if not families.is_dir():
                _fail(family_display, "", "must be a directory of <family>.json files")
            family_files.update(_list_json(families, display=family_display, confine=True))
    entries = {name: _parse_family(source, name) for name, source in family_files.items()}
    resolved: dict[str, tuple[EfficiencyParams, str, bool]] = {}
    for name in sorted(entries):
        _resolve_family(name, entries, resolved, chain=())
    specs = {gpu_id: _parse_gpu(source, gpu_id, resolved) for gpu_id, source in sorted(gpu_files.items())}
    return MappingProxyType(specs)


def find_gpu(catalog: Mapping[str, GpuSpec], gpu_id: str) -> GpuSpec:
    """The spec of ``gpu_id`` (case-insensitive).

    Raises
    ------
    UnknownGpu
        With ``closest_ids``: up to five catalog ids nearest to ``gpu_id`` (difflib ratio).
    """
    key = gpu_id.lower()
    if key in catalog:
        return catalog[key]
    for spec_id, spec in catalog.items():
        if spec_id.lower() == key:
            return spec
    closest = difflib.get_close_matches(key, sorted(catalog), n=5, cutoff=0.4)
    hint = f"; closest ids: {', '.join(closest)}" if closest else ""
    raise UnknownGpu(f"unknown GPU {gpu_id!r}{hint}", closest_ids=closest)


def gpu_to_dict(spec: GpuSpec) -> dict[str, Any]:
    """JSON-able dict of a spec: every GpuSpec field (SI units), the efficiency parameters and ``sources``.

    ``sources`` maps each figure (``peak_flops_per_s.<dtype>`` for the peaks) to its citation.
    """
    return {item.name: _plain(getattr(spec, item.name)) for item in fields(spec)}


def _plain(value: Any) -> Any:
    if isinstance(value, EfficiencyParams):
        return {item.name: _plain(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _fail(file: str, field_name: str, message: str) -> NoReturn:
    where = f"{file}: field {field_name!r}" if field_name else file
    raise CatalogError(f"{where}: {message}", file=file, field=field_name)


def _user_root(user_dir: Path) -> Path:
    """The resolved operator directory: the one symbolic link followed is the configured path itself."""
    if not user_dir.is_dir():
        _fail(str(user_dir), "", "hardware catalog directory does not exist or is not a directory")
    return user_dir.resolve()


def _list_json(directory: Path, *, display: str, confine: bool = False) -> dict[str, _CatalogFile]:
    """``stem -> file`` for the visible ``*.json`` entries of ``directory``; symlinks refused."""
    if not directory.is_dir():
        return {}
    root = directory.resolve()
    found: dict[str, _CatalogFile] = {}
    for path in sorted(directory.iterdir()):
        if not path.name.endswith(".json") or path.name.startswith("."):
            continue
        shown = f"{display}/{path.name}"
        if path.is_symlink():
            _fail(shown, "", "symbolic links are refused")
        if not path.is_file():
            _fail(shown, "", "not a regular file")
        if confine and path.resolve().parent != root:
            _fail(shown, "", "resolves outside the catalog directory")
        found[path.name[: -len(".json")]] = _CatalogFile(path=path, display=shown)
    return found


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def read_catalog_json(path: Path, *, display: str, strict: bool = True) -> Any:
    """Parse one catalog file, bounding what a hostile or broken file can cost.

    The file is opened without following a symbolic link in its last component and without
    blocking (so a FIFO cannot stall the loader), must be a regular file of at most
    ``MAX_CATALOG_FILE_BYTES``, of which at most one byte more is ever read, and must be UTF-8 JSON
    nested at most ``MAX_CATALOG_JSON_DEPTH`` deep. The caller confines ``path`` to its directory.

    Parameters
    ----------
    path : Path
        The file to read.
    display : str
        How errors name the file (``CatalogError.extra["file"]``).
    strict : bool, default True
        Also refuse ``NaN``/``Infinity`` and duplicate keys (the hardware catalog's rules). The model
        catalog passes False: its Hugging Face configs are parsed as Hugging Face parses them
        (some Mamba configs hold ``Infinity``).

    Returns
    -------
    Any
        The parsed JSON value.

    Raises
    ------
    CatalogError
        With ``file`` = ``display`` and a message saying what was refused.
    """
    content = _read_regular_file(path, display)
    try:
        text = content.decode("utf-8")
        if strict:
            data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
        else:
            data = json.loads(text)
    except RecursionError:
        _fail(display, "", f"JSON nested deeper than {MAX_CATALOG_JSON_DEPTH} levels")
    except (UnicodeDecodeError, ValueError) as exc:
        _fail(display, "", f"not readable as UTF-8 JSON: {exc}")
    if _exceeds_depth(data, MAX_CATALOG_JSON_DEPTH):
        _fail(display, "", f"JSON nested deeper than {MAX_CATALOG_JSON_DEPTH} levels")
    return data


def _read_regular_file(path: Path, display: str) -> bytes:
    """At most ``MAX_CATALOG_FILE_BYTES`` of a regular file that is not a symbolic link."""
    if path.is_symlink():
        _fail(display, "", "symbolic links are refused")
    # O_NOFOLLOW and O_NONBLOCK are POSIX, O_BINARY is Windows; each is 0 where it does not exist
    flags = os.O_RDONLY
    for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_BINARY"):
        flags |= getattr(os, name, 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component became a link after the check above
            _fail(display, "", "symbolic links are refused")
        _fail(display, "", f"cannot be opened: {exc.strerror}")
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            _fail(display, "", "not a regular file")
        if info.st_size > MAX_CATALOG_FILE_BYTES:
            _fail(display, "", f"file is larger than the limit of {MAX_CATALOG_FILE_BYTES} bytes")
        try:
            content = handle.read(MAX_CATALOG_FILE_BYTES + 1)
        except OSError as exc:
            _fail(display, "", f"cannot be read: {exc.strerror}")
    if len(content) > MAX_CATALOG_FILE_BYTES:  # grew after the fstat
        _fail(display, "", f"file is larger than the limit of {MAX_CATALOG_FILE_BYTES} bytes")
    return content


def _exceeds_depth(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def _read_object(source: _CatalogFile) -> dict[str, Any]:
    data = read_catalog_json(source.path, display=source.display)
    if not isinstance(data, dict):
        _fail(source.display, "", "the top level must be a JSON object")
    return data


def _text(data: Mapping[str, Any], key: str, source: _CatalogFile, *, prefix: str = "",
          allow_empty: bool = False) -> str:
    name = f"{prefix}{key}"
    if key not in data:
        _fail(source.display, name, "missing")
    value = data[key]
    if not isinstance(value, str):
        _fail(source.display, name, f"must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        _fail(source.display, name, "must not be empty")
    return value


def _number(
    value: Any, source: _CatalogFile, name: str, kind: str, *, allow_zero: bool = False
) -> float | int:
    """A finite positive (or, with ``allow_zero``, non-negative) number; an integer when ``kind == "int"``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(source.display, name, f"must be a number, got {type(value).__name__}")
    if kind == "int" and not isinstance(value, int):
        _fail(source.display, name, f"must be an integer, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        wanted = "non-negative" if allow_zero else "positive"
        _fail(source.display, name, f"must be a finite {wanted} number, got {value!r}")
    return value if kind == "int" else float(value)


def _figure(
    figures: Mapping[str, Any], key: str, source: _CatalogFile, *, unit: str, kind: str, nullable: bool,
    prefix: str = "figures.",
) -> tuple[float | int | None, str]:
    """``(value, citation)`` of one ``{"value", "unit", "source"}`` figure."""
    name = f"{prefix}{key}"
    if key not in figures:
        _fail(source.display, name, "missing")
    figure = figures[key]
    if not isinstance(figure, dict):
        _fail(source.display, name, 'must be an object {"value", "unit", "source"}')
    extra = sorted(set(figure) - _FIGURE_KEYS)
    if extra:
        _fail(source.display, f"{name}.{extra[0]}", "unknown key")
    citation = _text(figure, "source", source, prefix=f"{name}.")
    found_unit = _text(figure, "unit", source, prefix=f"{name}.")
    if found_unit != unit:
        _fail(source.display, f"{name}.unit", f"must be {unit!r}, got {found_unit!r}")
    if "value" not in figure:
        _fail(source.display, f"{name}.value", "missing")
    value = figure["value"]
    if value is None:
        if not nullable:
            _fail(source.display, f"{name}.value", "must not be null")
        return None, citation
    return _number(value, source, f"{name}.value", kind), citation


def _parse_gpu(
    source: _CatalogFile, file_id: str, families: Mapping[str, tuple[EfficiencyParams, str, bool]]
) -> GpuSpec:
    data = _read_object(source)
    if not _ID_PATTERN.fullmatch(file_id):
        _fail(source.display, "id", "file names must be lower-case ids: letters, digits, '.', '_', '-'")
    unknown = sorted(set(data) - _GPU_KEYS)
    if unknown:
        _fail(source.display, unknown[0], "unknown key")
    gpu_id = _text(data, "id", source)
    if gpu_id != file_id:
        _fail(source.display, "id", f"{gpu_id!r} does not match the file name {file_id!r}")
    family = _text(data, "family", source)
    if family not in families:
        _fail(source.display, "family", f"unknown family {family!r}; known: {', '.join(sorted(families))}")
    figures = data.get("figures")
    if not isinstance(figures, dict):
        _fail(source.display, "figures", "missing or not an object")
    allowed = set(_FIGURES) | {"peak_flops_per_s"}
    unknown = sorted(set(figures) - allowed)
    if unknown:
        _fail(source.display, f"figures.{unknown[0]}", "unknown figure")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, (unit, kind, nullable) in _FIGURES.items():
        values[key], sources[key] = _figure(figures, key, source, unit=unit, kind=kind, nullable=nullable)
    year = values["launch_year"]
    if year < _FIRST_LAUNCH_YEAR or year > 2100:
        _fail(source.display, "figures.launch_year.value", f"implausible year {year}")
    peaks = figures.get("peak_flops_per_s")
    if not isinstance(peaks, dict) or not peaks:
        _fail(source.display, "figures.peak_flops_per_s", "missing or not a non-empty object")
    peak_values: dict[str, float] = {}
    for dtype in sorted(peaks):
        if dtype not in KNOWN_DTYPES:
            name = f"figures.peak_flops_per_s.{dtype}"
            _fail(source.display, name, f"unknown dtype; known: {', '.join(KNOWN_DTYPES)}")
        value, citation = _figure(
            peaks, dtype, source, unit=_FLOPS_UNIT, kind="float", nullable=False,
            prefix="figures.peak_flops_per_s.",
        )
        peak_values[dtype] = float(value)  # type: ignore[arg-type]
        sources[f"peak_flops_per_s.{dtype}"] = citation
    params, origin, inherited = families[family]
    return GpuSpec(
        id=gpu_id,
        vendor=_text(data, "vendor", source),
        name=_text(data, "name", source),
        family=family,
        form_factor=_text(data, "form_factor", source),
        peak_flops_per_s=peak_values,
        efficiency=params,
        efficiency_origin=origin,
        efficiency_inherited=inherited,
        sources=sources,
        notes=_text(data, "notes", source, allow_empty=True) if "notes" in data else "",
        **values,
    )


def _parse_family(source: _CatalogFile, file_name: str) -> _FamilyEntry:
    data = _read_object(source)
    name = _text(data, "family", source)
    if name != file_name:
        _fail(source.display, "family", f"{name!r} does not match the file name {file_name!r}")
    if "inherits_from" in data:
        unknown = sorted(set(data) - {"family", "inherits_from", "reason"})
        if unknown:
            _fail(source.display, unknown[0], "not allowed in a family that inherits its parameters")
        return _FamilyEntry(
            source=source,
            params=None,
            inherits_from=_text(data, "inherits_from", source),
            reason=_text(data, "reason", source),
        )
    unknown = sorted(set(data) - set(_EFFICIENCY_KINDS) - {"family", "fitted_on", "notes"})
    if unknown:
        _fail(source.display, unknown[0], "unknown key (give either parameters or inherits_from)")
    missing = sorted(set(_EFFICIENCY_KINDS) - set(data))
    if missing:
        _fail(source.display, missing[0], f"missing {', '.join(missing)} (give every parameter, or "
              "inherits_from and reason)")
    params = {key: _efficiency_value(data[key], source, key, kind) for key, kind in _EFFICIENCY_KINDS.items()}
    if "notes" in data:
        _text(data, "notes", source, allow_empty=True)
    return _FamilyEntry(
        source=source,
        params=EfficiencyParams(fitted_on=_text(data, "fitted_on", source), **params),
    )


def _efficiency_value(value: Any, source: _CatalogFile, key: str, kind: str) -> Any:
    if kind == "fractions":
        if not isinstance(value, dict) or "bf16" not in value:
            _fail(source.display, key, 'must be an object of dtype -> fraction including "bf16"')
        result = {}
        for dtype in sorted(value):
            if dtype not in KNOWN_DTYPES:
                _fail(source.display, f"{key}.{dtype}", f"unknown dtype; known: {', '.join(KNOWN_DTYPES)}")
            result[dtype] = _fraction(value[dtype], source, f"{key}.{dtype}")
        return result
    if kind == "fraction":
        return _fraction(value, source, key)
    if kind == "duration":
        return _number(value, source, key, "float", allow_zero=True)
    return _number(value, source, key, "int" if kind == "tile" else "float")


def _fraction(value: Any, source: _CatalogFile, name: str) -> float:
    number = float(_number(value, source, name, "float"))
    if number > 1.0:
        _fail(source.display, name, f"a fraction must lie in (0, 1], got {value!r}")
    return number


def _resolve_family(
    name: str,
    entries: Mapping[str, _FamilyEntry],
    resolved: dict[str, tuple[EfficiencyParams, str, bool]],
    chain: tuple[str, ...],
) -> tuple[EfficiencyParams, str, bool]:
    """``(params, origin sentence, inherited)`` of a family, following ``inherits_from``."""
    if name in resolved:
        return resolved[name]
    entry = entries[name]
    if entry.params is not None:
        result = (entry.params, entry.params.fitted_on, False)
    else:
        parent = entry.inherits_from
        if parent not in entries:
            _fail(entry.source.display, "inherits_from", f"unknown family {parent!r}")
        if parent in chain or parent == name:
            cycle = " -> ".join((*chain, name, parent))
            _fail(entry.source.display, "inherits_from", f"inheritance cycle {cycle}")
        params, parent_origin, _ = _resolve_family(parent, entries, resolved, (*chain, name))
        reason = entry.reason.strip()
        result = (params, f"inherited from family {parent}: {reason} ({parent}: {parent_origin})", True)
    resolved[name] = result
    return result
