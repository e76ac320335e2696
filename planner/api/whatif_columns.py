"""The columnar what-if path: scenarios that differ only in their open-loop rate, replica count and SLO are
one group, validated once through the request model and evaluated as columns (``planner.serving.batch``).

A group's first scenario goes through the same validation and ``build_problem`` as ``/v1/evaluate``; the
others only differ in the grouped fields, which are checked here against the same bounds the request model
declares (a value outside them, or of another JSON type, sends that scenario down the row-by-row path, which
answers its own problem). Answers equal what ``/v1/evaluate`` gives each scenario: ``evaluate`` itself runs the
same batch evaluation for one open-loop aggregated scenario.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from pydantic import ValidationError

from planner.api.catalogs import Catalogs
from planner.api.routers.evaluate import build_problem, evaluation_response, inherited_efficiency_notes
from planner.api.schemas import MAX_LATENCY_S, MAX_RATE_PER_S, MAX_WORKERS, MIN_LATENCY_S, MIN_RATE_PER_S
from planner.api.serving_schemas import EvaluateRequest
from planner.errors import PlannerError
from planner.serving.batch import (
    LIMITING,
    UTILIZATIONS,
    evaluate_open_loop_rows,
    row_evaluation,
    rows_warnings,
)
from planner.serving.evaluate import TableMemo, replica_model
from planner.serving.types import AggregatedDeployment

RATE, REPLICAS = "workload.arrival.rate_per_s", "deployment.replicas"
TTFT, ITL, TTFT_PCT, ITL_PCT = "slo.ttft_s", "slo.itl_s", "slo.ttft_percentile", "slo.itl_percentile"
#: the dotted fields a group's scenarios may differ in
GROUPED = (RATE, REPLICAS, TTFT, ITL, TTFT_PCT, ITL_PCT)
_SLO_KEYS = ("ttft_s", "itl_s", "ttft_percentile", "itl_percentile")
#: smallest group worth the columnar path (a lone scenario takes the row-by-row one)
MIN_GROUP = 2
_LATENCIES = ("ttft_s", "itl_s", "tpot_s", "e2e_latency_s")
_STATS = ("mean", "p50", "p90", "p99")
_BREAKDOWN = ("queue", "prefill", "kv_transfer", "overheads")


def valid_grouped(path: str, value: Any) -> bool:
    """Does ``value`` pass the request model's own checks for the grouped field ``path`` (strict JSON types:
    no booleans for numbers, whole numbers for counts)?"""
    if path == REPLICAS:
        return type(value) is int and 1 <= value <= MAX_WORKERS
    if value is None:
        return path in (TTFT, ITL)
    if type(value) not in (int, float) or not math.isfinite(_as_float(value)):
        return False
    if path == RATE:
        return MIN_RATE_PER_S <= value <= MAX_RATE_PER_S
    if path in (TTFT, ITL):
        return MIN_LATENCY_S <= value <= MAX_LATENCY_S
    return 0.0 < value < 100.0


#: closed bounds of the grouped fields (the percentiles' are open: (0, 100))
_BOUNDS = {RATE: (MIN_RATE_PER_S, MAX_RATE_PER_S), TTFT: (MIN_LATENCY_S, MAX_LATENCY_S),
           ITL: (MIN_LATENCY_S, MAX_LATENCY_S), REPLICAS: (1, MAX_WORKERS)}


def valid_rows(members: Sequence[int], values: Sequence[Mapping[str, Any]]) -> list[int]:
    """The members whose grouped values all pass :func:`valid_grouped` (a group's scenarios give the same
    grouped fields, so each field is checked as one column: its JSON types, then its bounds with numpy)."""
    if not values:
        return []
    bad = np.zeros(len(values), dtype=bool)
    for path in values[0]:
        column = [v[path] for v in values]
        kinds = set(map(type, column))
        if kinds == ({int} if path == REPLICAS else {float}):  # the plain case: bounds only, with numpy
            numbers = np.array(column, dtype=np.int64 if path == REPLICAS else np.float64)
            low, high = _BOUNDS.get(path, (0.0, 100.0))
            with np.errstate(invalid="ignore"):
                if path in _BOUNDS:
                    bad |= ~((numbers >= low) & (numbers <= high))
                else:
                    bad |= ~((numbers > low) & (numbers < high))
            continue
        if path == REPLICAS:
            typed = np.array([type(x) is int for x in column])
            numbers = np.array([x if t else 1 for x, t in zip(column, typed.tolist(), strict=True)], dtype=object)
            ok = typed & (numbers >= 1) & (numbers <= MAX_WORKERS)
        else:
            typed = np.array([type(x) is int or type(x) is float or (x is None and path in (TTFT, ITL))
                              for x in column])
            numbers = np.array([_as_float(x) if t else np.nan for x, t in zip(column, typed.tolist(), strict=True)])
            low, high = _BOUNDS.get(path, (0.0, 100.0))
            closed = path in _BOUNDS
            with np.errstate(invalid="ignore"):
                inside = (numbers >= low) & (numbers <= high) if closed else (numbers > low) & (numbers < high)
            none = np.array([x is None for x in column])
            ok = typed & (inside | none)
        bad |= ~ok
    return [m for m, b in zip(members, bad.tolist(), strict=True) if not b]


def _json_column(values: list[Any]) -> list[str]:
    """Each value as JSON text; a column of floats is formatted by one orjson call."""
    kinds = set(map(type, values))
    if kinds == {float}:
        return orjson.dumps(values)[1:-1].decode().split(",") if values else []
    if len(kinds) == 1 and kinds <= {list} and all(x is values[0] for x in values):  # shared warnings
        shared = orjson.dumps(values[0]).decode()
        return [shared] * len(values)
    cache: dict[int, str] = {}
    return [cache.get(id(x)) or cache.setdefault(id(x), orjson.dumps(x).decode()) if type(x) is list
            else orjson.dumps(x).decode() for x in values]


def _with_none(values: np.ndarray, none: np.ndarray) -> list[Any]:
    out = values.tolist()
    for j in np.flatnonzero(none).tolist():
        out[j] = None
    return out


def _as_float(x: Any) -> float:
    try:
        return np.nan if x is None else float(x)
    except OverflowError:  # a whole number past the float range
        return np.inf


def split_json_row(row: Any) -> tuple[str, dict[str, Any]] | None:
    """(group key, grouped values) of a JSON scenario: the key is the scenario without its grouped fields,
    plus which of them it gives. None: not an object, or nothing to group it by."""
    if not isinstance(row, dict):
        return None
    found: dict[str, Any] = {}
    rest = dict(row)
    workload = row.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("arrival"), dict):
        arrival = dict(workload["arrival"])
        if "rate_per_s" in arrival:
            found[RATE] = arrival.pop("rate_per_s")
        rest["workload"] = {**workload, "arrival": arrival}
    deployment = row.get("deployment")
    if isinstance(deployment, dict) and "replicas" in deployment:
        deployment = dict(deployment)
        found[REPLICAS] = deployment.pop("replicas")
        rest["deployment"] = deployment
    slo = row.get("slo")
    if isinstance(slo, dict):
        slo = dict(slo)
        for key in _SLO_KEYS:
            if key in slo:
                found[f"slo.{key}"] = slo.pop(key)
        rest["slo"] = slo
    try:
        key = json.dumps(rest, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return None
    return f"{key}|{','.join(sorted(found))}", found


def split_csv_rows(columns: Sequence[str], inputs: Sequence[Mapping[str, str]],
                   cell: Callable[[str], Any]) -> list[tuple[Any, dict[str, Any]] | None]:
    """(group key, grouped values) of each CSV scenario: the key is its other cells, plus which grouped
    columns it fills."""
    grouped = [(c, c.strip()) for c in columns if c.strip() in GROUPED]
    others = [c for c in columns if c.strip() not in GROUPED]
    # the csv module's rows hold every header column (None past a short row's end)
    other_cells = itemgetter(*others) if len(others) > 1 else (lambda src: (src[others[0]],) if others else ())
    paths = [path for _, path in grouped]
    grouped_cells = itemgetter(*[c for c, _ in grouped]) if len(grouped) > 1 else (
        lambda src: (src[grouped[0][0]],) if grouped else ())
    out: list[tuple[Any, dict[str, Any]] | None] = []
    for src in inputs:
        found = {}
        for path, text in zip(paths, grouped_cells(src), strict=True):
            if text and not text.isspace():
                # the quick route for plain numbers (read as ``cell`` reads them: the replica count as a whole
                # number, every other grouped field as a number, where 4 and 4.0 are one)
                try:
                    found[path] = int(text) if path == REPLICAS else float(text)
                except ValueError:
                    found[path] = cell(text)
        out.append(((other_cells(src), tuple(found)), found))  # the filled grouped columns, in header order
    return out


class GroupResult:
    """A group's answers as columns: the first scenario's whole ``/v1/evaluate`` answer as the template, and
    per scenario the values that differ from it, one list per dotted output (``ttft_s.p90``). :meth:`result`
    builds one scenario's answer (what ``/v1/evaluate`` gives it); :meth:`json_texts` its JSON text;
    :meth:`flat_columns` the dotted output columns for CSV."""

    def __init__(self, template: dict[str, Any], values: dict[str, list[Any]], slo_given: bool) -> None:
        self.template = template
        self.values = values
        self.slo_given = slo_given
        self._nested = [(name, [(key, values[f"{name}.{key}"]) for key in keys]) for name, keys in _NESTED]

    def result(self, j: int) -> dict[str, Any]:
        v, res = self.values, dict(self.template)
        for name, parts in self._nested:
            res[name] = {key: column[j] for key, column in parts}
        for name in _SCALARS:
            res[name] = v[name][j]
        res["deployment"] = {**self.template["deployment"], "replicas": v["replicas"][j]}
        work = self.template["workload"]
        res["workload"] = {**work, "arrival": {**work["arrival"], "rate_per_s": v["rate_per_s"][j]}}
        if self.slo_given:
            res["slo"] = {key: v[f"slo.{key}"][j] for key in _SLO_OUT}
        return res

    def json_texts(self) -> list[str] | None:
        """Each scenario's answer as JSON text, equal as JSON to ``orjson.dumps(self.result(j))``: the
        template is serialized once with a marker in every place that varies, and each row is its pieces
        joined with its own values (formatted a column at a time). None when a marker cannot be placed
        unambiguously (the row-by-row serialization is used then)."""
        v, marked = self.values, dict(self.template)
        slots: list[list[str]] = []

        def mark(column: list[Any]) -> str:
            slots.append(_json_column(column))
            return f"@@planner-slot-{len(slots) - 1}@@"

        for name, parts in self._nested:
            marked[name] = {key: mark(column) for key, column in parts}
        for name in _SCALARS:
            marked[name] = mark(v[name])
        marked["deployment"] = {**self.template["deployment"], "replicas": mark(v["replicas"])}
        work = self.template["workload"]
        marked["workload"] = {**work, "arrival": {**work["arrival"], "rate_per_s": mark(v["rate_per_s"])}}
        if self.slo_given:
            marked["slo"] = {key: mark(v[f"slo.{key}"]) for key in _SLO_OUT}
        text = orjson.dumps(marked).decode()
        pieces = re.split(r'"@@planner-slot-(\d+)@@"', text)
        order = [int(k) for k in pieces[1::2]]
        if sorted(order) != list(range(len(slots))):
            return None
        columns: list[Any] = []
        for k, piece in enumerate(pieces[0::2]):
            columns.append(repeat(piece))
            if k < len(order):
                columns.append(slots[order[k]])
        return list(map("".join, zip(*columns, strict=False)))

    def flat_columns(self) -> dict[str, list[Any]]:
        """Dotted column → one value per scenario, for every output that varies in the group (the rest are
        the template's)."""
        v = self.values
        out = {f"{name}.{key}": column for name, parts in self._nested for key, column in parts}
        for name in _SCALARS:
            out[name] = [" | ".join(w) for w in v[name]] if name == "warnings" else v[name]
        return out


#: the answer's scalar members that differ between a group's scenarios
_SCALARS = ("requests_per_s", "throughput_output_tokens_per_s", "throughput_output_tokens_per_s_per_gpu",
            "output_tokens_per_s_per_user", "mean_decode_batch", "num_gpus", "feasible", "limiting_resource",
            "slo_attainment_fraction", "goodput_requests_per_s", "warnings")
_SLO_OUT = ("ttft_s", "ttft_percentile", "itl_s", "itl_percentile")
_NESTED = tuple((name, _STATS) for name in _LATENCIES) + (("ttft_breakdown_s", _BREAKDOWN),
                                                           ("utilization", UTILIZATIONS))


def columnar_group(row: Any, values: Sequence[Mapping[str, Any]], catalogs: Catalogs,
                   memo: TableMemo) -> GroupResult | None:
    """A group's answers: ``row`` is the first scenario's whole request, ``values`` each scenario's grouped
    fields (already checked with :func:`valid_grouped`). None: the group is not an open-loop aggregated one
    the columns evaluate (the row-by-row path answers it), or some number came out non-finite."""
    try:
        body = EvaluateRequest.model_validate(row)
        problem, notes = build_problem(body, catalogs)
    except (ValidationError, PlannerError):
        return None
    dep, w = problem.deployment, problem.workload
    if not isinstance(dep, AggregatedDeployment) or w.arrival.kind == "closed_loop":
        return None
    if not dep.chunked_prefill and dep.token_budget < w.input_tokens.max:
        return None  # evaluate refuses it: each row says so
    try:
        model = replica_model(problem, memo)
    except PlannerError:
        return None
    rate = np.array([float(v[RATE]) for v in values])
    replicas = np.array([v.get(REPLICAS, 1) for v in values], dtype=np.int64)
    slo = problem.slo
    slo_kw: dict[str, np.ndarray] = {}
    if slo is not None:
        def col(path: str, default: float | None) -> np.ndarray:
            return np.array([np.nan if (x := v.get(path, default)) is None else float(x) for v in values])

        slo_kw = {"ttft_target_s": col(TTFT, None), "itl_target_s": col(ITL, None),
                  "ttft_percentile": col(TTFT_PCT, 90.0), "itl_percentile": col(ITL_PCT, 99.0)}
    rows = evaluate_open_loop_rows(problem, model, rate, replicas, **slo_kw)
    numbers = np.concatenate([rows.ttft_s, rows.itl_s, rows.tpot_s, rows.e2e_latency_s, rows.ttft_breakdown_s,
                              rows.utilization, np.stack([rows.requests_per_s, rows.output_tokens_per_s_per_user,
                                                          rows.throughput_output_tokens_per_s_per_gpu,
                                                          rows.mean_decode_batch], axis=1)], axis=1)
    if not np.all(np.isfinite(numbers)):
        return None
    template = evaluation_response(problem, row_evaluation(rows, 0, slo), notes).model_dump(mode="json")
    prefix = notes + inherited_efficiency_notes([dep.gpu])
    warnings = rows_warnings(rows, prefix, slo_kw.get("itl_percentile"), slo_kw.get("itl_target_s"))
    frac = rows.slo_attainment_fraction
    values_out: dict[str, list[Any]] = {}
    for name, keys in _NESTED:
        table = getattr(rows, name)
        for k, key in enumerate(keys):
            values_out[f"{name}.{key}"] = table[:, k].tolist()
    none = ~np.isfinite(frac)
    values_out |= {
        "requests_per_s": rows.requests_per_s.tolist(),
        "throughput_output_tokens_per_s": rows.throughput_output_tokens_per_s.tolist(),
        "throughput_output_tokens_per_s_per_gpu": rows.throughput_output_tokens_per_s_per_gpu.tolist(),
        "output_tokens_per_s_per_user": rows.output_tokens_per_s_per_user.tolist(),
        "mean_decode_batch": rows.mean_decode_batch.tolist(), "num_gpus": rows.num_gpus.tolist(),
        "feasible": rows.feasible.tolist(), "limiting_resource": [LIMITING[k] for k in rows.limiting.tolist()],
        "slo_attainment_fraction": _with_none(frac, none),
        "goodput_requests_per_s": _with_none(rows.goodput_requests_per_s, none),
        "warnings": warnings, "replicas": replicas.tolist(), "rate_per_s": rate.tolist(),
    }
    if slo is not None:
        for key, arr in zip(_SLO_OUT, (slo_kw["ttft_target_s"], slo_kw["ttft_percentile"], slo_kw["itl_target_s"],
                                       slo_kw["itl_percentile"]), strict=True):
            values_out[f"slo.{key}"] = _with_none(arr, np.isnan(arr))
    return GroupResult(template, values_out, slo is not None)


def evaluate_sweep(request: Mapping[str, Any], catalogs: Catalogs, *, rate_per_s: Any, replicas: Any = None,
                   ttft_s: Any = None, itl_s: Any = None, ttft_percentile: Any = None,
                   itl_percentile: Any = None) -> dict[str, Any]:
    """Evaluate one open-loop aggregated scenario at many (rate, replicas, SLO) points, in-process, as columns.

    ``request`` is an evaluate request body (its own rate, replicas and SLO values are replaced by the
    columns); the columns are array-likes of one length (``replicas`` and the SLO ones may be omitted: the
    request's value, or none). Returns the dotted outputs of ``/v1/evaluate`` (``ttft_s.p90``, ...) as numpy
    arrays, and ``warnings`` as one list per point: what ``/v1/whatif`` answers for the same rows.

    Raises
    ------
    InvalidInput
        A column of another length, or a value outside the request model's bounds (names the column and
        the first bad index); a request that is not an open-loop aggregated one.
    """
    from planner.errors import InvalidInput

    rate = np.atleast_1d(np.asarray(rate_per_s, dtype=np.float64))
    n = rate.size
    given = {RATE: rate, REPLICAS: replicas, TTFT: ttft_s, ITL: itl_s, TTFT_PCT: ttft_percentile,
             ITL_PCT: itl_percentile}
    columns: dict[str, np.ndarray] = {}
    for path, value in given.items():
        if value is None:
            continue
        arr = np.atleast_1d(np.asarray(value, dtype=np.int64 if path == REPLICAS else np.float64))
        if arr.shape != (n,):
            raise InvalidInput(f"column {path} has {arr.size} values for {n} rates", field=path)
        low, high = _BOUNDS.get(path, (0.0, 100.0))
        with np.errstate(invalid="ignore"):
            ok = (arr >= low) & (arr <= high) if path in _BOUNDS else (arr > low) & (arr < high)
        if path in (TTFT, ITL):
            ok |= np.isnan(arr)  # NaN: no such target at that point
        if not np.all(ok):
            k = int(np.flatnonzero(~ok)[0])
            raise InvalidInput(f"column {path}, index {k}: {arr[k]} is outside [{low}, {high}]", field=path,
                               index=k)
        columns[path] = arr
    body = json.loads(json.dumps(request))  # a copy the first point's values go into
    first = {path: (None if np.isnan(a[0]) else float(a[0])) if a.dtype.kind == "f" else int(a[0])
             for path, a in columns.items()}
    for path, value in first.items():
        node = body
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    problem, notes = build_problem(EvaluateRequest.model_validate(body), catalogs)
    dep, w = problem.deployment, problem.workload
    if not isinstance(dep, AggregatedDeployment) or w.arrival.kind == "closed_loop":
        raise InvalidInput("a sweep evaluates an open-loop (poisson or gamma) aggregated deployment; send other "
                           "scenarios to /v1/whatif", field="deployment")
    if not dep.chunked_prefill and dep.token_budget < w.input_tokens.max:
        raise InvalidInput(f"without chunked prefill the token budget ({dep.token_budget}) must hold the longest "
                           f"prompt ({int(w.input_tokens.max)} tokens), as vLLM requires",
                           field="deployment.token_budget")
    slo = problem.slo
    slo_kw: dict[str, np.ndarray] = {}
    if slo is not None:
        def col(path: str, default: float | None) -> np.ndarray:
            return columns.get(path, np.full(n, np.nan if default is None else default))

        slo_kw = {"ttft_target_s": col(TTFT, slo.ttft_s), "itl_target_s": col(ITL, slo.itl_s),
                  "ttft_percentile": col(TTFT_PCT, slo.ttft_percentile),
                  "itl_percentile": col(ITL_PCT, slo.itl_percentile)}
    reps = columns.get(REPLICAS, np.full(n, dep.replicas, dtype=np.int64))
    rows = evaluate_open_loop_rows(problem, replica_model(problem, {}), rate, reps, **slo_kw)
    out: dict[str, Any] = {}
    for name, keys in _NESTED:
        table = getattr(rows, name)
        for k, key in enumerate(keys):
            out[f"{name}.{key}"] = table[:, k]
    out |= {"requests_per_s": rows.requests_per_s, "throughput_output_tokens_per_s": rows.throughput_output_tokens_per_s,
            "throughput_output_tokens_per_s_per_gpu": rows.throughput_output_tokens_per_s_per_gpu,
            "output_tokens_per_s_per_user": rows.output_tokens_per_s_per_user,
            "mean_decode_batch": rows.mean_decode_batch, "num_gpus": rows.num_gpus, "feasible": rows.feasible,
            "limiting_resource": np.array(LIMITING)[rows.limiting],
            "slo_attainment_fraction": rows.slo_attainment_fraction,
            "goodput_requests_per_s": rows.goodput_requests_per_s}
    prefix = notes + inherited_efficiency_notes([dep.gpu])
    out["warnings"] = rows_warnings(rows, prefix, slo_kw.get("itl_percentile"), slo_kw.get("itl_target_s"))
    return out
