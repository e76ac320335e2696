"""Loaders of the shared validation data: kernel tables, published step measurements, serving benchmarks.

Every function takes the shared directory (the ``shared/`` sibling of the checkout) as an argument.
Values leave this module in SI units (seconds, bytes); the CSVs' own columns keep their names.

The published measurements are free text compiled from papers; :func:`published_step_rows` reads the
rows that time one prefill pass, one decode step, one layer's linear operators or one all-reduce, and
records in ``StepRow.assumption`` every reading of the text that is not literal.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from planner.errors import PlannerError
from planner.units import SECONDS_PER_MS

Phase = Literal["prefill", "decode", "operator", "allreduce"]
TableKey = tuple[str, str, str]

KERNEL_DIR = Path("data") / "kernels" / "h100_sxm"
PUBLISHED_CSV = Path("data") / "published_measurements.csv"
SERVING_CSV = Path("data") / "serving_benchmarks_h100.csv"

#: spelling of dtypes in file names and columns -> the planner's names
DTYPE_NAMES = {
    "bfloat16": "bf16",
    "half": "fp16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_block": "fp8-block",
    "int8": "int8",
    "int4_wo": "int4-wo",
    "w4a16_mxfp4": "w4a16-mxfp4",
}
#: column naming the dtype inside tables whose file name does not
_DTYPE_COLUMN = {
    "context_attention": "attn_dtype",
    "generation_attention": "attn_dtype",
    "custom_allreduce": "allreduce_dtype",
    "all_versions": "nccl_dtype",
}
#: measured (not shape) columns and columns naming the implementation, left out of the holdout hash
_NOT_SHAPE_COLUMNS = frozenset(
    {"latency_ms", "tflops", "message_bytes", "kernel_source", "backend", "implementation", "nccl_version"}
)


def normalize_dtype(name: str) -> str:
    """Planner spelling of a kernel file's dtype: ``bfloat16`` -> ``bf16``, ``fp8_block`` -> ``fp8-block``."""
    return DTYPE_NAMES.get(name, DTYPE_NAMES.get(name.replace("-", "_"), name))


# --------------------------------------------------------------------------------------------------
# kernel tables


