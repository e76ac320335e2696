"""PLANNER_HARDWARE_DIR adds accelerators to the service's catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.api import create_app
from planner.api.settings import Settings, get_settings
from planner.hardware import builtin_catalog_dir

pytestmark = pytest.mark.anyio


def _user_catalog(tmp_path: Path) -> Path:
    entry = json.loads((builtin_catalog_dir() / "h100-sxm.json").read_text())
    entry["id"] = "lab-h100"
    (tmp_path / "lab-h100.json").write_text(json.dumps(entry))
    return tmp_path


def test_settings_read_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PLANNER_HARDWARE_DIR", str(tmp_path))
    assert Settings().hardware_dir == tmp_path


async def test_hardware_dir_setting_adds_a_gpu(tmp_path, client_for, app, problem):
    custom = create_app(Settings(hardware_dir=_user_catalog(tmp_path)))
    async with client_for(custom) as client:
        response = await client.get("/v1/gpus/lab-h100")
        assert response.status_code == 200
        assert response.json()["hbm_bandwidth_bytes_per_s"] > 0
    async with client_for(app) as client:
        problem(await client.get("/v1/gpus/lab-h100"), 404, "unknown-gpu")


async def test_settings_dependency_can_be_overridden(tmp_path, client_for):
    custom = create_app()
    custom.dependency_overrides[get_settings] = lambda: Settings(hardware_dir=_user_catalog(tmp_path))
    async with client_for(custom) as client:
        ids = [g["id"] for g in (await client.get("/v1/gpus")).json()["gpus"]]
    assert "lab-h100" in ids and "h100-sxm" in ids
