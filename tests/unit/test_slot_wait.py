"""Waiting for a place in the decode batch (``batch.slot_wait``): a request is admitted only while the batch
is below its cap (``max_batch_size``, or the KV cache's sequences), and holds its place to its last token.

Near the cap that wait is most of the TTFT; the reference simulation, which admits exactly so, is the check.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.api.catalogs import Catalogs
from planner.api.routers.evaluate import build_problem
from planner.api.serving_schemas import EvaluateRequest
from planner.serving.batch import slot_wait
from planner.serving.evaluate import _tabulated_model, evaluate
from planner.validation.simulator import simulate


def _problem(max_batch: int, rate: float):
    body = {"model": "meta-llama/Llama-3.1-8B",
            "deployment": {"mode": "aggregated", "gpu": "h100-sxm", "parallelism": {"tp": 1},
                           "max_batch_size": max_batch, "token_budget": 8192},
            "workload": {"input_tokens": 2000, "output_tokens": 300,
                         "arrival": {"kind": "poisson", "rate_per_s": rate}}}
    return build_problem(EvaluateRequest.model_validate(body), Catalogs(None))[0]


def test_far_from_the_cap_nobody_waits_for_a_place():
    # 6 requests/s keep a mean batch of 26: a cap of 256 is never reached, a cap of 64 hardly
    loose, roomy = evaluate(_problem(256, 6.0)), evaluate(_problem(64, 6.0))
    assert roomy.ttft_s.mean == pytest.approx(loose.ttft_s.mean, rel=1e-3)
    assert roomy.ttft_s.p99 == pytest.approx(loose.ttft_s.p99, rel=1e-2)


@pytest.mark.parametrize("rate", [6.0, 6.2])
def test_near_the_cap_the_ttft_follows_the_simulation(rate):
    """A cap of 32 under a mean batch of 26 (6 requests/s) and 28 (6.2): the simulation's TTFT mean / p90 are
    269 / 828 and 414 / 1285 ms (four 12000-request replications), against ~90 / ~118 ms under a cap of 256.
    The closed form's, 192 / 452 and 377 / 967 ms, are within a factor of two; without the wait for a place
    they were the uncapped ones, a seventh of the simulation's p90."""
    problem = _problem(32, rate)
    ev = evaluate(problem)
    runs = [simulate(problem, num_requests=12000, warmup_requests=1200, seed=s) for s in range(4)]
    ttft = np.concatenate([r.ttft_s for r in runs])
    assert ev.feasible
    assert 0.5 < ev.ttft_s.mean / float(np.mean(ttft)) < 2.0
    assert 0.5 < ev.ttft_s.p90 / float(np.percentile(ttft, 90)) < 2.0
    # the probability of waiting (Erlang C over the places): the share of time the simulation keeps a prompt
    # out for want of one
    model = _tabulated_model(problem, None)
    _, p_wait = slot_wait(model, model.steady_state(np.array([rate]), 1.0), 1.0)
    blocked = float(np.mean([r.admission_blocked_share for r in runs]))
    assert float(p_wait[0]) == pytest.approx(blocked, rel=0.3)  # 0.24 against 0.23 at 6.0, 0.43 against 0.34
