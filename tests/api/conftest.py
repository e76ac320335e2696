"""In-process API tests: one app per session (catalogs load once), httpx over ASGITransport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from planner.api import create_app
from planner.api.settings import Settings

SHARED = Path(__file__).resolve().parents[3] / "shared"
BASE_URL = "http://planner.test"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def app() -> FastAPI:
    # explicit settings: a PLANNER_HARDWARE_DIR in the caller's environment must not leak in
    return create_app(Settings(hardware_dir=None))


def make_client(app: FastAPI, **transport_options: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, **transport_options), base_url=BASE_URL)


@pytest.fixture(scope="session")
def client_for() -> Callable[..., httpx.AsyncClient]:
    """``client_for(app, **transport_options)``: an unopened client of another app."""
    return make_client


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared reference data (``../shared`` beside the checkout)."""
    return SHARED


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(app) as c:
        yield c


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem of this status and type; returns its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"/problems/{slug}"
    assert body["status"] == status
    assert body["title"] and body["detail"]
    assert body["instance"] == response.request.url.path
    return body


@pytest.fixture
def problem() -> Callable[[httpx.Response, int, str], dict[str, Any]]:
    return assert_problem
