"""Mean-value analysis of a closed loop's queue (``planner.serving.queueing.closed_queue_mva``) against the
machine-repair model M/M/1//N, whose stationary law is known in closed form (Kleinrock, "Queueing Systems"
vol. 1, 1975, Sec. 3.8): with exponential service MVA is exact, and the residual correction vanishes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from planner.serving.queueing import MVA_EXACT_CLIENTS, closed_queue_mva


def machine_repair(clients: int, service_s: float, think_s: float) -> tuple[float, float]:
    """(throughput, mean wait in queue) of N clients, one exponential server, exponential think times:
    p_k ∝ N!/(N − k)! · (S/Z)^k, k = 0 … N in the system."""
    k = np.arange(clients + 1)
    log_p = special.gammaln(clients + 1.0) - special.gammaln(clients - k + 1.0) + k * math.log(service_s / think_s)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    x = (1.0 - p[0]) / service_s
    in_system = float(np.dot(k, p))
    return x, in_system / x - service_s


@pytest.mark.parametrize("clients", [1, 2, 5, 16, 64, 300])
@pytest.mark.parametrize("think_s", [0.5, 5.0, 50.0])
def test_mva_is_exact_for_exponential_service(clients: int, think_s: float) -> None:
    x, wait, p_wait = closed_queue_mva(clients=clients, service_mean_s=1.0, service_scv=1.0, servers=1,
                                       think_s=think_s)
    x_ref, wait_ref = machine_repair(clients, 1.0, think_s)
    assert x == pytest.approx(x_ref, rel=1e-9)
    assert wait == pytest.approx(wait_ref, rel=1e-9, abs=1e-12)
    assert 0.0 <= p_wait <= 1.0


@pytest.mark.parametrize("think_s", [200.0, 2000.0, 20000.0])
def test_the_large_population_approximation_stays_close_to_the_exact_law(think_s: float) -> None:
    clients = 4 * MVA_EXACT_CLIENTS
    x, wait, _ = closed_queue_mva(clients=clients, service_mean_s=1.0, service_scv=1.0, servers=1,
                                  think_s=think_s)
    x_ref, wait_ref = machine_repair(clients, 1.0, think_s)
    assert x == pytest.approx(x_ref, rel=0.01)
    # the wait is a small difference far below saturation: compare against the cycle it is part of
    assert wait == pytest.approx(wait_ref, abs=0.01 * (wait_ref + 1.0 + think_s))


def test_the_queue_is_bounded_by_the_population() -> None:
    """Saturated (Z ≪ N·S): the wait approaches (N − 1)·S, every other client queued ahead, and no more."""
    for clients in (10, 100, 1000, 5000):
        x, wait, p_wait = closed_queue_mva(clients=clients, service_mean_s=1.0, service_scv=0.0, servers=1,
                                           think_s=1e-6)
        assert x == pytest.approx(1.0, rel=1e-3)
        assert wait <= clients - 1.0 + 1e-9
        assert wait == pytest.approx(clients - 1.0, rel=0.01)
        assert p_wait > 0.9


def test_more_service_variability_waits_longer_and_fractional_clients_interpolate() -> None:
    kw = dict(service_mean_s=1.0, servers=1, think_s=8.0)
    waits = [closed_queue_mva(clients=8, service_scv=c2, **kw)[1] for c2 in (0.0, 1.0, 4.0)]
    assert waits[0] < waits[1] < waits[2]
    lo, mid, hi = (closed_queue_mva(clients=n, service_scv=1.0, **kw)[0] for n in (8, 8.5, 9))
    assert lo < mid < hi


def test_servers_share_the_work() -> None:
    one = closed_queue_mva(clients=32, service_mean_s=1.0, service_scv=1.0, servers=1, think_s=16.0)
    two = closed_queue_mva(clients=32, service_mean_s=2.0, service_scv=1.0, servers=2, think_s=16.0)
    # two servers of half the speed: the same capacity, shorter waits at the same population
    assert two[0] == pytest.approx(one[0], rel=0.1)
    assert two[1] < one[1]


def test_the_closed_wait_law_keeps_the_mean_and_has_a_lighter_tail_than_an_open_queue() -> None:
    from planner.serving.queueing import closed_queue_wait_points

    clients, service, think = 64, 1.0, 20.0
    x, wait, p_wait = closed_queue_mva(clients=clients, service_mean_s=service, service_scv=1.0, servers=1,
                                       think_s=think)
    values, weights = closed_queue_wait_points(clients=clients, service_mean_s=service, service_scv=1.0,
                                               servers=1, think_s=think, mean_wait_s=wait)
    assert float(np.sum(weights)) == pytest.approx(1.0, rel=1e-9)
    assert float(np.dot(values, weights)) == pytest.approx(wait, rel=1e-9)
    # at most the other N − 1 clients are ahead: the tail is lighter than the exponential tail an open queue
    # of the same mean wait and waiting probability has (its 99.9 % point, W / p · ln(p / 0.001))
    cdf = np.cumsum(weights)
    p999 = float(values[np.searchsorted(cdf, 0.999)])
    assert p999 < wait / p_wait * math.log(p_wait / 0.001)
    # the atom at zero is the chance of finding the server idle among N − 1 clients: about 1 − p_wait
    assert weights[0] == pytest.approx(1.0 - p_wait, abs=0.05)


def test_the_closed_wait_law_matches_the_machine_repair_law() -> None:
    """Exponential service: the wait's CDF from the points against the exact M/M/1//N law (Erlang-k waits
    behind k in the system, k from the arrival theorem's law)."""
    from planner.serving.queueing import closed_queue_wait_points

    clients, think = 32, 24.0
    _, wait, _ = closed_queue_mva(clients=clients, service_mean_s=1.0, service_scv=1.0, servers=1,
                                  think_s=think)
    values, weights = closed_queue_wait_points(clients=clients, service_mean_s=1.0, service_scv=1.0,
                                               servers=1, think_s=think, mean_wait_s=wait)
    n = clients - 1
    k = np.arange(n + 1)
    log_p = special.gammaln(n + 1.0) - special.gammaln(n - k + 1.0) - k * math.log(think)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    for t in (2.0, 5.0, 10.0, 15.0):
        exact = p[0] + float(np.sum(p[1:] * special.gammainc(k[1:], t)))
        assert float(np.sum(weights[values <= t])) == pytest.approx(exact, abs=0.05)


