"""The optional API key, CORS origins from the settings, and one structured access-log line per request
that never carries the request body."""

from __future__ import annotations

import json
import logging

import pytest

from planner.api import create_app
from planner.api.middleware import ACCESS_LOGGER
from planner.api.settings import Settings

pytestmark = pytest.mark.anyio

BODY = {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm", "prompt_tokens": 1000}


async def test_an_api_key_gates_the_api_but_not_the_spec(client_for, problem):
    app = create_app(Settings(hardware_dir=None, api_key="s3cret", access_log=False))
    async with client_for(app) as client:
        for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer nope"}):
            r = await client.post("/v1/estimate/prefill", json=BODY, headers=headers)
            problem(r, 401, "unauthorized")
            assert "X-API-Key" in r.headers["www-authenticate"]
        for headers in ({"X-API-Key": "s3cret"}, {"Authorization": "Bearer s3cret"}):
            assert (await client.post("/v1/estimate/prefill", json=BODY, headers=headers)).status_code == 200
        assert (await client.get("/openapi.json")).status_code == 200
        assert (await client.get("/v1/gpus")).status_code == 401


async def test_no_key_configured_means_open(client):
    assert (await client.post("/v1/estimate/prefill", json=BODY)).status_code == 200


async def test_cors_allows_the_configured_origins_only(client_for):
    app = create_app(Settings(hardware_dir=None, cors_origins=("https://dash.example",), access_log=False))
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    async with client_for(app) as client:
        ok = await client.options("/v1/evaluate", headers={"Origin": "https://dash.example"} | preflight)
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://dash.example"
        other = await client.options("/v1/evaluate", headers={"Origin": "https://evil.example"} | preflight)
        assert "access-control-allow-origin" not in other.headers
        simple = await client.get("/v1/gpus", headers={"Origin": "https://dash.example"})
        assert simple.headers["access-control-allow-origin"] == "https://dash.example"


def test_cors_origins_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("PLANNER_CORS_ORIGINS", "https://a.example, https://b.example")
    assert Settings().cors_origins == ("https://a.example", "https://b.example")
    monkeypatch.setenv("PLANNER_CORS_ORIGINS", '["*"]')
    assert Settings().cors_origins == ("*",)


async def test_one_access_line_per_request_without_the_body(client_for, caplog):
    app = create_app(Settings(hardware_dir=None))
    marker = "do-not-log-this-body-4f1c"
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with client_for(app) as client:
        ok = await client.post("/v1/estimate/prefill", json=BODY, headers={"X-Request-ID": "run-42"})
        bad = await client.post("/v1/estimate/prefill", json=BODY | {"model": marker})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert len(lines) == 2
    first, second = lines
    assert first["request_id"] == "run-42" == ok.headers["x-request-id"]
    assert (first["method"], first["path"], first["status"]) == ("POST", "/v1/estimate/prefill", 200)
    assert first["duration_s"] > 0 and first["bytes_out"] == len(ok.content) and first["bytes_in"] > 0
    assert second["status"] == bad.status_code == 404 and len(second["request_id"]) == 32
    assert all(marker not in r.getMessage() for r in caplog.records)


async def test_an_odd_request_id_is_replaced_not_echoed(client_for, caplog):
    app = create_app(Settings(hardware_dir=None))
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with client_for(app) as client:
        r = await client.get("/v1/gpus", headers={"X-Request-ID": 'x"\n{"forged": true}'})
    assert r.headers["x-request-id"] != 'x"\n{"forged": true}' and len(r.headers["x-request-id"]) == 32
