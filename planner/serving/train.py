"""The periodic orbit of a chunked fixed-length closed loop that runs as a train.

N clients send requests of the same prompt and output length, each its next one a front-end time h after its
last finished; the engine admits the running decodes first and fills the rest of its token budget with
prompt chunks (FCFS, the partly prefilled prompt first). Nothing in that system is random: from the
benchmark's start (every client's first request at once) it settles into a periodic orbit in a few cycles of
the loop, and that orbit, not a queue in equilibrium, is what a benchmark of it measures. The groups of
requests that get their first token in the same iteration finish in the same iteration and come back
together; how the returning groups pack into the next iterations decides the orbit's TTFTs and which
iterations the streams decode through.

:func:`chunked_orbit` steps that deterministic system forward, iteration by iteration (a run of decode-only
iterations in one step, up to the next completion or the iteration in which the next request arrives, where
the scheduler stops the run), from the burst start, discards the first cycles and returns the TTFTs and token
gaps of the rest. The engine is idle only when nothing decodes and nothing waits; a request arriving then
starts an iteration of its own at once, so requests arriving together at an idle engine go in two
iterations: the first alone, the others after it (what the reference simulation's scheduler does, and an
engine loop that wakes on its first input). It is exact for the scheduler it describes, given the cost
model's iteration times (``decode_s``, ``mixed_s``); what it leaves out is the jitter of a real front end,
which the caller weighs with the engine's ``closed_loop_coherence``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

#: cycles of the loop (completions of one client) stepped before measuring, and in each of the two windows
#: measured; the orbit of the reference simulation's small loops (4 … 64 clients) settles within three
#: cycles of the burst start
WARMUP_CYCLES = 4
MEASURED_CYCLES = 6
#: the two windows agree to this (mean TTFT, mean gap, rate), or the orbit has not settled
SETTLED_TOLERANCE = 0.01
#: the largest orbit stepped (:func:`orbit_steps`, ~1 µs each): beyond it the caller keeps the cohort law
MAX_ORBIT_STEPS = 30_000


@dataclass(frozen=True)
class Orbit:
    """What a benchmark of the orbit measures: each measured request's TTFT from its issue [s], the token
    gaps the streams see (values [s] and their shares of all gaps), and the loop's request rate [1/s]."""

    ttft_s: FloatArray
    gap_s: FloatArray
    gap_weight: FloatArray
    requests_per_s: float

    def mean_gap_s(self) -> float:
        return float(np.dot(self.gap_s, self.gap_weight))


def orbit_steps(clients: int, prompt_tokens: int, token_budget: int) -> int:
    """A bound on the steps of :func:`chunked_orbit`: per cycle, the iterations that carry the prompts
    (⌈N·Lp / budget⌉, more beside the decodes), and per request a completion, an arrival that stops a run
    of decode-only iterations and an idle start."""
    per_cycle = math.ceil(clients * prompt_tokens / max(token_budget - clients, token_budget / 2.0, 1.0))
    return (WARMUP_CYCLES + 2 * MEASURED_CYCLES) * (per_cycle + 3 * clients + 2)