@pytest.mark.parametrize("clients", [8, 64, 512])
@pytest.mark.parametrize("ratio", [0.005, 0.05, 0.3, 1.0])
@pytest.mark.parametrize("scv", [0.3, 1.0, 2.5])
def test_the_closed_wait_laws_quantiles_hit_their_probabilities(clients: int, ratio: float,
                                                                 scv: float) -> None:
    """The waiting part's points are quantiles of a gamma mixture (one gamma per population ahead, weighed by
    the arrival theorem's law): the mixture's CDF at each returned point is its probability (a 2048-point
    grid with linear interpolation missed by up to 1e-4 of probability)."""
    from planner.serving.queueing import _gamma_mixture_quantiles

    n = clients - 1
    k = np.arange(1.0, n + 1.0)
    log_p = special.gammaln(n + 1.0) - special.gammaln(n - k + 1.0) + k * math.log(ratio)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    mean_k = k - 1.0 + (1.0 + scv) / 2.0
    var_k = scv * (k - 1.0) + ((1.0 + scv) / 2.0) ** 2
    shape, scale = mean_k**2 / var_k, var_k / mean_k
    probs = np.array([0.01, 0.25, 0.5, 0.9, 0.99, 0.9995])
    x = _gamma_mixture_quantiles(p, shape, scale, probs, float(np.max(mean_k + 8.0 * np.sqrt(var_k))))
    cdf = np.sum(p[:, None] * special.gammainc(shape[:, None], x[None, :] / scale[:, None]), axis=0)
    np.testing.assert_allclose(cdf, probs, rtol=0, atol=1e-10)
    assert np.all(np.diff(x) > 0)


@pytest.mark.parametrize("scv", [0.0, 0.02, 0.3])
@pytest.mark.parametrize("clients", [64, 1024])
def test_the_gamma_mixture_skips_only_terms_that_do_not_count(scv: float, clients: int) -> None:
    """Narrow terms (deterministic or nearly deterministic service) are evaluated only near their means: the
    CDF and density must still be the full sums over every term, at points all over the mixture's range."""
    from planner.serving.queueing import _GammaMixture

    k = np.arange(1.0, clients)
    log_p = special.gammaln(clients) - special.gammaln(clients - k) + k * math.log(0.02)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    mean_k = k - 1.0 + (1.0 + scv) / 2.0
    var_k = scv * (k - 1.0) + ((1.0 + scv) / 2.0) ** 2
    shape, scale = mean_k**2 / var_k, var_k / mean_k
    mix = _GammaMixture(p, shape, scale)
    x = np.sort(np.random.default_rng(3).uniform(0.0, float(np.max(mean_k + 8.0 * np.sqrt(var_k))), 600))
    x = np.concatenate([x, mean_k[::7], mean_k[::7] + 12.0 * np.sqrt(var_k[::7])])  # at the means and the cut
    full_cdf = np.sum(p[:, None] * special.gammainc(shape[:, None], x[None, :] / scale[:, None]), axis=0)
    # the density in log space over every term (the form Newton's steps use; for shapes of ~10⁶ its
    # log-normalizer cancels to ~1e-8 relative, against scipy's own density below)
    log_terms = (special.xlogy(shape[:, None] - 1.0, x[None, :]) - x[None, :] / scale[:, None]
                 - special.gammaln(shape)[:, None] - (shape * np.log(scale))[:, None])
    full_pdf = np.sum(p[:, None] * np.exp(log_terms), axis=0)
    np.testing.assert_allclose(mix.cdf(x), full_cdf, rtol=0, atol=1e-14)
    np.testing.assert_allclose(mix.pdf(x), full_pdf, rtol=1e-9, atol=1e-14 * float(np.max(full_pdf)))
    scipy_pdf = np.sum(p[:, None] * stats.gamma.pdf(x[None, :], shape[:, None], scale=scale[:, None]), axis=0)
    np.testing.assert_allclose(mix.pdf(x), scipy_pdf, rtol=1e-6, atol=1e-14 * float(np.max(full_pdf)))
