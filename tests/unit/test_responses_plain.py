"""``planner.api.responses.plain``: the routes' fast ``asdict``."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from typing import NamedTuple

from planner.api.responses import plain
from planner.serving.types import LatencyStats


def test_plain_is_asdict_without_the_copy() -> None:
    class Pair(NamedTuple):
        a: float
        b: LatencyStats

    stats = LatencyStats(mean=1.0, p50=0.5, p90=2.0, p99=3.0)

    @dataclasses.dataclass
    class Holder:
        name: str
        stats: LatencyStats
        many: tuple
        listed: list
        mapping: dict
        pair: Pair
        nothing: None = None

    h = Holder(name="x", stats=stats, many=(stats, 2), listed=[stats, "y"], mapping={"k": stats},
               pair=Pair(1.5, stats))
    got = plain(h)
    assert got == asdict(h)
    assert type(got["many"]) is tuple and type(got["listed"]) is list and type(got["pair"]) is Pair
