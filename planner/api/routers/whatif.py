"""``POST /v1/whatif``: many evaluate scenarios in one request, as JSON, CSV or streamed NDJSON."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from planner.api.catalogs import Catalogs, CatalogsDep
from planner.api.problems import problem_body, problem_responses, validation_problem_body
from planner.api.routers.evaluate import build_problem, evaluation_response
from planner.api.serving_schemas import EvaluateRequest
from planner.api.whatif_schemas import MAX_WHATIF_BODY_BYTES, MAX_WHATIF_SCENARIOS, WhatifResponse
from planner.errors import InvalidInput, PlannerError, RequestTooLarge, UnsupportedMediaType
from planner.serving.evaluate import TableMemo, evaluate

router = APIRouter(prefix="/whatif", tags=["whatif"], responses=problem_responses([413, 415, 422, 500]))

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
    """One result or problem per row (JSON-ready); scenarios of equal deployments share their cost grid."""
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


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        out[prefix] = " | ".join(str(v) for v in value) if all(not isinstance(v, dict | list) for v in value) \
            else json.dumps(value)
    else:
        out[prefix] = value


def _csv_answer(columns: list[str], inputs: list[dict[str, str]], answers: list[dict[str, Any]]) -> str:
    flat_rows, out_columns = [], {}
    for ans in answers:
        flat: dict[str, Any] = {}
        if ans["status"] == "ok":
            result = {k: v for k, v in ans["result"].items() if k not in _ECHOES}
            _flatten(result, "", flat)
        for k in flat:
            out_columns.setdefault(k, None)
        err = ans.get("error") or {}
        flat_rows.append((ans, flat, err.get("detail", "")))
    header = columns + ["row", "status", "error"] + [c for c in out_columns if c not in columns]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for src, (ans, flat, err) in zip(inputs, flat_rows, strict=True):
        writer.writerow([src.get(c, "") for c in columns] + [ans["row"], ans["status"], err]
                        + ["" if flat.get(c) is None else flat[c] for c in header[len(columns) + 3:]])
    return buf.getvalue()


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
                      "object per line, streamed as rows are evaluated)."}},
}


@router.post("", response_model=WhatifResponse, openapi_extra=_OPENAPI)
async def whatif(request: Request, catalogs: CatalogsDep) -> Response:
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
        rows: list[Any] = _parse_json(raw)
        columns: list[str] = []
        inputs: list[dict[str, str]] = [{} for _ in rows]
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidInput("the CSV is not UTF-8 text", field="body") from None
        columns, inputs = _parse_csv(text)
        rows = []
        for src in inputs:
            try:
                rows.append(_nest(src))
            except InvalidInput as error:  # this row's own problem
                rows.append(error)
    media = _preferred(request.headers.get("accept", JSON))
    if media == NDJSON:
        memo: TableMemo = {}

        def lines() -> Iterator[bytes]:
            for start in range(0, len(rows), STREAM_CHUNK):
                for ans in _answer_rows(rows[start:start + STREAM_CHUNK], catalogs, instance, start, memo):
                    yield (json.dumps(ans, separators=(",", ":")) + "\n").encode()

        return StreamingResponse(lines(), media_type=NDJSON)
    answers = await run_in_threadpool(_answer_rows, rows, catalogs, instance)
    if media == CSV:
        if not columns:  # JSON in, CSV out: the input columns are the scenarios' dotted fields
            flat_inputs = []
            for row in rows:
                flat: dict[str, Any] = {}
                _flatten(row if isinstance(row, dict) else {}, "", flat)
                flat_inputs.append({k: "" if v is None else str(v) for k, v in flat.items()})
            columns = list(dict.fromkeys(k for f in flat_inputs for k in f))
            inputs = flat_inputs
        body = await run_in_threadpool(_csv_answer, columns, inputs, answers)
        return Response(content=body, media_type=CSV)
    n_ok = sum(1 for a in answers if a["status"] == "ok")
    out = {"num_scenarios": len(answers), "num_ok": n_ok, "num_errors": len(answers) - n_ok, "results": answers}
    return Response(content=json.dumps(out, separators=(",", ":")), media_type=JSON)
