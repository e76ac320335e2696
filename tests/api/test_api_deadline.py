"""Deadlines on the long searches: past ``PLANNER_SEARCH_DEADLINE_S`` a plan answers a 503 problem that names
the deadline and the stage reached; the searches call their checkpoint between stages, and a checkpoint that
raises stops them."""

from __future__ import annotations

import pytest

from planner.api import create_app
from planner.api.deadline import deadline_checkpoint
from planner.api.settings import Settings
from planner.errors import DeadlineExceeded

pytestmark = pytest.mark.anyio


def _example(spec: dict, schema: str) -> dict:
    return spec["components"]["schemas"][schema]["examples"][0]


@pytest.mark.parametrize(
    ("path", "schema"),
    [("/v1/plan", "PlanRequest"), ("/v1/plan/chunked", "PlanChunkedRequest"),
     ("/v1/plan/disaggregated", "PlanDisaggregatedRequest")],
)
async def test_a_search_past_its_deadline_answers_503(client_for, problem, path, schema):
    app = create_app(Settings(hardware_dir=None, search_deadline_s=1e-9, access_log=False))
    body = _example(app.openapi(), schema)
    async with client_for(app) as client:
        r = await client.post(path, json=body)
        got = problem(r, 503, "deadline-exceeded")
        assert r.headers["retry-after"] == "1"
        assert got["deadline_s"] == 1e-9 and got["elapsed_s"] >= 0 and got["stage"]
        assert "PLANNER_SEARCH_DEADLINE_S" in got["detail"]


async def test_the_default_deadline_lets_the_example_plan_finish(client_for):
    app = create_app(Settings(hardware_dir=None, access_log=False))
    async with client_for(app) as client:
        r = await client.post("/v1/plan", json=_example(app.openapi(), "PlanRequest"))
        assert r.status_code == 200, r.text


def test_the_deadline_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("PLANNER_SEARCH_DEADLINE_S", "2.5")
    assert Settings().search_deadline_s == 2.5
    monkeypatch.setenv("PLANNER_SEARCH_DEADLINE_S", "0")
    with pytest.raises(ValueError):
        Settings()


def test_the_checkpoint_raises_only_past_the_deadline():
    now = [100.0]
    check = deadline_checkpoint(2.0, clock=lambda: now[0])
    now[0] = 101.9
    check("grids")  # within the deadline: nothing happens
    now[0] = 102.5
    with pytest.raises(DeadlineExceeded) as info:
        check("verification")
    assert info.value.status == 503
    assert info.value.extra == {"deadline_s": 2.0, "elapsed_s": 2.5, "stage": "verification"}
