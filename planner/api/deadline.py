"""Deadlines on the long searches: a checkpoint the searches call between stages, reading the clock here, at
the API edge (the core never reads it)."""

from __future__ import annotations

import time
from collections.abc import Callable

from planner.errors import DeadlineExceeded


def deadline_checkpoint(seconds: float, *, clock: Callable[[], float] = time.monotonic) -> Callable[[str], None]:
    """A checkpoint that raises ``DeadlineExceeded`` (503) once ``seconds`` have passed since it was made.

    The problem names the deadline, the stage the search had reached and the seconds it had run, and says how
    to narrow the search; ``PLANNER_SEARCH_DEADLINE_S`` sets the deadline.
    """
    start = clock()

    def checkpoint(stage: str) -> None:
        elapsed = clock() - start
        if elapsed > seconds:
            raise DeadlineExceeded(
                f"the search passed its {seconds:g} s deadline at the stage '{stage}' after {elapsed:.3g} s; "
                "narrow it (fewer GPUs, tensor-parallel degrees, modes, token budgets or batch limits) or ask "
                "the operator to raise PLANNER_SEARCH_DEADLINE_S",
                deadline_s=seconds,
                elapsed_s=round(elapsed, 6),
                stage=stage,
            )

    return checkpoint
