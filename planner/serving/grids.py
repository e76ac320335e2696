"""Numeric helpers of the serving models, cheaper than numpy's general ones on the evaluate hot paths."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def geometric_grid(start: float, stop: float, num: int) -> FloatArray:
    """``np.geomspace(start, stop, num)`` for positive scalars and ``num`` ≥ 2, bit for bit.

    The same operations in the same order as numpy's (``logspace`` of the endpoints' base-10 logarithms,
    ``linspace``'s ``arange · step + start`` with the last point set to the stop, then the endpoints set
    exactly), without its generality: one call costs ~15 µs in numpy, mostly argument handling, and an
    evaluate call makes several (``tests/unit/test_grids.py`` compares the two)."""
    if not (start > 0.0 and stop > 0.0) or num < 2:
        return np.geomspace(start, stop, num)
    log_start, log_stop = np.log10(np.float64(start)), np.log10(np.float64(stop))
    delta = log_stop - log_start
    div = num - 1
    y = np.arange(0, num, dtype=np.float64)
    step = delta / div
    if step == 0:  # numpy's branch for a step that underflows (gh-5437)
        y /= div
        y *= delta
    else:
        y *= step
    y += log_start
    y[-1] = log_stop
    out = np.power(10.0, y)
    out[0] = start
    out[-1] = stop
    return out


def broadcast_view(a: NDArray[np.generic] | float, shape: tuple[int, ...]) -> NDArray[np.generic]:
    """``np.broadcast_to(a, shape)``, or ``a`` itself when it has that shape already (most calls on the hot
    paths): numpy's function costs a few microseconds of argument handling even then. Like its result, the
    array returned is for reading only."""
    have = getattr(a, "shape", None)
    if have == shape:
        return a  # type: ignore[return-value]
    if have is not None and len(have) < len(shape) and have == shape[len(shape) - len(have):] and all(
            d == 1 for d in shape[:len(shape) - len(have)]):
        return a.reshape(shape)  # type: ignore[union-attr]  # only new leading axes of length 1: a view
    return np.broadcast_to(a, shape)


def sorted_unique(a: FloatArray) -> FloatArray:
    """``np.unique`` of a 1-D array: ``a`` itself when it is strictly increasing already (the grids built
    here usually are; numpy's unique sorts, and costs ~10 µs at any size)."""
    if a.ndim == 1 and bool(np.all(a[1:] > a[:-1])):
        return a
    return np.unique(a)
