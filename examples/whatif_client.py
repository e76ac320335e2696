"""Batch what-if through the Python client generated from the spec: the same CSV in, an answer CSV out.

Generate the client once, from the checkout's root (``openapi-python-client`` is a dev dependency)::

    openapi-python-client generate --path openapi/openapi.json --output-path planner_client --meta none

then run this with the directory holding ``planner_client/`` on the import path, the service running::

    PYTHONPATH=. python examples/whatif_client.py --url http://127.0.0.1:8000 \\
        --input examples/scenarios.csv --output answers.csv

The generated client speaks JSON to ``/v1/whatif`` (it has no typed form of the CSV body), so each CSV row
becomes a typed ``EvaluateRequest`` here: its dotted columns nest (``deployment.gpu`` → ``{"deployment":
{"gpu": ...}}``), numbers and booleans are read as such, an empty cell leaves the field at its default. A
row that is not an evaluate request at all (a required field missing) answers its error without being
sent; the service answers every other row's problem in its own row. The answer CSV has the input
columns, then ``row``, ``status`` and ``error``, then the dotted evaluate outputs (``ttft_s.mean``, ...).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from planner_client import Client
from planner_client.api.whatif import whatif
from planner_client.models import EvaluateRequest, WhatifResponse

HERE = Path(__file__).resolve().parent
#: response members that echo the request (its columns already say them)
ECHOES = ("deployment", "workload", "slo", "model", "engine", "weight_dtype", "kv_dtype")


def cell(text: str) -> Any:
    """A CSV cell as the JSON value it spells: a boolean, a number, a JSON list or object, or the text."""
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t[:1] in "[{":
        return json.loads(t)
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


def nest(row: dict[str, str]) -> dict[str, Any]:
    """``{"deployment.gpu": "h100-sxm"}`` → ``{"deployment": {"gpu": "h100-sxm"}}``, empty cells left out."""
    out: dict[str, Any] = {}
    for column, text in row.items():
        if not text or not text.strip():
            continue
        *parents, leaf = column.strip().split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = cell(text)
    return out


def flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Nested members as dotted columns; lists as JSON."""
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = json.dumps(value) if isinstance(value, list) else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the service (default: %(default)s)")
    parser.add_argument("--input", type=Path, default=HERE / "scenarios.csv", help="default: %(default)s")
    parser.add_argument("--output", default="-", help="answer CSV file, - for standard output (default)")
    args = parser.parse_args(argv)

    reader = csv.DictReader(io.StringIO(args.input.read_text(encoding="utf-8-sig")))
    columns = list(reader.fieldnames or [])
    inputs = list(reader)

    bodies: list[EvaluateRequest] = []
    sent: list[int] = []  # the input row of each body sent
    answers: dict[int, tuple[str, str, dict[str, Any]]] = {}  # row -> (status, error, dotted outputs)
    for i, row in enumerate(inputs):
        try:
            bodies.append(EvaluateRequest.from_dict(nest(row)))
        except (KeyError, TypeError, ValueError) as error:
            answers[i] = ("error", f"not an evaluate request: {error!r}", {})
            continue
        sent.append(i)

    client = Client(base_url=args.url, timeout=httpx.Timeout(300.0, connect=10.0))
    with client:
        reply = whatif.sync_detailed(client=client, body=bodies)
    if not isinstance(reply.parsed, WhatifResponse):  # the whole batch was refused: a problem says why
        print(f"{reply.status_code}: {reply.content.decode(errors='replace')}", file=sys.stderr)
        return 1
    for answer in reply.parsed.results:
        i = sent[answer.row]
        outputs: dict[str, Any] = {}
        if answer.result:
            result = {k: v for k, v in answer.result.to_dict().items() if k not in ECHOES}
            flatten(result, "", outputs)
        problem = answer.error.to_dict() if answer.error else {}
        answers[i] = (answer.status.value, str(problem.get("detail", "")), outputs)

    output_columns = list(dict.fromkeys(c for _, _, outputs in answers.values() for c in outputs))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*columns, "row", "status", "error", *output_columns])
    for i, row in enumerate(inputs):
        status, error, outputs = answers[i]
        cells = ["" if outputs.get(c) is None else outputs[c] for c in output_columns]
        writer.writerow([*(row.get(c, "") for c in columns), i, status, error, *cells])
    if args.output == "-":
        sys.stdout.write(buffer.getvalue())
    else:
        Path(args.output).write_text(buffer.getvalue(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
