"""A request hands work to FastAPI's thread pool once: for its endpoint, not for the dependencies.

FastAPI runs every plain-function dependency in the pool, a hand-off to a worker thread and back for a
look-up that takes a microsecond; the settings and catalog dependencies are coroutines so that a request
pays that once. The count is taken where FastAPI calls the pool (its two ``run_in_threadpool`` imports).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastapi.dependencies.utils as dependency_utils
import fastapi.routing as routing
import pytest

from planner.api import create_app
from planner.api.settings import Settings, get_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
def handoffs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions FastAPI sends to its thread pool during the test."""
    seen: list[str] = []

    def counting(original: Callable[..., Any]) -> Callable[..., Any]:
        async def run(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            seen.append(getattr(func, "__name__", repr(func)))
            return await original(func, *args, **kwargs)

        return run

    for module in (routing, dependency_utils):
        monkeypatch.setattr(module, "run_in_threadpool", counting(module.run_in_threadpool))
    return seen


async def test_a_gpu_lookup_hands_off_only_its_endpoint(client, handoffs):
    response = await client.get("/v1/gpus/h100-sxm")
    assert response.status_code == 200
    assert len(handoffs) == 1, handoffs


async def test_an_evaluation_hands_off_only_its_endpoint(client, handoffs):
    body = {"model": "meta-llama/Llama-3.1-8B", "deployment": {"mode": "aggregated", "gpu": "h100-sxm"},
            "workload": {"input_tokens": 1000, "output_tokens": 100,
                         "arrival": {"kind": "poisson", "rate_per_s": 1.0}}}
    response = await client.post("/v1/evaluate", json=body)
    assert response.status_code == 200, response.text
    assert len(handoffs) == 1, handoffs


async def test_overridden_settings_are_still_read(client_for, handoffs):
    # an app built without settings reads get_settings, or what dependency_overrides puts in its place
    marker = Settings(hardware_dir=None, search_deadline_s=7.0)
    seen: list[float] = []
    custom = create_app()

    def override() -> Settings:
        seen.append(marker.search_deadline_s)
        return marker

    custom.dependency_overrides[get_settings] = override
    async with client_for(custom) as c:
        assert (await c.get("/v1/gpus/h100-sxm")).status_code == 200
    assert seen == [7.0]
    assert len(handoffs) == 1, handoffs
