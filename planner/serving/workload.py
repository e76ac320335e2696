"""Workloads: request-length distributions and arrival processes.

A length distribution is held as a small set of representative points with probabilities (equal-mass
quantile bins for continuous laws), so every serving formula can evaluate all of them in one numpy pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from planner.errors import InvalidInput

#: points used to represent a continuous distribution (equal-probability bins, value at the bin's
#: median quantile); 64 keeps quantiles of sums within ~1 % of the continuous law's
NUM_QUANTILE_POINTS = 64
#: their standard-normal quantiles, the midpoints of equal-mass bins (computed once: scipy's ppf costs
#: ~0.1 ms a call, a tenth of an evaluate call with lognormal lengths)
_QUANTILE_Z = stats.norm.ppf((np.arange(NUM_QUANTILE_POINTS) + 0.5) / NUM_QUANTILE_POINTS)
#: z-score of the 90th percentile of a standard normal
Z90 = float(stats.norm.ppf(0.9))
#: most points an empirical distribution (samples, a histogram) keeps. The serving formulas take every
#: point at once, the TTFT and end-to-end laws pairs of them, so the work grows with the points: laws of
#: 390 to 5400 distinct lengths (3 deployments × 5 traces × 6 loads, 2026-12-04) took 23.5 ms per evaluation
#: at the median and 87 ms at worst on up to 1024 points, 9.3 and 20 ms on 256. Beyond the limit the
#: sorted lengths are grouped (``LengthDistribution.tail_refined``), each group at its mean, into groups whose
#: mass shrinks towards the long end (0.55 % of the probability at the median, 0.08 % at the p99, single
#: lengths at the very top), and the longest length stays a point of its own: the mean and the maximum are
#: kept exactly and a quantile moves by less than its group's mass, a fraction of the sampling error of the
#: trace itself (a p50 read off 1000 samples is uncertain by ±1.6 % of the probability). Equal-mass groups of
#: the same count moved the TTFT p99 by up to 12 % and the end-to-end p99 by up to 18 % on such traces
MAX_EMPIRICAL_POINTS = 256


def _equal_mass_groups(sorted_weights: NDArray[np.float64], num_groups: int) -> NDArray[np.intp]:
    """The group of each point of a sorted law (weights summing to 1) when the groups hold equal masses: the
    point at cumulative probability u (its middle) goes to group ⌊u·num_groups⌋."""
    return np.minimum((np.cumsum(sorted_weights) - 0.5 * sorted_weights) * num_groups,
                      num_groups - 1).astype(np.intp)


def tail_refined_groups(sorted_weights: NDArray[np.float64], num_groups: int) -> NDArray[np.intp]:
    """The group (0 … ``num_groups`` − 1, nondecreasing) of each point of a law sorted by value, with
    ``sorted_weights`` summing to 1: the point at cumulative probability u (its middle) goes to group
    ⌊(1 − √(1 − u))·num_groups⌋, so a group holds about 2·√(1 − u) / num_groups of the probability, finer
    towards the long end (:meth:`LengthDistribution.tail_refined`)."""
    u = np.cumsum(sorted_weights) - 0.5 * sorted_weights
    warped = 1.0 - np.sqrt(np.maximum(1.0 - u, 0.0))
    return np.minimum(warped * num_groups, num_groups - 1).astype(np.intp)


@functools.lru_cache(maxsize=16)
def tail_refined_targets(num_points: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(mid-probabilities, masses) of ``num_points`` groups cut as :func:`tail_refined_groups` cuts a law:
    group j spans u ∈ [1 − (1 − j/k)², 1 − (1 − (j + 1)/k)²), a mass of (2·(k − j) − 1) / k², from about
    2/k at the short end to 1/k² at the top. A law re-binned to the values at these probabilities keeps its
    rare long tail, which equal masses of 1/k lose below a probability of 1/(2k) (read-only arrays)."""
    k = max(int(num_points), 1)
    edges = 1.0 - (1.0 - np.arange(k + 1, dtype=np.float64) / k) ** 2
    mid, mass = 0.5 * (edges[:-1] + edges[1:]), np.diff(edges)
    mid.flags.writeable = mass.flags.writeable = False
    return mid, mass


