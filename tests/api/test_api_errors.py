"""Every error leaves as application/problem+json: 422 naming the field, 404, 405, 413, 500."""

from __future__ import annotations

import json

import pytest

from planner.api import create_app
from planner.api.catalogs import get_catalogs
from planner.api.schemas import MAX_BATCH_SIZE, MAX_TOKENS
from planner.errors import ModelDoesNotFit

pytestmark = pytest.mark.anyio

PREFILL = "/v1/estimate/prefill"
VALID = {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm", "prompt_tokens": 512}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"prompt_tokens": -5}, "prompt_tokens"),
        ({"prompt_tokens": MAX_TOKENS + 1}, "prompt_tokens"),
        ({"batch_size": MAX_BATCH_SIZE + 1}, "batch_size"),
        ({"engine": "tgi"}, "engine"),
        ({"weight_dtype": "fp6"}, "weight_dtype"),
        ({"colour": "blue"}, "colour"),
        ({"parallelism": {"tp": 0}}, "parallelism.tp"),
        ({"parallelism": {"tp": 2, "cp": 2}}, "parallelism.cp"),
        ({"model_config": {"model_type": "llama"}}, "model_config"),
        ({"cached_tokens": 512}, "cached_tokens"),
        ({"model": None}, "model"),
    ],
)
async def test_invalid_input_is_422_naming_the_field(client, problem, changes, field):
    body = {k: v for k, v in (VALID | changes).items() if v is not None}
    errors = problem(await client.post(PREFILL, json=body), 422, "validation-error")["errors"]
    assert field in [e["field"] for e in errors]
    assert all(e["msg"] and e["type"] for e in errors)


async def test_422_detail_names_the_field(client, problem):
    body = problem(await client.post(PREFILL, json=VALID | {"prompt_tokens": 0}), 422, "validation-error")
    assert "prompt_tokens" in body["detail"]


async def test_malformed_json_is_422(client, problem):
    response = await client.post(PREFILL, content=b'{"gpu": ', headers={"content-type": "application/json"})
    assert problem(response, 422, "validation-error")["errors"][0]["field"] == "body"


async def test_a_body_that_is_not_utf8_is_a_declared_400(app, client, problem):
    body = b'{"gpu": "\xff"}'
    response = await client.post(PREFILL, content=body, headers={"content-type": "application/json"})
    problem(response, 400, "bad-request")
    assert "400" in app.openapi()["paths"][PREFILL]["post"]["responses"]


async def test_unknown_route_is_a_404_problem(client, problem):
    problem(await client.get("/v1/nowhere"), 404, "not-found")


async def test_wrong_method_is_a_405_problem(client, problem):
    response = await client.get(PREFILL)
    problem(response, 405, "method-not-allowed")
    assert "POST" in response.headers["allow"]


async def test_declared_oversize_body_is_413(client, problem):
    padding = "x" * (1024 * 1024)
    body = problem(await client.post(PREFILL, json=VALID | {"padding": padding}), 413, "request-too-large")
    assert body["limit_bytes"] == 1024 * 1024


async def test_streamed_oversize_body_is_413(client, problem):
    async def chunks():
        yield b'{"padding": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}'

    response = await client.post(PREFILL, content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    problem(response, 413, "request-too-large")


async def test_oversize_inline_model_config_is_413(client, problem):
    config = {"model_type": "llama", "notes": "y" * (300 * 1024)}
    request = {"model_config": config, "gpu": "h100-sxm", "prompt_tokens": 512}
    assert len(json.dumps(request)) < 1024 * 1024
    body = problem(await client.post(PREFILL, json=request), 413, "request-too-large")
    assert body["field"] == "model_config"


async def test_unexpected_failure_is_a_generic_500_problem(client_for, problem):
    app = create_app()

    def broken_catalogs():
        raise RuntimeError("secret internal state")

    app.dependency_overrides[get_catalogs] = broken_catalogs
    async with client_for(app, raise_app_exceptions=False) as client:
        response = await client.get("/v1/gpus")
    body = problem(response, 500, "internal-error")
    assert "secret" not in response.text and "Traceback" not in response.text
    assert set(body) == {"type", "title", "status", "detail", "instance"}


async def test_non_finite_numbers_in_a_domain_error_become_null(client_for, problem):
    app = create_app()

    def no_room():
        raise ModelDoesNotFit("no room", kv_capacity_tokens=0, tokens_per_byte=float("inf"))

    app.dependency_overrides[get_catalogs] = no_room
    async with client_for(app) as client:
        body = problem(await client.get("/v1/gpus"), 422, "model-does-not-fit")
    assert body["tokens_per_byte"] is None and body["kv_capacity_tokens"] == 0
