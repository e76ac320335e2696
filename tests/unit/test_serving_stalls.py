"""The stalls of an unchunked stream in a closed loop (``aggregated._unchunked_stalls``).

A closed loop's prompts come back a front-end time F after a decode iteration ends. Some land in a decode
iteration and start a stall after it; the others land in a stall already running and lengthen it. Either
way each returning prompt is prefilled once, so the prefill time per decode iteration is that of all the
returning prompts, whatever the split: the balance equations of the steady state stand on it.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.serving.aggregated import _unchunked_stalls

POINTS = 64


def _stalls(lam: float, tau_d: float, u: float, front_end_s: float, closed_loop: bool = True):
    rng = np.random.default_rng(0)
    t_pre = np.sort(rng.lognormal(np.log(0.05), 0.8, POINTS))[None, :]
    w = np.full((1, POINTS), 1.0 / POINTS)
    p, kinds_s, kinds_w = _unchunked_stalls(np.array([lam]), np.array([u]), np.array([tau_d]), t_pre, w,
                                            np.arange(POINTS), closed_loop, front_end_s)
    stall = float(np.sum(kinds_w[0] * (kinds_s[0] - tau_d)))  # mean stall, given one
    return float(p[0]), stall, float(np.sum(w * t_pre)), kinds_w


@pytest.mark.parametrize(("lam", "tau_d", "u", "front_end_s"), [
    (13.0, 0.02, 0.45, 0.0245), (2.0, 0.008, 0.1, 0.0245), (30.0, 0.03, 0.8, 0.01), (5.0, 0.02, 0.3, 0.2),
    (0.5, 0.01, 0.02, 0.0),
    # dozens of returns per decode end (a long decode iteration under a heavy loop): the root of the
    # starters' share is far from its first guess, and 8 false-position rounds left it off by 10 %
    (400.0, 0.05, 0.5, 0.02), (2000.0, 0.1, 0.9, 0.3), (60.0, 0.2, 0.05, 0.001),
])
def test_every_returning_prompt_is_prefilled_once(lam, tau_d, u, front_end_s):
    p_stall, stall, mean_pre, kinds_w = _stalls(lam, tau_d, u, front_end_s)
    returns_per_decode_end = lam * tau_d / (1.0 - u)  # λ / r_dec
    assert p_stall * stall == pytest.approx(returns_per_decode_end * mean_pre, rel=1e-9)
    assert np.sum(kinds_w) == pytest.approx(1.0, rel=1e-12)


def test_a_longer_front_end_moves_prompts_from_starting_stalls_to_lengthening_them():
    # the later a finished stream's next prompt comes back, the more of them land in a stall in progress
    shares = [_stalls(13.0, 0.02, 0.45, f)[:2] for f in (0.0, 0.01, 0.03, 0.1)]
    p_stall = [s[0] for s in shares]
    mean_stall = [s[1] for s in shares]
    assert all(a > b for a, b in zip(p_stall, p_stall[1:], strict=False))
    assert all(a < b for a, b in zip(mean_stall, mean_stall[1:], strict=False))


def test_an_open_loop_keeps_its_busy_period_law():
    # Poisson arrivals land anywhere: the stall is the M/G/1 busy period its starters open, mean x / (1 − u)
    lam, tau_d, u = 10.0, 0.02, 0.4
    p_stall, stall, mean_pre, _ = _stalls(lam, tau_d, u, 0.0245, closed_loop=False)
    starters = lam * tau_d
    assert p_stall == pytest.approx(-np.expm1(-starters), rel=1e-12)
    assert p_stall * stall == pytest.approx(starters * mean_pre / (1.0 - u), rel=1e-6)
