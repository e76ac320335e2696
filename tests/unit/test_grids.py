"""The serving models' cheap stand-ins for numpy helpers give numpy's answers bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.serving.grids import broadcast_view, geometric_grid, sorted_unique
from planner.serving.queueing import take_rows

positive = st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(start=positive, stop=positive, num=st.integers(min_value=1, max_value=200))
def test_geometric_grid_is_numpys_geomspace(start: float, stop: float, num: int) -> None:
    ours, numpys = geometric_grid(start, stop, num), np.geomspace(start, stop, num)
    assert ours.dtype == numpys.dtype and ours.shape == numpys.shape
    assert np.array_equal(ours, numpys)


def test_geometric_grid_on_the_grids_evaluate_builds() -> None:
    for start, stop, num in ((1.0, 1.0, 20), (1.0, 199.4, 20), (1e-3, 256.0, 48), (1e-6, 0.9, 48),
                             (1e-4, 0.1, 32)):
        assert np.array_equal(geometric_grid(start, stop, num), np.geomspace(start, stop, num))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=0, max_size=30))
def test_sorted_unique_is_numpys_unique(values: list[float]) -> None:
    a = np.array(values, dtype=np.float64)
    assert np.array_equal(sorted_unique(a), np.unique(a))
    increasing = np.unique(a)
    assert np.array_equal(sorted_unique(increasing), np.unique(increasing))


def test_broadcast_view_gives_broadcast_tos_values() -> None:
    rng = np.random.default_rng(0)
    for shape_in, shape_out in (((5,), (5,)), ((5,), (1, 5)), ((5,), (3, 5)), ((1, 5), (4, 5)), ((), (3,)),
                                ((3, 1), (3, 4)), ((2, 3), (1, 1, 2, 3))):
        a = rng.normal(size=shape_in)
        out = broadcast_view(a, shape_out)
        assert out.shape == shape_out
        assert np.array_equal(out, np.broadcast_to(a, shape_out))
    assert np.array_equal(broadcast_view(2.5, (3,)), np.full(3, 2.5))


def test_take_rows_is_take_along_axis() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(size=(6, 9))
    idx = rng.integers(0, 9, size=(6, 4))
    assert np.array_equal(take_rows(a, idx), np.take_along_axis(a, idx, axis=1))
    order = np.argsort(a, axis=1)
    assert np.array_equal(take_rows(a, order), np.take_along_axis(a, order, axis=1))
