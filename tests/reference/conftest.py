"""Reference data for the tests in this directory: the shared data directory and the published rows.

The shared directory is the ``shared/`` sibling of the checkout (as in CI), or ``$PLANNER_SHARED_DIR``.
A test that takes a ``published_row`` argument runs once per predictable published step row
(``planner.validation.published_step_rows``), with the marks its module's ``row_marks(row)`` returns.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import pytest

from planner.validation.datasets import StepRow, published_step_rows

SHARED_DIR = Path(os.environ.get("PLANNER_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))


@lru_cache(maxsize=1)
def _published_rows() -> tuple[StepRow, ...]:
    if not (SHARED_DIR / "data").is_dir():
        return ()
    return tuple(published_step_rows(SHARED_DIR))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED_DIR / "data").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DIR} (set PLANNER_SHARED_DIR)")
    return SHARED_DIR


@pytest.fixture(scope="session")
def published_rows(shared_dir: Path) -> tuple[StepRow, ...]:
    return _published_rows()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "published_row" not in metafunc.fixturenames:
        return
    marks = getattr(metafunc.module, "row_marks", lambda row: ())
    params = [
        pytest.param(row, id=row.row_id, marks=marks(row)) for row in _published_rows() if row.predictable
    ]
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(reason=f"no shared data at {SHARED_DIR}"))]
    metafunc.parametrize("published_row", params)