def load_kernel_table(path: Path) -> dict[str, np.ndarray]:
    """Read one gzip CSV kernel table into columns.

    Parameters
    ----------
    path : pathlib.Path
        A ``*.csv.gz`` file of ``data/kernels/<gpu>/``.

    Returns
    -------
    dict of str to numpy.ndarray
        Columns in file order; a column whose every value parses as a number is float64, any other
        column an array of ``str``. Units are the file's (``latency_ms`` stays in ms).
    """
    with gzip.open(path, "rt", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        columns = list(zip(*reader, strict=True)) or [() for _ in header]
    table: dict[str, np.ndarray] = {}
    for name, values in zip(header, columns, strict=True):
        try:
            table[name] = np.asarray(values, dtype=float)
        except ValueError:
            table[name] = np.asarray(values, dtype=str)
    return table


def _distinct_column_values(path: Path, column: str) -> tuple[str, ...]:
    return _distinct_values_of_file(str(path), column, path.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _distinct_values_of_file(path: str, column: str, mtime_ns: int) -> tuple[str, ...]:
    """Distinct values of one column; memoized per file version (``mtime_ns`` is part of the key)."""
    with gzip.open(path, "rt", newline="") as handle:
        reader = csv.reader(handle)
        index = next(reader).index(column)
        return tuple(sorted({row[index] for row in reader}))


def kernel_tables(shared_dir: Path) -> dict[TableKey, Path]:
    """Name each kernel table of ``data/kernels/h100_sxm`` by ``(engine, kind, dtype)``.

    The engine is the file name's prefix without its version (``vllm``, ``trtllm``, ``sglang``,
    ``nccl``), the kind its second part (``gemm``, ``moe``, ``context_attention``,
    ``generation_attention``, ``custom_allreduce``) and the dtype the planner's spelling of the
    ``*_dtype-`` suffix. Files that mix dtypes (attention tables hold bf16 and fp8 attention) or
    collectives (the nccl file) appear once per value, e.g. ``("nccl", "all_reduce", "fp16")``;
    :func:`kernel_table` returns the matching rows.
    """
    tables: dict[TableKey, Path] = {}
    for path in sorted((Path(shared_dir) / KERNEL_DIR).glob("*.csv.gz")):
        parts = path.name.removesuffix(".csv.gz").split("__")
        engine = parts[0].split("-")[0]
        kind = parts[1]
        if len(parts) > 2:
            tables[(engine, kind, normalize_dtype(parts[2].split("dtype-", 1)[1]))] = path
            continue
        dtypes = [normalize_dtype(value) for value in _distinct_column_values(path, _DTYPE_COLUMN[kind])]
        kinds = _distinct_column_values(path, "collective") if engine == "nccl" else [kind]
        for each_kind in kinds:
            for dtype in dtypes:
                tables[(engine, each_kind, dtype)] = path
    return tables


def select_rows(table: Mapping[str, np.ndarray], key: TableKey) -> dict[str, np.ndarray]:
    """The rows of a loaded table that belong to ``key``, for files mixing dtypes or collectives."""
    engine, kind, dtype = key
    keep = np.ones(len(next(iter(table.values()))), dtype=bool)
    if "collective" in table:
        keep &= table["collective"] == kind
    dtype_column = _DTYPE_COLUMN.get("all_versions" if engine == "nccl" else kind)
    if dtype_column is not None and dtype_column in table:
        keep &= np.asarray([normalize_dtype(str(v)) for v in table[dtype_column]]) == dtype
    return {name: column[keep] for name, column in table.items()}


def kernel_table(shared_dir: Path, key: TableKey) -> dict[str, np.ndarray]:
    """Load the table named ``key`` (see :func:`kernel_tables`) and keep the rows that belong to it."""
    return select_rows(load_kernel_table(kernel_tables(shared_dir)[key]), key)


def holdout_mask(table: Mapping[str, np.ndarray]) -> np.ndarray:
    """Deterministic ~50 % split of a kernel table: ``True`` marks a held-out row.

    A row is held out when the first bit of the BLAKE2b hash of its shape columns (every column
    except the measurement and the implementation name) is set. Two rows of the same shape fall on
    the same side, whatever kernel or backend measured them, and the split does not depend on row
    order, on which other rows the table holds, or on the Python process. The fit script fits on
    ``~holdout_mask(table)``; the accuracy report scores on ``holdout_mask(table)``.
    """
    names = [name for name in table if name not in _NOT_SHAPE_COLUMNS]
    if not names:
        raise ValueError("table has no shape columns")
    num_rows = len(table[names[0]])
    text_columns = [
        [f"{v:.17g}" for v in table[name]] if table[name].dtype.kind == "f" else list(table[name])
        for name in names
    ]
    mask = np.empty(num_rows, dtype=bool)
    for index in range(num_rows):
        key = "|".join(f"{name}={column[index]}" for name, column in zip(names, text_columns, strict=True))
        mask[index] = hashlib.blake2b(key.encode(), digest_size=8).digest()[0] >= 128
    return mask


# --------------------------------------------------------------------------------------------------
# published single-pass measurements


@dataclass(frozen=True, kw_only=True)
class StepRow:
    """One published timing of a single pass, operator or collective, parsed into SI units.

    Token fields that do not apply to the phase are 0: ``prompt_tokens`` (per prompt) for prefill,
    ``context_tokens`` (KV tokens per sequence at the step) for decode, ``num_tokens`` (rows of the
    GEMMs) for operator rows, ``message_bytes`` for all-reduce rows.
    """

    row_id: str
    source: str
    #: table or figure of the source the number comes from
    reference: str
    model_name: str
    model_id: str | None
    gpu_name: str
    gpu_id: str | None
    tp: int
    pp: int
    num_gpus: int
    phase: Phase
    batch_size: int = 1
    prompt_tokens: int = 0
    context_tokens: int = 0
    num_tokens: int = 0
    message_bytes: float = 0.0
    #: the measured time [s]
    value_s: float
    #: the value times one pipeline stage (half the layers for pp=2), not the whole pipeline
    per_stage: bool = False
    dtype: str
    engine: str
    #: subset of "secondary", "questionable", "approximate", "implied/derived"
    flags: tuple[str, ...] = ()
    #: stated parts of a derived sum, e.g. Vidur's per-projection medians [s]
    components_s: tuple[tuple[str, float], ...] = ()
    assumption: str = ""
    skip_reason: str | None = None

    @property
    def predictable(self) -> bool:
        return self.skip_reason is None


SOURCE_BY_PREFIX = {
    "SWS": "SplitwiseSim",
    "SW": "Splitwise",
    "SS": "Sarathi-Serve",
    "SAR": "SARATHI",
    "VID": "Vidur",
    "VLLM": "vLLM",
    "SGL": "SGLang",
}

#: written model name -> further names tried in the model catalog after the written one
MODEL_CANDIDATES: dict[str, tuple[str, ...]] = {
    "Llama2-70B": ("meta-llama/Llama-2-70b-hf",),
    "Llama-2-70B": ("meta-llama/Llama-2-70b-hf",),
    "LLaMA2-70B": ("meta-llama/Llama-2-70b-hf",),
    "Llama-2-7B": ("meta-llama/Llama-2-7b-hf",),
    "BLOOM-176B": ("bigscience/bloom",),
    "Yi-34B": ("01-ai/Yi-34B",),
    "Mistral-7B": ("mistralai/Mistral-7B-v0.1",),
    "Falcon-180B": ("tiiuae/falcon-180B",),
    "LLaMA-13B": ("huggyllama/llama-13b",),
    "Llama-3 70B (per CI text 'llama-3 70B')": ("meta-llama/Meta-Llama-3-70B",),
    "Llama-3.1 8B": ("meta-llama/Llama-3.1-8B",),
    "Llama-3 8B": ("meta-llama/Meta-Llama-3-8B",),
    "DeepSeek-V3 (671B MoE)": ("deepseek-ai/DeepSeek-V3",),
}

ModelResolver = Callable[[str], "str | None"]
GpuResolver = Callable[[str], bool]


def _gpu_id(written: str, source: str) -> tuple[str | None, str]:
    """Catalog id of a GPU as written, and the assumption made (or '')."""
    if written.startswith(("A100-80GB", "A100 80GB SXM")):
        if source == "Sarathi-Serve":
            return "a100-80gb-pcie", (
                "Sarathi-Serve ran on Azure NC96ads A100 v4 (4 x A100 80GB PCIe, NVLink-bridged pairs, "
                "100 Gbps Ethernet between nodes): read as a100-80gb-pcie, not SXM. "
            )
        return "a100-80gb-sxm", ""
    if written.startswith(("H100-80GB", "H100 80GB")):
        return "h100-sxm", ""
    if written == "H100":
        return "h100-sxm", "H100 form factor not stated: SXM assumed. "
    if written == "H200":
        return "h200-sxm", "H200 form factor not stated: SXM assumed. "
    if written.startswith("H800"):
        return "h800-sxm", ""
    return None, ""


def _flags(row: Mapping[str, str]) -> set[str]:
    text = f"{row['table_or_figure']} {row['notes']}"
    flags = set()
    if re.search(r"secondary", text, re.IGNORECASE):
        flags.add("secondary")
    if re.search(r"questionable|ANOMALY|CAVEAT|use with caution", text, re.IGNORECASE):
        flags.add("questionable")
    if re.search(r"approximate|≈|stated with '?~", text, re.IGNORECASE):
        flags.add("approximate")
    if re.search(r"IMPLIED|DERIVED", text):
        flags.add("implied/derived")
    return flags


def _workload_int(workload: str, name: str) -> int:
    match = re.search(rf"\b{name}=(\d+)", workload)
    if match is None:
        raise ValueError(f"no {name}= in workload {workload!r}")
    return int(match.group(1))


def _to_seconds(value: float, unit: str) -> float:
    if unit == "ms":
        return value * SECONDS_PER_MS
    if unit == "s":
        return value
    raise ValueError(f"not a time unit: {unit!r}")


def _parse_splitwisesim(row: Mapping[str, str]) -> dict[str, Any] | None:
    workload = row["workload(isl/osl/batch/chunk/rate)"]
    isl, osl, batch = (_workload_int(workload, n) for n in ("isl", "osl", "batch"))
    if row["metric"] == "prefill_latency_ms":
        return {"phase": "prefill", "prompt_tokens": isl, "batch_size": batch}
    if row["metric"] == "decode_step_ms (TBT)":
        return {
            "phase": "decode",
            "batch_size": batch,
            "context_tokens": isl + osl // 2,
            "assumption": (
                f"token_time is the mean decode iteration over osl={osl} output tokens, while each "
                f"sequence's KV grows from {isl} to {isl + osl - 1} tokens: predicted at the mean "
                f"context isl + osl/2 = {isl + osl // 2}. "
            ),
        }
    return None


#: Splitwise Table IV traces: (median prompt tokens, median output tokens), from the row notes
_SPLITWISE_TRACES = {"coding": (1500, 13), "conversation": (1020, 129)}


def _parse_splitwise(row: Mapping[str, str]) -> dict[str, Any] | None:
    if row["metric"] not in ("ttft_ms_p50", "tbt_ms_p50"):
        return None
    trace = row["workload(isl/osl/batch/chunk/rate)"].split()[0]
    prompt, output = _SPLITWISE_TRACES[trace]
    common = (
        f"P50 over the {trace} trace served one request at a time (no batching, no queueing); TP not "
        f"stated, TP8 assumed (one 8-GPU DGX machine; matches SplitwiseSim's TP8 profiles). "
    )
    fields: dict[str, Any] = {"tp": 8, "extra_flags": {"approximate"}}
    if row["metric"] == "ttft_ms_p50":
        fields |= {
            "phase": "prefill",
            "prompt_tokens": prompt,
            "assumption": common + f"TTFT read as one prefill of the median prompt ({prompt} tokens). ",
        }
    else:
        context = prompt + output // 2
        fields |= {
            "phase": "decode",
            "context_tokens": context,
            "assumption": common + f"TBT read as a batch-1 decode step at the median prompt + half the "
            f"median output ({context} tokens). ",
        }
    return fields


def _parse_sarathi_serve(row: Mapping[str, str]) -> dict[str, Any] | None:
    number = int(row["id"].split("-")[1])
    if number <= 4:
        return {
            "phase": "decode",
            "batch_size": 32,
            "context_tokens": 4096,
            "value_factor": 1 / 5,
            "assumption": (
                "Table 3 strict TBT SLO = 5 x the measured decode iteration (batch 32, 4k-token prefills): "
                "value = SLO / 5, context 4096 tokens. The SLOs are round numbers, so the implied time "
                "is known only to about the rounding of the SLO. "
            ),
        }
    if number == 5:
        return {
            "phase": "prefill",
            "prompt_tokens": 4096,
            "per_stage": True,
            "assumption": (
                "Deployment of this sentence not restated; TP4-PP2 taken from the paper's Falcon-180B setup. "
                "Read as the time of one pipeline stage: the whole TP4-PP2 pass of 4096 tokens "
                "(~1.5e15 FLOP over 4 GPUs at a time) needs >= 1.2 s even at 100 % of A100 dense peak, and "
                "the paper's bubble arithmetic (1150 - 200 = 950 ms, SS-007) subtracts stage times. "
            ),
        }
    if number == 6:
        return {
            "phase": "decode",
            "batch_size": 32,
            "context_tokens": 4096,
            "per_stage": True,
            "assumption": (
                "Context of the decodes not stated: 4096 assumed (the 4k-prefill requests of Table 3). Read "
                "as one pipeline stage's time, like SS-005 in the same sentence (bubble arithmetic of "
                "SS-007); SS-004 gives the same 200 ms for a whole decode iteration: the two readings "
                "disagree by a factor pp. "
            ),
        }
    return None


def _parse_sarathi(row: Mapping[str, str]) -> dict[str, Any] | None:
    number = int(row["id"].split("-")[1])
    if number == 1:
        return {
            "phase": "decode",
            "batch_size": 4,
            "context_tokens": 1024,
            "value_factor": 4.0,
            "extra_flags": {"implied/derived"},
            "assumption": "Stated per decode token at batch 4: the iteration is 4 x 12.49 ms. ",
        }
    if number in (7, 8, 9):
        tokens = int(re.search(r"(\d+) prefill tokens", row["workload(isl/osl/batch/chunk/rate)"]).group(1))
        return {
            "phase": "prefill",
            "prompt_tokens": tokens,
            "assumption": "An iteration of N prefill tokens read as one prefill of a single N-token prompt. ",
        }
    return None


def _parse_vidur(row: Mapping[str, str]) -> dict[str, Any] | None:
    workload = row["workload(isl/osl/batch/chunk/rate)"]
    if row["metric"].startswith("linear_ops_ms_per_layer"):
        parts = re.findall(r"(\w+)=([\d.]+)", row["notes"].split("stated medians:", 1)[1])
        return {
            "phase": "operator",
            "num_tokens": _workload_int(workload, "num_tokens"),
            "components_s": tuple((name, float(ms) * SECONDS_PER_MS) for name, ms in parts),
            "assumption": (
                "Sum over one layer and one TP shard of qkv (attn_pre_proj), output (attn_post_proj), fused "
                "gate+up (mlp_up_proj), activation (mlp_act) and down projections; mlp_act is elementwise. "
            ),
        }
    if row["metric"] == "allreduce_latency_ms_median":
        match = re.search(r"all_reduce of (\d+) bytes across (\d+) GPUs", workload)
        return {
            "phase": "allreduce",
            "message_bytes": float(match.group(1)),
            "num_gpus": int(match.group(2)),
            "assumption": (
                "Size read as the fp16 buffer's bytes (the profiler stores elements x 2). Vidur's "
                "torch.distributed "
                "NCCL call, outside CUDA graphs. "
            ),
        }
    return None


def _parse_vllm(row: Mapping[str, str]) -> dict[str, Any] | None:
    workload = row["workload(isl/osl/batch/chunk/rate)"]
    if row["metric"] == "e2e_latency_ms_mean":
        isl, osl, batch = (_workload_int(workload, n) for n in ("isl", "osl", "batch"))
        return {
            "phase": "decode",
            "batch_size": batch,
            "context_tokens": isl + osl // 2,
            "value_factor": 1 / osl,
            "extra_flags": {"implied/derived", "approximate"},
            "assumption": (
                f"Implied decode step = e2e / osl: one prefill of {batch}x{isl} tokens (about one step) "
                f"+ {osl - 1} decode steps; context at the mean isl + osl/2 = {isl + osl // 2}. "
            ),
        }
    if row["metric"] == "decode_step_ms":
        return {
            "phase": "decode",
            "batch_size": 1,
            "context_tokens": 512,
            "extra_flags": {"approximate"},
            "assumption": (
                "'1 token every 13 ms under light load': batch 1 assumed; context not stated, 512 assumed "
                "(its KV is < 1 % of the weights' bytes, so the choice barely matters). Pre-v0.6 vLLM, whose "
                "CPU overheads v0.6 removed. "
            ),
        }
    return None


#: SGLang/DeepSeek fixed-batch rows: (id, phase, tokens or batch per device, context, devices per node)
_EP_SKIP = (
    "multi-node expert parallelism with data-parallel attention and two-batch overlap: not one worker's "
    "pass; the step time is implied from per-node throughput"
)


def _parse_sglang(row: Mapping[str, str]) -> dict[str, Any] | None:
    rows = {
        "SGL-004": (
            "decode",
            256,
            2048,
            "decode batch 256 per device at 2K input: step = 256 x 8 / tok/s/node",
        ),
        "SGL-006": (
            "prefill",
            16384,
            4096,
            "16384 prompt tokens per device (4 x 4096): pass = 16384 x 8 / tok/s/node",
        ),
        "SGL-007": (
            "decode",
            128,
            4096,
            "decode batch 128 per device at KV 4096: step = 128 x 8 / tok/s/node",
        ),
    }
    if row["id"] not in rows:
        return None
    phase, per_device, context, text = rows[row["id"]]
    fields: dict[str, Any] = {
        "phase": phase,
        "value_factor": per_device * 8,
        "throughput": True,
        "extra_flags": {"implied/derived"},
        "skip_reason": _EP_SKIP,
        "assumption": text + "; 8 GPUs per node. ",
    }
    if phase == "decode":
        fields |= {"batch_size": per_device, "context_tokens": context}
    else:
        fields |= {"batch_size": per_device // context, "prompt_tokens": context}
    return fields


_PARSERS = {
    "SplitwiseSim": _parse_splitwisesim,
    "Splitwise": _parse_splitwise,
    "Sarathi-Serve": _parse_sarathi_serve,
    "SARATHI": _parse_sarathi,
    "Vidur": _parse_vidur,
    "vLLM": _parse_vllm,
    "SGLang": _parse_sglang,
}


def _int_or(text: str, default: int) -> int:
    match = re.match(r"\s*(\d+)\s*$", text)
    return int(match.group(1)) if match else default


def _default_model_resolver() -> ModelResolver:
    from planner.models import load_model_catalog

    catalog = load_model_catalog()

    def resolve(name: str) -> str | None:
        for candidate in (name, *MODEL_CANDIDATES.get(name, ())):
            try:
                found = catalog.get(candidate)
            except (KeyError, PlannerError):
                found = None
            if found is not None:
                return str(getattr(found, "id", candidate))
        return None

    return resolve


def _default_gpu_resolver() -> GpuResolver:
    from planner.hardware import load_catalog

    catalog = load_catalog()
    return lambda gpu_id: gpu_id in catalog


def published_step_rows(
    shared_dir: Path,
    *,
    resolve_model: ModelResolver | None = None,
    gpu_in_catalog: GpuResolver | None = None,
) -> list[StepRow]:
    """Rows of ``published_measurements.csv`` that time one pass, one layer's linear ops or one all-reduce.

    Parameters
    ----------
    shared_dir : pathlib.Path
        The shared data directory.
    resolve_model : callable, optional
        Written model name -> catalog model id, or None when the catalog lacks it. Default: look the
        written name, then its ``MODEL_CANDIDATES``, up in ``planner.models.load_model_catalog()``.
    gpu_in_catalog : callable, optional
        Catalog GPU id -> whether the hardware catalog holds it. Default: ``planner.hardware.load_catalog()``.

    Returns
    -------
    list of StepRow
        In file order. Rows that cannot be predicted carry a ``skip_reason``.
    """
    resolve_model = resolve_model or _default_model_resolver()
    gpu_in_catalog = gpu_in_catalog or _default_gpu_resolver()
    with open(Path(shared_dir) / PUBLISHED_CSV, newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    rows: list[StepRow] = []
    for record in records:
        source = SOURCE_BY_PREFIX.get(record["id"].rsplit("-", 1)[0])
        if source is None:
            continue
        fields = _PARSERS[source](record)
        if fields is None:
            continue
        rows.append(_step_row(record, source, fields, resolve_model, gpu_in_catalog))
    return rows


def _step_row(
    record: Mapping[str, str],
    source: str,
    fields: dict[str, Any],
    resolve_model: ModelResolver,
    gpu_in_catalog: GpuResolver,
) -> StepRow:
    fields = dict(fields)
    flags = _flags(record) | fields.pop("extra_flags", set())
    factor = fields.pop("value_factor", 1.0)
    value = float(record["value"])
    if fields.pop("throughput", False):
        value_s = factor / value  # tokens per node per pass / (tokens/s per node)
    else:
        value_s = _to_seconds(value, record["unit"]) * factor
    gpu_id, gpu_note = _gpu_id(record["gpu"], source)
    model_name = record["model"]
    model_id = resolve_model(model_name) if model_name in MODEL_CANDIDATES else None
    assumption = gpu_note + fields.pop("assumption", "")
    skip_reason = fields.pop("skip_reason", None)
    if skip_reason is None:
        if gpu_id is None or not gpu_in_catalog(gpu_id):
            skip_reason = f"gpu not in catalog: {record['gpu']}"
        elif model_id is None and fields.get("phase") != "allreduce":
            skip_reason = f"model not in catalog: {model_name}"
    tp = fields.pop("tp", _int_or(record["tp"], 1))
    pp = _int_or(record["pp"], 1)
    num_gpus = fields.pop("num_gpus", _int_or(record["num_gpus"], tp * pp))
    if fields.get("phase") == "allreduce":
        tp = num_gpus
    return StepRow(
        row_id=record["id"],
        source=source,
        reference=record["table_or_figure"],
        model_name=model_name,
        model_id=model_id,
        gpu_name=record["gpu"],
        gpu_id=gpu_id,
        tp=tp,
        pp=pp,
        num_gpus=num_gpus,
        value_s=value_s,
        dtype=record["weight_dtype"],
        engine=record["engine"],
        flags=tuple(sorted(flags)),
        assumption=assumption.strip(),
        skip_reason=skip_reason,
        **fields,
    )


# --------------------------------------------------------------------------------------------------
# serving benchmarks

_SERVING_TEXT_COLUMNS = frozenset(
    {
        "id",
        "backend",
        "backend_version",
        "model",
        "system",
        "precision",
        "mode",
        "gemm_quant_mode",
        "moe_quant_mode",
        "measured_date",
    }
)


def serving_benchmarks(shared_dir: Path) -> list[dict[str, Any]]:
    """Rows of ``serving_benchmarks_h100.csv`` with typed values.

    Text columns stay ``str``; counts become ``int`` and the two measured columns ``float`` [ms];
    an empty cell becomes None. Each row also gets ``measured_ttft_s`` and ``measured_tpot_s`` [s].
    """
    with open(Path(shared_dir) / SERVING_CSV, newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    rows = []
    for record in records:
        row: dict[str, Any] = {}
        for name, text in record.items():
            if name in _SERVING_TEXT_COLUMNS:
                row[name] = text
            elif text == "":
                row[name] = None
            elif name.startswith("measured_"):
                row[name] = float(text)
            else:
                row[name] = int(text)
        for metric in ("ttft", "tpot"):
            ms = row[f"measured_{metric}_ms"]
            row[f"measured_{metric}_s"] = None if ms is None else ms * SECONDS_PER_MS
        rows.append(row)
    return rows
