"""The committed spec equals what the app serves, and documents every route's problems."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from planner.api.export_openapi import DEFAULT_PATH, main, render_openapi

pytestmark = pytest.mark.anyio

HANDLERS = {"list_gpus", "get_gpu", "list_models", "get_model", "estimate_prefill", "estimate_decode"}


def _operations(spec: dict) -> list[dict]:
    return [op for path in spec["paths"].values() for op in path.values()]


def test_committed_spec_is_current():
    assert DEFAULT_PATH.read_text(encoding="utf-8") == render_openapi(), (
        "openapi/openapi.json is stale: run python -m planner.api.export_openapi"
    )


def test_check_mode_fails_on_a_stale_file(tmp_path: Path):
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    assert main(["--check", "--output", str(stale)]) == 1
    assert main(["--output", str(stale)]) == 0
    assert main(["--check", "--output", str(stale)]) == 0
    assert stale.read_text().endswith("}\n")


async def test_served_spec_equals_the_committed_one(client):
    served = (await client.get("/openapi.json")).json()
    assert served == json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))


def test_operation_ids_are_handler_names_and_errors_are_documented():
    spec = json.loads(render_openapi())
    operations = _operations(spec)
    ids = {op["operationId"] for op in operations}
    assert HANDLERS <= ids
    assert not ids & set(dir(builtins))
    for op in operations:
        assert "500" in op["responses"], op["operationId"]
        for status, response in op["responses"].items():
            if not status.startswith("2"):
                assert list(response["content"]) == ["application/problem+json"], (op["operationId"], status)
    schemas = spec["components"]["schemas"]
    assert {"Problem", "ValidationProblem", "FieldError"} <= set(schemas)
    prefill = spec["paths"]["/v1/estimate/prefill"]["post"]["responses"]
    assert {"404", "413", "422"} <= set(prefill)
