"""The vectorized distribution and queueing helpers of ``planner.optimize.capacity`` against the scalar
reference implementations of ``planner.serving`` (which ``evaluate`` uses)."""

from __future__ import annotations

import decimal

import numpy as np
import pytest

from planner.optimize.capacity import (
    discrete_quantile,
    shifted_wait_cdf,
    shifted_wait_quantile,
)
from planner.serving.queueing import (
    erlang_c,
    erlang_c_array,
    erlang_c_servers,
    quantiles_of_shifted_wait,
    weighted_quantiles,
)
from planner.serving.workload import (
    MAX_EMPIRICAL_POINTS,
    LengthDistribution,
    fixed_length,
    histogram_lengths,
    lognormal_lengths,
    sampled_lengths,
)

SERVERS = [*range(1, 65), 80, 100, 128, 200, 256, 500]
UTILIZATIONS = [*np.linspace(0.01, 0.99, 50), 0.995, 0.999]


# --------------------------------------------------------------------------- Erlang C


def _erlang_c_by_definition(c: int, a: float) -> float:
    """C(c, a) = [a^c/c! · c/(c − a)] / [Σ_{k<c} a^k/k! + a^c/c! · c/(c − a)], summed term by term in
    40-digit decimal arithmetic (the definition, not the Poisson-ratio form the planner uses)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        a_d, term, total = decimal.Decimal(a), decimal.Decimal(1), decimal.Decimal(0)
        for k in range(c):
            total += term
            term = term * a_d / (k + 1)  # a^(k+1) / (k+1)!
        top = term * c / (c - a_d)
        return float(top / (total + top))


def test_erlang_c_matches_the_definition_over_a_grid() -> None:
    c, rho = np.meshgrid(np.array(SERVERS, dtype=float), np.array(UTILIZATIONS), indexing="ij")
    a = c * rho
    ref = np.array([[_erlang_c_by_definition(int(ci), ai) for ci, ai in zip(crow, arow, strict=True)]
                    for crow, arow in zip(c, a, strict=True)])
    got = erlang_c_servers(c, a)
    assert got.shape == c.shape
    worst = np.unravel_index(np.argmax(np.abs(got - ref) / np.maximum(ref, 1e-300)), c.shape)
    np.testing.assert_allclose(
        got, ref, rtol=1e-9, atol=0.0, err_msg=f"worst at c={c[worst]:g}, rho={rho[worst]:.3g}"
    )
    # the one-queue forms: the scalar, and one server count over many loads
    scalar = np.array([[erlang_c(ci, ai) for ci, ai in zip(crow, arow, strict=True)]
                       for crow, arow in zip(c, a, strict=True)])
    np.testing.assert_allclose(scalar, ref, rtol=1e-9, atol=0.0)
    rows = np.array([erlang_c_array(crow[0], arow) for crow, arow in zip(c, a, strict=True)])
    np.testing.assert_allclose(rows, ref, rtol=1e-9, atol=0.0)


def test_erlang_c_servers_edges_and_broadcasting() -> None:
    # no load never waits, a load at or above the servers always waits (as the scalar version)
    got = erlang_c_servers(np.array([1, 4, 4, 8, 3]), np.array([0.0, 4.0, 5.0, 0.0, 3.0 * (1 - 1e-12)]))
    ref = [
        erlang_c(1, 0.0),
        erlang_c(4, 4.0),
        erlang_c(4, 5.0),
        erlang_c(8, 0.0),
        erlang_c(3, 3.0 * (1 - 1e-12)),
    ]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-12)
    assert got[0] == 0.0 and got[1] == 1.0 and got[2] == 1.0
    # one server count against many loads broadcasts like the scalar loop
    loads = np.linspace(0.0, 7.5, 11)
    np.testing.assert_allclose(
        erlang_c_servers(np.array(8), loads), [erlang_c(8, x) for x in loads], rtol=1e-9
    )
    # M/M/1: C(1, a) = a
    np.testing.assert_allclose(
        erlang_c_servers(np.ones(5), np.linspace(0.1, 0.9, 5)), np.linspace(0.1, 0.9, 5), rtol=1e-12
    )


# --------------------------------------------------------------------------- shifted-wait quantile


def _random_rows(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, ...]:
    shifts = rng.uniform(0.01, 2.0, size=(n, m)) * rng.choice([1.0, 10.0], size=(n, 1))
    weights = rng.uniform(0.05, 1.0, size=(n, m))
    p_wait = rng.uniform(0.0, 0.999, size=n)
    mean_wait = rng.lognormal(mean=-1.0, sigma=1.5, size=n)
    p_wait[:3] = 0.0  # no waiting at all: a pure discrete law
    p_wait[3:5], mean_wait[3:5] = 0.0, 0.0
    mean_wait[5:7] = np.inf  # an unstable queue
    return shifts, weights, p_wait, mean_wait


def _check_inverse(
    q: float, shifts: np.ndarray, weights: np.ndarray, p_wait: np.ndarray, mean_wait: np.ndarray
) -> None:
    x = shifted_wait_quantile(q, shifts, weights, p_wait, mean_wait)
    finite = np.isfinite(mean_wait)
    assert np.all(np.isinf(x[~finite]))
    assert np.all(np.isfinite(x[finite]))
    s, w, p, m, xf = shifts[finite], weights[finite], p_wait[finite], mean_wait[finite], x[finite]
    theta = np.where((p > 0) & (m > 0), m / np.maximum(p, 1e-300), 0.0)
    # the range the quantile is searched over; the solver resolves it to ~4e-6, "just below" is 1e-5 of it
    scale = s.max(axis=1) - s.min(axis=1) + theta * (np.log(1.0 / (1.0 - q)) + 1.0)
    at = shifted_wait_cdf(xf, s, w, p, m)
    below = shifted_wait_cdf(xf - 1e-5 * scale, s, w, p, m)
    ref = np.array(
        [
            quantiles_of_shifted_wait(s[i], w[i], p_wait=p[i], mean_wait_s=m[i], quantiles=[q])[0]
            for i in range(s.shape[0])
        ]
    )
    bad = np.flatnonzero((at < q - 1e-12) | (below >= q))
    msg = "; ".join(
        f"row p_wait={p[i]:.3g} mean_wait={m[i]:.3g}: quantile {xf[i]:.6g} (scalar solver {ref[i]:.6g}), "
        f"cdf there {at[i]:.4f}, just below {below[i]:.4f}"
        for i in bad[:3]
    )
    assert bad.size == 0, f"q={q}: {bad.size} rows do not invert the cdf: {msg}"
    # and the same quantile as the scalar solver evaluate uses, row by row
    np.testing.assert_allclose(xf, ref, rtol=0.0, atol=float(np.max(1e-5 * scale)))


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("seed", [0, 1])
def test_shifted_wait_quantile_inverts_the_cdf(q: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    _check_inverse(q, *_random_rows(rng, 60, 9))


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_shifted_wait_quantile_with_probability_but_no_mean_wait(q: float) -> None:
    rng = np.random.default_rng(0)
    shifts, weights, p_wait, mean_wait = _random_rows(rng, 20, 9)
    p_wait[:] = rng.uniform(0.1, 0.9, size=20)
    mean_wait[:] = 0.0
    _check_inverse(q, shifts, weights, p_wait, mean_wait)


def test_shifted_wait_cdf_matches_a_direct_sum() -> None:
    rng = np.random.default_rng(7)
    shifts, weights, p_wait, mean_wait = _random_rows(rng, 20, 5)
    t = 1.3
    got = shifted_wait_cdf(t, shifts, weights, p_wait, mean_wait)
    for i in range(20):
        if not np.isfinite(mean_wait[i]):
            assert got[i] == 0.0
            continue
        w = weights[i] / weights[i].sum()
        waits = p_wait[i] > 0 and mean_wait[i] > 0
        theta = mean_wait[i] / p_wait[i] if waits else 1.0
        ref = sum(
            wk * (1.0 - (p_wait[i] * np.exp(-(t - sk) / theta) if waits else 0.0))
            for sk, wk in zip(shifts[i], w, strict=True)
            if t >= sk
        )
        assert got[i] == pytest.approx(ref, rel=1e-12, abs=1e-15)


# --------------------------------------------------------------------------- discrete quantile


@pytest.mark.parametrize("q", [0.01, 0.25, 0.5, 0.9, 0.99, 1.0])
def test_discrete_quantile_matches_weighted_quantiles(q: float) -> None:
    rng = np.random.default_rng(3)
    n, m = 50, 12
    values = rng.uniform(0.0, 1.0, size=(n, m))
    values[:10] = np.round(values[:10] * 4) / 4  # ties
    weights = rng.uniform(0.0, 1.0, size=(n, m))
    weights[10:20] = 1.0  # equal weights: the CDF lands exactly on quantiles such as 0.25 and 0.5
    weights[20:25, :3] = 0.0  # points without mass
    got = discrete_quantile(q, values, weights)
    ref = np.array([weighted_quantiles(values[i], weights[i], [q])[0] for i in range(n)])
    np.testing.assert_array_equal(got, ref)


# --------------------------------------------------------------------------- coarsened length distributions


def _distributions() -> list[LengthDistribution]:
    rng = np.random.default_rng(11)
    return [
        lognormal_lengths(median=1000, p90=3000, max_tokens=16000),
        lognormal_lengths(mean=300, p90=600),
        histogram_lengths(rng.integers(1, 30000, size=500).astype(float), rng.uniform(0.0, 1.0, size=500)),
        histogram_lengths([10.0, 20.0, 5000.0], [0.98, 0.01, 0.01]),  # one heavy point: groups go empty
    ]


@pytest.mark.parametrize("points", [1, 2, 7, 16, 32, 63])
@pytest.mark.parametrize("which", range(4))
def test_coarsened_keeps_the_mean_and_the_point_budget(which: int, points: int) -> None:
    dist = _distributions()[which]
    c = dist.coarsened(points)
    assert c.values.size <= points
    assert c.values.size == c.weights.size
    assert float(np.sum(c.weights)) == pytest.approx(1.0, abs=1e-12)
    assert np.all(c.weights > 0)
    assert c.mean == pytest.approx(dist.mean, rel=1e-12)
    assert c.values.min() >= dist.values.min() - 1e-9 and c.values.max() <= dist.values.max() + 1e-9
    # averaging within groups never adds spread
    assert c.second_moment <= dist.second_moment * (1 + 1e-12)
    if points == 1:
        assert c.values[0] == pytest.approx(dist.mean, rel=1e-12)


@pytest.mark.parametrize("heavy_top", [False, True])
def test_empirical_distributions_keep_a_bounded_support_the_mean_and_the_maximum(heavy_top: bool) -> None:
    rng = np.random.default_rng(5)
    samples = rng.integers(1, 10_000_000, size=100_000)
    values = rng.permutation(np.arange(1.0, 100_001.0))
    weights = np.where(values == values.max(), 1e4 if heavy_top else 1.0, 1.0)
    for exact, dist in ((samples.astype(float), sampled_lengths(samples.tolist())),
                        (values, histogram_lengths(values, weights))):
        w = np.full(exact.size, 1.0 / exact.size) if dist.kind == "samples" else weights / weights.sum()
        assert dist.values.size <= MAX_EMPIRICAL_POINTS == dist.weights.size
        assert float(np.sum(dist.weights)) == pytest.approx(1.0, abs=1e-12)
        assert dist.mean == pytest.approx(float(np.dot(exact, w)), rel=1e-12)
        assert dist.max == exact.max()  # what the KV cache must hold
        # each quantile within its group: the exact CDF there is within the group's mass of q (the groups
        # shrink towards the top: ~2·√(1 − q) / 255 of the probability, plus one point's weight)
        for q in (0.5, 0.9, 0.99):
            cdf = float(np.sum(w[exact <= dist.quantile(q)]))
            assert abs(cdf - q) <= 2.0 * np.sqrt(1.0 - q + 0.01) / (MAX_EMPIRICAL_POINTS - 1) + float(w.max())
    small = sampled_lengths([5, 5, 7])
    assert small.values.tolist() == [5.0, 7.0]


def test_coarsened_is_the_identity_when_small_enough() -> None:
    d = lognormal_lengths(median=1000, p90=3000)
    assert d.coarsened(d.values.size) is d
    f = fixed_length(128)
    assert f.coarsened(4) is f


# --------------------------------------------------------------------------- a budget's top rate


@pytest.mark.parametrize("prompt_tokens", [2000, 600])
def test_states_at_rate_sustains_each_budget_up_to_its_saturation(prompt_tokens: int) -> None:
    """In target-rate mode the chunk-budget search asks ``states_at_rate`` whether a budget sustains the
    rate. Its curve has ``CURVE_POINTS`` points per budget, ~×3 apart in the decode batch; until
    2026-12-02 the last stable point was taken as the top, so a budget was called overloaded up to a grid
    step below its saturation (budget 512, 2000-token prompts: 8.4 against 10.7 requests/s). Each budget's
    saturation here is that of ``evaluate``'s own model of that budget alone (its edge refined)."""
    import dataclasses

    from planner.costs.passes import mixed_step_latency_many
    from planner.costs.types import Parallelism
    from planner.engines import find_engine
    from planner.hardware import load_catalog
    from planner.models import load_model_catalog
    from planner.optimize.capacity import states_at_rate
    from planner.optimize.chunked import prepare_aggregated
    from planner.serving.aggregated import AggregatedModel
    from planner.serving.types import AggregatedDeployment, ServingProblem
    from planner.serving.workload import Arrival, Workload

    budgets = (512, 2048, 8192)
    dep = AggregatedDeployment(gpu=load_catalog()["h100-sxm"], parallelism=Parallelism(tp=1), max_batch_size=256)
    wl = Workload(input_tokens=fixed_length(prompt_tokens), output_tokens=fixed_length(200),
                  arrival=Arrival(kind="poisson", rate_per_s=1.0))
    problem = ServingProblem(model=load_model_catalog().get("meta-llama/Llama-3.1-8B"), engine=find_engine("vllm"),
                             weight_dtype="bf16", kv_dtype="bf16", deployment=dep, workload=wl)
    prepared = prepare_aggregated(problem, token_budgets=budgets, max_batch_sizes=(256,), chunk_overhead=False)
    model = prepared.model
    model.set_tables(*mixed_step_latency_many(model.ctx, model.table_inputs()))
    for k, budget in enumerate(budgets):
        single = dataclasses.replace(problem, deployment=dataclasses.replace(dep, token_budget=budget))
        saturation = AggregatedModel(single).saturation_rate_per_s()
        for fraction, sustained in ((0.97, True), (0.995, True), (1.03, False)):
            _, ok = states_at_rate(model, fraction * saturation)
            assert bool(ok[k]) is sustained, (budget, fraction, saturation)