@dataclass(frozen=True, kw_only=True)
class LengthDistribution:
    """A distribution of token counts: ``values[i]`` tokens with probability ``weights[i]``."""

    values: NDArray[np.float64]
    weights: NDArray[np.float64]
    kind: str = "fixed"

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self.weights))

    @property
    def second_moment(self) -> float:
        return float(np.dot(self.values**2, self.weights))

    @property
    def max(self) -> float:
        return float(self.values.max())

    def quantile(self, q: float) -> float:
        """Smallest value whose cumulative probability reaches ``q`` (0..1)."""
        return float(self.quantiles([q])[0])

    def quantiles(self, qs: list[float]) -> NDArray[np.float64]:
        """:meth:`quantile` of each of ``qs``, sorting once."""
        order = np.argsort(self.values, kind="stable")
        cdf = np.cumsum(self.weights[order])
        idx = np.searchsorted(cdf, np.asarray(qs, dtype=np.float64) - 1e-12)
        return self.values[order][np.minimum(idx, len(order) - 1)]

    def coarsened(self, num_points: int) -> LengthDistribution:
        """At most ``num_points`` points: the sorted values cut into groups of about equal probability, each
        replaced by its group's mean (the mean is kept exactly; the spread shrinks only within groups).
        The searches use it to cost many configurations on fewer prompt points."""
        return self._grouped(num_points, _equal_mass_groups)

    def tail_refined(self, num_points: int) -> LengthDistribution:
        """At most ``num_points`` points: the sorted values cut into groups, each replaced by its mean (the
        mean is kept exactly), where the point at cumulative probability u falls in group
        ⌊(1 − √(1 − u))·num_points⌋. A group's mass is about 2·√(1 − u) / num_points: twice the equal-mass
        share at the short end, a fifth of it at the p99 and single values at the top, where the percentiles
        of TTFT and end-to-end latency are read (equal-mass groups merge the longest lengths and shorten that
        tail)."""
        return self._grouped(num_points, tail_refined_groups)

    def _grouped(self, num_points: int,
                 groups: Callable[[NDArray[np.float64], int], NDArray[np.intp]]) -> LengthDistribution:
        """The law with its sorted points merged as ``groups(sorted weights, num_points)`` assigns them (group
        numbers nondecreasing along the sorted points), each group at its mean; itself when small enough."""
        if self.values.size <= num_points:
            return self
        order = np.argsort(self.values, kind="stable")
        v, w = self.values[order], self.weights[order] / self.weights.sum()
        group = groups(w, num_points)
        mass = np.bincount(group, weights=w, minlength=num_points)
        keep = mass > 0
        means = np.bincount(group, weights=w * v, minlength=num_points)[keep] / mass[keep]
        return LengthDistribution(values=means, weights=mass[keep], kind=self.kind)

    def scaled(self, factor: float) -> LengthDistribution:
        """The same shape with every value multiplied by ``factor`` (e.g. the uncached share of a prompt)."""
        return LengthDistribution(values=self.values * factor, weights=self.weights, kind=self.kind)


def fixed_length(tokens: int) -> LengthDistribution:
    if tokens < 1:
        raise InvalidInput(f"a token count must be >= 1, got {tokens}", field="tokens")
    return LengthDistribution(values=np.array([float(tokens)]), weights=np.array([1.0]), kind="fixed")


def sampled_lengths(samples: Sequence[int]) -> LengthDistribution:
    """The empirical distribution of observed lengths (each sample equally likely)."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.size == 0 or np.any(arr < 1) or not np.all(np.isfinite(arr)):
        raise InvalidInput("samples must be a non-empty list of token counts >= 1", field="samples")
    values, counts = np.unique(arr, return_counts=True)
    return _bounded(LengthDistribution(values=values, weights=counts / counts.sum(), kind="samples"))


def histogram_lengths(values: Sequence[float], weights: Sequence[float]) -> LengthDistribution:
    """An empirical histogram: ``values`` (bin centres, tokens) with relative frequencies ``weights``."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if v.size == 0 or v.shape != w.shape:
        raise InvalidInput("histogram needs equally long, non-empty values and weights", field="values")
    if np.any(v < 1) or np.any(w < 0) or w.sum() <= 0 or not np.all(np.isfinite(v)) or not np.all(np.isfinite(w)):
        raise InvalidInput("histogram values must be >= 1 and weights >= 0 with a positive sum", field="weights")
    keep = w > 0
    return _bounded(LengthDistribution(values=v[keep], weights=w[keep] / w[keep].sum(), kind="histogram"))


def _bounded(dist: LengthDistribution) -> LengthDistribution:
    """``dist`` on at most ``MAX_EMPIRICAL_POINTS`` points: the longest length, and the others grouped
    (:meth:`LengthDistribution.tail_refined`)."""
    if dist.values.size <= MAX_EMPIRICAL_POINTS:
        return dist
    top = int(np.argmax(dist.values))
    rest = np.arange(dist.values.size) != top
    others = LengthDistribution(values=dist.values[rest], weights=dist.weights[rest], kind=dist.kind)
    others = others.tail_refined(MAX_EMPIRICAL_POINTS - 1)
    share = float(dist.weights[rest].sum()) / float(dist.weights.sum())
    values = np.append(others.values, dist.values[top])
    weights = np.append(others.weights / others.weights.sum() * share, 1.0 - share)
    return LengthDistribution(values=values, weights=weights, kind=dist.kind)


