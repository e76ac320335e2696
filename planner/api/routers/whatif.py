"""``POST /v1/whatif``: many evaluate scenarios in one request, as JSON, CSV or streamed NDJSON."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from planner.api.catalogs import Catalogs, CatalogsDep
from planner.api.deadline import deadline_checkpoint
from planner.api.problems import problem_body, problem_responses, validation_problem_body
from planner.api.routers.evaluate import build_problem, evaluation_response
from planner.api.serving_schemas import EvaluateRequest
from planner.api.settings import Settings, app_settings
from planner.api.whatif_columns import (
    MIN_GROUP,
    GroupResult,
    columnar_group,
    split_csv_rows,
    split_json_row,
    valid_rows,
)
from planner.api.whatif_schemas import MAX_WHATIF_BODY_BYTES, MAX_WHATIF_SCENARIOS, WhatifResponse
from planner.errors import InvalidInput, PlannerError, RequestTooLarge, UnsupportedMediaType
from planner.serving.evaluate import TableMemo, evaluate

router = APIRouter(prefix="/whatif", tags=["whatif"], responses=problem_responses([413, 415, 422, 500, 503]))
SettingsDep = Annotated[Settings, Depends(app_settings)]

JSON, CSV, NDJSON = "application/json", "text/csv", "application/x-ndjson"
#: scenarios evaluated between two NDJSON writes
STREAM_CHUNK = 256
#: response members that echo the request (left out of the CSV, whose input columns already say it)
_ECHOES = ("deployment", "workload", "slo", "model", "engine", "weight_dtype", "kv_dtype")
#: what the first dotted part of a CSV column may be: the evaluate request's top-level members
_EVALUATE_FIELDS = frozenset(info.alias or name for name, info in EvaluateRequest.model_fields.items())
_CSV_EXAMPLE = (
    "model,deployment.mode,deployment.gpu,deployment.parallelism.tp,workload.input_tokens,"
    "workload.output_tokens,workload.arrival.kind,workload.arrival.rate_per_s\n"
    "meta-llama/Llama-3.1-8B,aggregated,h100-sxm,1,2000,300,poisson,2\n"
    "meta-llama/Llama-3.1-8B,aggregated,h100-sxm,1,2000,300,poisson,8\n"
    "meta-llama/Llama-3.1-70B,aggregated,h200-sxm,4,2000,300,poisson,4\n"
)
_JSON_EXAMPLE = [
    {"model": "meta-llama/Llama-3.1-8B", "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
     "workload": {"input_tokens": 2000, "output_tokens": 300, "arrival": {"kind": "poisson", "rate_per_s": r}}}
    for r in (2.0, 8.0)
]


# ------------------------------------------------------------------------------------------------- input
def _cell(text: str) -> Any:
    """A CSV cell as the JSON value it spells: number, boolean, a JSON list/object, or the text.

    A whole number written as a float (``2000.0``, as spreadsheets and pandas write integer columns with
    gaps) is the integer: the scenarios are validated strictly, and a count field takes no float."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if t[:1] in "[{":
        try:
            return json.loads(t)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: the text itself
            return t
    try:
        return int(t)
    except ValueError:
        pass
    try:
        number = float(t)
    except ValueError:
        return t
    return int(number) if number.is_integer() else number


def _nest(row: Mapping[str, str]) -> dict[str, Any]:
    """``{"a.b": "1"}`` → ``{"a": {"b": 1}}``; empty cells are left out (the field takes its default)."""
    out: dict[str, Any] = {}
    for column, text in row.items():
        if column is None or text is None or not str(text).strip():
            continue
        node = out
        parts = column.strip().split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise InvalidInput(f"column {column!r} nests under {part!r}, which another column sets to a value",
                                   field=column)
            node = nxt
        node[parts[-1]] = _cell(str(text))
    return out


class _LazyRows(Sequence[Any]):
    """The CSV scenarios as evaluate request objects, nested from their cells when first asked for (a grouped
    scenario never is); a row whose columns clash is its own ``InvalidInput``."""

    def __init__(self, inputs: Sequence[Mapping[str, str]]) -> None:
        self._inputs = inputs

    def __len__(self) -> int:
        return len(self._inputs)

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        try:
            return _nest(self._inputs[i])
        except InvalidInput as error:  # this row's own problem
            return error


def _too_many(n: int) -> RequestTooLarge:
    return RequestTooLarge(f"{n} scenarios; one request takes at most {MAX_WHATIF_SCENARIOS}",
                           field="body", limit_scenarios=MAX_WHATIF_SCENARIOS, num_scenarios=n)


def _parse_csv(text: str) -> tuple[list[str], list[dict[str, str]]]:
    # newline="": the csv module splits the lines itself (a quoted cell may hold a line break, a lone \r ends
    # a line), as its documentation asks of the files it reads
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        return _read_csv(reader)
    except csv.Error as error:  # a NUL, a cell over the csv module's size limit, ...
        raise InvalidInput(f"the CSV cannot be read (line {reader.line_num}): {error}",
                           field="body") from None


def _read_csv(reader: csv.DictReader[str]) -> tuple[list[str], list[dict[str, str]]]:
    if not reader.fieldnames:
        raise InvalidInput("the CSV has no header row of evaluate field names", field="body")
    for column in reader.fieldnames:
        if column.strip().split(".")[0] not in _EVALUATE_FIELDS:  # every row would fail on it: say so once
            raise InvalidInput(
                f"CSV column {column!r} names no evaluate field; the header's columns start with one of "
                f"{', '.join(sorted(_EVALUATE_FIELDS))}", field="body", column=column)
    rows = []
    for row in reader:
        if len(rows) >= MAX_WHATIF_SCENARIOS:
            raise _too_many(len(rows) + 1 + sum(1 for _ in reader))
        if None in row:
            raise InvalidInput(f"CSV line {reader.line_num} has more cells than the header", field="body")
        rows.append(row)
    return [c for c in reader.fieldnames if c is not None], rows


def _parse_json(raw: bytes) -> list[Any]:
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise InvalidInput(f"the body is not JSON: {error}", field="body") from None
    except RecursionError:
        raise InvalidInput("the body nests arrays or objects deeper than the JSON parser goes (about "
                           f"{sys.getrecursionlimit()} levels)", field="body") from None
    if not isinstance(body, list):
        raise InvalidInput("the JSON body must be an array of evaluate request objects", field="body")
    if len(body) > MAX_WHATIF_SCENARIOS:
        raise _too_many(len(body))
    return body


# ------------------------------------------------------------------------------------------- evaluation
def _answer_rows(rows: Sequence[Any], catalogs: Catalogs, instance: str, start: int = 0,
                 memo: TableMemo | None = None) -> list[dict[str, Any]]:
    """One result or problem per row (JSON-ready), one row at a time; equal deployments share their grid."""
    memo = {} if memo is None else memo
    out = []
    for i, row in enumerate(rows, start=start):
        try:
            if isinstance(row, PlannerError):
                raise row
            if not isinstance(row, dict):
                raise InvalidInput("a scenario must be an object of evaluate request fields", field="body")
            body = EvaluateRequest.model_validate(row)
            problem, notes = build_problem(body, catalogs)
            result = evaluation_response(problem, evaluate(problem, table_memo=memo), notes)
            out.append({"row": i, "status": "ok", "result": result.model_dump(mode="json")})
        except ValidationError as error:
            out.append({"row": i, "status": "error", "error": validation_problem_body(error.errors(), instance)})
        except PlannerError as error:
            out.append({"row": i, "status": "error", "error": problem_body(
                status=error.status, slug=error.slug, title=error.title, detail=error.detail, instance=instance,
                extra=error.extra)})
    return out


#: one scenario's answer: a JSON-ready answer object, or (its group's columns, its index in the group)
Entry = dict[str, Any] | tuple[GroupResult, int]


def _answer_all(num_rows: int, row_of: Callable[[int], Any], splits: Sequence[tuple[Any, dict[str, Any]] | None],
                catalogs: Catalogs, instance: str, checkpoint: Callable[[str], None]) -> list[Entry]:
    """Every scenario's answer, in order: groups that differ only in rate, replicas and SLO as columns
    (``whatif_columns``), the rest row by row. A group whose first scenario is refused for a reason no grouped
    field is part of (an unknown GPU, say) gives every scenario of the group that problem."""
    memo: TableMemo = {}
    answers: list[Entry | None] = [None] * num_rows
    groups: dict[Any, list[int]] = {}
    single: list[int] = []
    for i, split in enumerate(splits):
        if split is None:
            single.append(i)
        else:
            groups.setdefault(split[0], []).append(i)
    for key in list(groups):
        members = groups[key]
        ok = valid_rows(members, [splits[i][1] for i in members])  # type: ignore[index]
        if len(ok) < len(members):
            single.extend(sorted(set(members) - set(ok)))
            groups[key] = ok
    for members in groups.values():
        if not members:
            continue
        if len(members) < MIN_GROUP:
            single.extend(members)
            continue
        checkpoint("a group of scenarios")
        first = row_of(members[0])
        result = columnar_group(first, [splits[i][1] for i in members], catalogs, memo)  # type: ignore[index]
        if result is not None:
            for j, i in enumerate(members):
                answers[i] = (result, j)
            continue
        head = _answer_rows([first], catalogs, instance, start=members[0], memo=memo)[0]
        if head["status"] == "error" and not _names_grouped_field(head["error"]):
            for i in members:
                answers[i] = {**head, "row": i}
        else:
            answers[members[0]] = head
            single.extend(members[1:])
    single.sort()
    for k in range(0, len(single), STREAM_CHUNK):
        checkpoint("scenarios row by row")
        for i in single[k:k + STREAM_CHUNK]:
            if answers[i] is None:
                answers[i] = _answer_rows([row_of(i)], catalogs, instance, start=i, memo=memo)[0]
    return answers  # type: ignore[return-value]


def _names_grouped_field(problem: dict[str, Any]) -> bool:
    """Does a problem name a field a group's scenarios may differ in (or no field at all)? Then it may not hold
    for the group's other scenarios."""
    named = [e.get("field", "") for e in problem.get("errors", [])] or [problem.get("field", "")]
    return any(not f or f == "body" or f.startswith(_GROUPED_PREFIXES) for f in named)


#: the fields (and the objects holding them) a group's scenarios may differ in
_GROUPED_PREFIXES = ("slo", "workload.arrival", "deployment.replicas")


def _answer_texts(entries: list[Entry]) -> list[str]:
    """Each answer as JSON text (a group's rows from its template, see ``GroupResult.json_texts``)."""
    texts: dict[int, list[str] | None] = {}
    out = []
    for i, entry in enumerate(entries):
        if isinstance(entry, tuple):
            group, j = entry
            if id(group) not in texts:
                texts[id(group)] = group.json_texts()
            rows = texts[id(group)]
            if rows is not None:
                out.append(f'{{"row":{i},"status":"ok","result":{rows[j]}}}')
                continue
        out.append(orjson.dumps(_result_of(entry, i)).decode())
    return out


def _result_of(entry: Entry, i: int) -> dict[str, Any]:
    if isinstance(entry, tuple):
        group, j = entry
        return {"row": i, "status": "ok", "result": group.result(j)}
    return entry


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        out[prefix] = " | ".join(str(v) for v in value) if all(not isinstance(v, dict | list) for v in value) \
            else json.dumps(value)
    else:
        out[prefix] = value


def _csv_answer(columns: list[str], inputs: Sequence[Mapping[str, str]], entries: list[Entry]) -> str:
    out_columns: dict[str, None] = {}
    flat_rows: list[tuple[dict[str, Any], str] | None] = []
    groups: dict[int, tuple[GroupResult, dict[str, Any], list[int]]] = {}
    for i, entry in enumerate(entries):
        if isinstance(entry, tuple):
            group = entry[0]
            if id(group) not in groups:
                flat: dict[str, Any] = {}
                _flatten({k: v for k, v in group.template.items() if k not in _ECHOES}, "", flat)
                groups[id(group)] = (group, flat, [])
                out_columns.update(dict.fromkeys(flat))
            groups[id(group)][2].append(i)  # a group's rows come in its own order
            flat_rows.append(None)
            continue
        flat = {}
        if entry["status"] == "ok":
            _flatten({k: v for k, v in entry["result"].items() if k not in _ECHOES}, "", flat)
        out_columns.update(dict.fromkeys(flat))
        flat_rows.append((flat, (entry.get("error") or {}).get("detail", "")))
    header = columns + ["row", "status", "error"] + [c for c in out_columns if c not in columns]
    outputs = header[len(columns) + 3:]
    lines: list[str] = [""] * len(entries)
    # a group's rows column by column (its template's values where they do not vary), joined in C: the csv
    # module's writer and per-field Python code cost several times more
    for group, flat, rows in groups.values():
        varying = group.flat_columns()
        cols: list[Iterable[str]] = [_csv_column([inputs[i].get(c, "") for i in rows]) for c in columns]
        cols += [map(str, rows), repeat("ok"), repeat("")]
        for c in outputs:
            cols.append(_csv_column(varying[c]) if c in varying else repeat(_csv_field(
                "" if flat.get(c) is None else flat[c])))
        for i, line in zip(rows, map(",".join, zip(*cols, strict=False)), strict=False):
            lines[i] = line
    sink = _LineSink()
    writer = csv.writer(sink, lineterminator="")
    for i, (src, entry, done) in enumerate(zip(inputs, entries, flat_rows, strict=True)):
        if done is not None:
            flat, err = done
            writer.writerow([src.get(c, "") for c in columns] + [entry["row"], entry["status"], err]  # type: ignore[index]
                            + ["" if flat.get(c) is None else flat[c] for c in outputs])
            lines[i] = sink.last
    sink.last = ""
    writer.writerow(header)
    return sink.last + "\n" + "".join(line + "\n" for line in lines)


class _LineSink:
    """The file the csv writer writes one row to at a time."""

    last = ""

    def write(self, text: str) -> int:
        self.last = text
        return len(text)


def _csv_column(values: list[Any]) -> list[str]:
    """A column of values as CSV fields (None is an empty field). Floats are written by orjson (shortest
    round-trip form, as repr, several times faster)."""
    kinds = set(map(type, values))
    if kinds == {float}:
        return orjson.dumps(values)[1:-1].decode().split(",") if values else []
    if kinds == {str}:
        joined = "".join(values)
        if _NEEDS_QUOTES.search(joined) is None:
            return values
    return [_csv_field("" if v is None else v) for v in values]


_NEEDS_QUOTES = re.compile(r'[",\r\n]')


def _csv_field(value: Any) -> str:
    """One CSV field as the csv module writes it (minimal quoting, "" inside quotes)."""
    text = value if type(value) is str else str(value)
    if _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + text.replace('"', '""') + '"'


def _preferred(accept: str) -> str:
    """The first of JSON, CSV and NDJSON by the Accept header's q-values (JSON on ties or none)."""
    best, best_q = JSON, -1.0
    for order, item in enumerate(accept.split(",")):
        media, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for p in params:
            if p.startswith("q="):
                try:
                    q = float(p[2:])
                except ValueError:
                    q = 0.0
        media = media.lower()
        choice = {JSON: JSON, CSV: CSV, NDJSON: NDJSON, "application/ndjson": NDJSON, "application/*": JSON,
                  "text/*": CSV, "*/*": JSON}.get(media)
        if choice is not None and q > best_q + 1e-12 * order:
            best, best_q = choice, q
    return best


# ------------------------------------------------------------------------------------------------ route
_OPENAPI = {
    "requestBody": {
        "required": True,
        "description": (f"At most {MAX_WHATIF_SCENARIOS} scenarios and {MAX_WHATIF_BODY_BYTES} bytes. A JSON array "
                        "of evaluate request bodies, or a CSV file whose header names evaluate fields (dotted for "
                        "nested ones: `deployment.gpu`, `workload.arrival.rate_per_s`), one scenario per row; an "
                        "empty cell leaves the field at its default, a cell holding a JSON list or object (a "
                        "sample list, say) is read as JSON."),
        "content": {
            JSON: {"schema": {"type": "array", "maxItems": MAX_WHATIF_SCENARIOS,
                              "items": {"$ref": "#/components/schemas/EvaluateRequest"}},
                   "example": _JSON_EXAMPLE},
            CSV: {"schema": {"type": "string"}, "example": _CSV_EXAMPLE},
        },
    },
    "responses": {"200": {"content": {
        CSV: {"schema": {"type": "string"},
              "example": "model,...,row,status,error,ttft_s.mean,...\n"},
        NDJSON: {"schema": {"type": "string"},
                 "example": '{"row": 0, "status": "ok", "result": {"...": "..."}}\n'},
    }, "description": "One answer per scenario, by the request's Accept: JSON (default), CSV (the input "
                      "columns, then row, status, error and the dotted evaluate outputs) or NDJSON (one "
                      "object per line, streamed)."}},
}


@router.post("", response_model=WhatifResponse, openapi_extra=_OPENAPI)
async def whatif(request: Request, catalogs: CatalogsDep, settings: SettingsDep) -> Response:
    """Evaluate many scenarios in one request: a JSON array of evaluate bodies or a CSV upload with one scenario
    per row. A bad scenario answers its own problem in its row and never fails the batch; scenarios on the
    same deployment and lengths share the cost model's grid. Answers as JSON, CSV or streamed NDJSON, by
    ``Accept``."""
    content_type = request.headers.get("content-type", JSON).split(";")[0].strip().lower()
    if content_type not in (JSON, CSV, "application/csv"):
        raise UnsupportedMediaType(f"unsupported Content-Type {content_type!r}: send application/json or text/csv",
                                   field="content-type")
    raw = await request.body()
    instance = request.url.path
    if content_type == JSON:
        rows: Sequence[Any] = _parse_json(raw)
        columns: list[str] = []
        inputs: list[dict[str, str]] = [{} for _ in rows]
        splits = [split_json_row(row) for row in rows]
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidInput("the CSV is not UTF-8 text", field="body") from None
        columns, inputs = _parse_csv(text)
        rows = _LazyRows(inputs)
        splits = split_csv_rows(columns, inputs, _cell)
    media = _preferred(request.headers.get("accept", JSON))
    checkpoint = deadline_checkpoint(settings.whatif_deadline_s)
    answers = await run_in_threadpool(_answer_all, len(rows), rows.__getitem__, splits, catalogs, instance,
                                      checkpoint)
    if media == NDJSON:
        texts = await run_in_threadpool(_answer_texts, answers)

        def lines() -> Iterator[bytes]:
            for start in range(0, len(texts), STREAM_CHUNK):
                yield ("\n".join(texts[start:start + STREAM_CHUNK]) + "\n").encode()

        return StreamingResponse(lines(), media_type=NDJSON)
    if media == CSV:
        if not columns:  # JSON in, CSV out: the input columns are the scenarios' dotted fields
            flat_inputs = []
            for i in range(len(rows)):
                row = rows[i]
                flat: dict[str, Any] = {}
                _flatten(row if isinstance(row, dict) else {}, "", flat)
                flat_inputs.append({k: "" if v is None else str(v) for k, v in flat.items()})
            columns = list(dict.fromkeys(k for f in flat_inputs for k in f))
            inputs = flat_inputs
        body = await run_in_threadpool(_csv_answer, columns, inputs, answers)
        return Response(content=body, media_type=CSV)
    texts = await run_in_threadpool(_answer_texts, answers)
    n_ok = sum(1 for a in answers if isinstance(a, tuple) or a["status"] == "ok")
    head = f'{{"num_scenarios":{len(texts)},"num_ok":{n_ok},"num_errors":{len(texts) - n_ok},"results":['
    return Response(content=(head + ",".join(texts) + "]}").encode(), media_type=JSON)
