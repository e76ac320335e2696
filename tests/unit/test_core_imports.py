"""The numeric core never imports the web stack: only planner.api and planner.cli may."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Walk planner/ without importing the excluded packages (pkgutil.walk_packages would import them).
_PROBE = """
import importlib, json, pkgutil, sys
EXCLUDED = {"planner.api", "planner.cli"}
imported = []
def walk(package):
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if info.name in EXCLUDED:
            continue
        module = importlib.import_module(info.name)
        imported.append(info.name)
        if info.ispkg:
            walk(module)
walk(importlib.import_module("planner"))
web = sorted({name.split(".")[0] for name in sys.modules} & {"fastapi", "pydantic", "pydantic_core",
             "pydantic_settings", "starlette", "uvicorn", "typer"})
print(json.dumps({"imported": imported, "web": web}))
"""


def test_core_modules_do_not_import_fastapi_or_pydantic() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # the walk really reached the core, so an empty "web" list means something
    core = {"planner.units", "planner.errors", "planner.hardware", "planner.models", "planner.costs.types"}
    assert core <= set(report["imported"])
    assert report["web"] == []