def lognormal_lengths(
    *, mean: float | None = None, median: float | None = None, p90: float, max_tokens: float | None = None
) -> LengthDistribution:
    """A lognormal law given its p90 and either its mean or its median, as equal-mass quantile points.

    With median ``m`` and p90: ``σ = ln(p90/m) / z90``. With the mean: ``ln(p90/mean) = z90·σ − σ²/2``,
    whose smaller root is taken; no lognormal has ``p90 / mean > exp(z90²/2) ≈ 2.27`` (the function
    ``z90·σ − σ²/2`` peaks at σ = z90), and such a request is refused rather than silently reshaped.
    """
    if (mean is None) == (median is None):
        raise InvalidInput("a lognormal needs p90 and exactly one of mean or median", field="mean")
    if p90 is None or p90 <= 0 or (mean is not None and mean <= 0) or (median is not None and median <= 0):
        raise InvalidInput("lognormal mean, median and p90 must be positive", field="p90")
    if median is not None:
        if p90 < median:
            raise InvalidInput("a lognormal's p90 cannot be below its median", field="p90")
        sigma = np.log(p90 / median) / Z90
        mu = float(np.log(median))
    else:
        assert mean is not None
        gap = float(np.log(p90 / mean))
        disc = Z90**2 - 2.0 * gap
        if disc < 0:
            raise InvalidInput(
                f"no lognormal has mean {mean:g} and p90 {p90:g}: p90/mean = {p90 / mean:.2f} exceeds "
                f"{np.exp(Z90**2 / 2):.2f}, the largest a lognormal allows; give the median instead of the mean "
                f"(a median of {mean:g} with this p90 is a valid lognormal) or a histogram",
                field="mean",
            )
        sigma = Z90 - float(np.sqrt(disc))
        mu = float(np.log(mean) - sigma**2 / 2.0)
    values = np.exp(mu + sigma * _QUANTILE_Z)
    values = np.maximum(np.round(values), 1.0)
    if max_tokens is not None:
        values = np.minimum(values, max_tokens)
    return LengthDistribution(values=values, weights=np.full(NUM_QUANTILE_POINTS, 1.0 / NUM_QUANTILE_POINTS),
                              kind="lognormal")


ArrivalKind = Literal["poisson", "gamma", "closed_loop"]


@dataclass(frozen=True, kw_only=True)
class Arrival:
    """How requests arrive.

    ``poisson``: open loop at ``rate_per_s``; ``gamma``: open loop with gamma-distributed inter-arrival
    times of coefficient of variation ``cv`` (bursty when cv > 1); ``closed_loop``: ``concurrency`` clients,
    each sending its next request when its previous one completes (what benchmark tools run with
    ``--max-concurrency``).
    """

    kind: ArrivalKind
    rate_per_s: float | None = None
    cv: float = 1.0
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.kind in ("poisson", "gamma"):
            if self.rate_per_s is None or not np.isfinite(self.rate_per_s) or self.rate_per_s <= 0:
                raise InvalidInput("an open-loop arrival needs rate_per_s > 0", field="arrival.rate_per_s")
            if self.kind == "gamma" and (not np.isfinite(self.cv) or self.cv <= 0):
                raise InvalidInput("gamma arrivals need cv > 0", field="arrival.cv")
        elif self.kind == "closed_loop":
            if self.concurrency is None or self.concurrency < 1:
                raise InvalidInput("a closed loop needs concurrency >= 1", field="arrival.concurrency")
        else:
            raise InvalidInput(f"unknown arrival kind {self.kind!r}", field="arrival.kind")

    @property
    def arrival_cv(self) -> float:
        """Coefficient of variation of inter-arrival times (1 for Poisson)."""
        return 1.0 if self.kind == "poisson" else self.cv


@dataclass(frozen=True, kw_only=True)
class Workload:
    input_tokens: LengthDistribution
    output_tokens: LengthDistribution
    arrival: Arrival
    #: fraction of prompt tokens found in the prefix cache (they skip prefill compute)
    prefix_cache_hit_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.prefix_cache_hit_fraction < 1.0:
            raise InvalidInput("prefix_cache_hit_fraction must be in [0, 1)", field="prefix_cache_hit_fraction")


def held_kv_scv(workload: Workload, decode_context: float) -> float:
    """Variance / mean² of the KV a running sequence holds, over the decode batch (mean ``decode_context``
    tokens): a prompt I and an age a, uniform over the decode life of a length-biased output O, so
    E[x²] = E[I²] + E[I]·E[O²]/E[O] + E[O³]/(3E[O]). The KV cache's cap on the batch binds on the sum of
    those, whose variance over its mean adds this to the batch count's (``batch.cap_share``)."""
    out = workload.output_tokens
    o1 = max(out.mean, 1.0)
    x2 = (workload.input_tokens.second_moment + workload.input_tokens.mean * out.second_moment / o1
          + float(np.dot(out.values**3, out.weights)) / (3.0 * o1))
    return max(x2 / max(decode_context, 1.0) ** 2 - 1.0, 0.0)