def chunked_orbit(clients: int, prompt_tokens: int, output_tokens: int, token_budget: int, max_batch: int,
                  front_end_s: float, decode_s: Callable[[int], float],
                  mixed_s: Callable[[int, int], float]) -> Orbit | None:
    """Step a chunked fixed-length closed loop of ``clients`` from the burst start (see the module's
    docstring). ``decode_s(b)`` is a decode-only iteration of ``b`` sequences, ``mixed_s(b, n)`` one with
    ``n`` prompt tokens beside ``b`` decodes [s]. Needs ``clients``, the lengths, the budget and the batch
    at least 1 and ``front_end_s`` ≥ 0.

    Two windows of ``MEASURED_CYCLES`` cycles each are measured after ``WARMUP_CYCLES``, each from one of
    client 0's completions to another (the same phase of the orbit, so a window holds whole periods of any
    period that divides its length); the second is returned if the two agree within
    ``SETTLED_TOLERANCE`` and each meets Little's law to that, else None: the loop is still drifting
    (short outputs behind a long front end, or more clients than batch slots, can take tens of cycles to
    fall into step, if they do), and a closed form of it would be a guess."""
    if min(clients, prompt_tokens, output_tokens, token_budget, max_batch) < 1 or not front_end_s >= 0.0:
        raise ValueError("clients, lengths, token budget and max batch must be >= 1, the front end >= 0")
    lp, steps_out, h = int(prompt_tokens), int(output_tokens) - 1, float(front_end_s)
    issued = [0.0] * clients  # issue time of each client's request in flight
    done = [0] * clients  # prompt tokens prefilled
    arrivals: list[tuple[float, int, int]] = []  # (time at the scheduler, order, client): the front end
    waiting: deque[int] = deque(range(clients))  # the burst: every first request seen by the first iteration
    partial = -1  # the client whose prompt is partly prefilled
    finishes: list[tuple[int, int]] = []  # (decode iteration of the last token, client) of the decodes
    decoded = 0  # decode iterations so far (a stream finishes when this passes its mark)
    admitted = 0  # sequences admitted (prefilling or decoding), against max_batch
    laps, order, t = 0, 0, h
    window = -1  # the window being measured (0, 1), -1 during the warm-up
    starts = [0.0, 0.0]
    ttft: tuple[list[float], list[float]] = ([], [])
    gaps: tuple[dict[float, float], dict[float, float]] = ({}, {})
    completed = [0, 0]
    for _ in range(2 * orbit_steps(clients, lp, token_budget)):
        b = len(finishes)
        chunks: list[tuple[int, int]] = []
        left = token_budget - b
        if partial >= 0 and left > 0:
            n = min(lp - done[partial], left)
            chunks.append((partial, n))
            left -= n
        while left > 0 and waiting and admitted < max_batch:
            c = waiting.popleft()
            admitted += 1
            n = min(lp - done[c], left)
            chunks.append((c, n))
            left -= n
        if not chunks and not b:  # idle: the next arrival starts an iteration of its own
            t_next, _, c = heapq.heappop(arrivals)
            t = max(t, t_next)
            waiting.append(c)
            continue
        if chunks:
            dur, k = mixed_s(b, sum(n for _, n in chunks)), 1
        else:  # decode-only iterations up to the next completion, or the one in which a request arrives
            dur = decode_s(b)
            k = finishes[0][0] - decoded
            if arrivals:
                k = min(k, max(int((arrivals[0][0] - t) / dur) + 1, 1))
        t += k * dur
        if window >= 0 and b:
            g = gaps[window]
            g[dur] = g.get(dur, 0.0) + float(b * k)
        finished: list[int] = []
        decoded += k
        while finishes and finishes[0][0] <= decoded:
            finished.append(heapq.heappop(finishes)[1])
        for c, n in chunks:
            done[c] += n
            if done[c] < lp:
                partial = c
                continue
            if partial == c:
                partial = -1
            if window >= 0:
                ttft[window].append(t - issued[c])
            if steps_out > 0:
                heapq.heappush(finishes, (decoded + steps_out, c))
            else:
                finished.append(c)
        for c in finished:
            admitted -= 1
            laps += c == 0
            if window >= 0:
                completed[window] += 1
            done[c] = 0
            issued[c] = t
            heapq.heappush(arrivals, (t + h, order, c))
            order += 1
        if laps >= WARMUP_CYCLES + (window + 1) * MEASURED_CYCLES:
            if window == 1:
                break
            window += 1
            starts[window] = t
        while arrivals and arrivals[0][0] <= t:
            waiting.append(heapq.heappop(arrivals)[2])
    else:
        return None  # (more steps than the bound: a loop that does not cycle as counted)
    orbits = []
    for w in (0, 1):
        values = np.fromiter(gaps[w].keys(), dtype=np.float64, count=len(gaps[w]))
        weights = np.fromiter(gaps[w].values(), dtype=np.float64, count=len(gaps[w]))
        span = (t if w == 1 else starts[1]) - starts[w]
        orbits.append(Orbit(ttft_s=np.asarray(ttft[w], dtype=np.float64), gap_s=values,
                            gap_weight=weights / max(float(weights.sum()), 1e-300),
                            requests_per_s=completed[w] / max(span, 1e-300)))
    a, z = orbits
    # settled: the windows agree, and each holds its clients (Little's law, N = X·E[e2e], which a window of
    # whole periods meets exactly and a drifting loop does not)
    pairs = [(float(np.mean(a.ttft_s)), float(np.mean(z.ttft_s))), (a.mean_gap_s(), z.mean_gap_s()),
             (a.requests_per_s, z.requests_per_s)]
    pairs += [(o.requests_per_s * (float(np.mean(o.ttft_s)) + steps_out * o.mean_gap_s()), float(clients))
              for o in orbits]
    for x, y in pairs:
        if not abs(x - y) <= SETTLED_TOLERANCE * max(abs(y), 1e-300):
            return None
    return z
