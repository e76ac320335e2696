"""The decode batch's spread in an open loop (``planner.serving.batch.batch_dispersion``).

Its laws: bursts of arrivals while prefill stretches the running streams' iterations (a branching process),
and a decode iteration that lengthens with the batch (a processor-sharing station). The simulation check is
``test_serving_crosscheck.test_decode_batch_spread_follows_the_simulation``; these are the laws' limits.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs.types import Parallelism
from planner.engines import find_engine
from planner.hardware import load_catalog
from planner.models import load_model_catalog
from planner.serving.aggregated import AggregatedModel
from planner.serving.batch import batch_dispersion, decode_elasticity, decode_life_overlap
from planner.serving.types import AggregatedDeployment, ServingProblem
from planner.serving.workload import (
    Arrival,
    LengthDistribution,
    Workload,
    fixed_length,
    lognormal_lengths,
)


def _model(output: LengthDistribution, chunked: bool = True) -> AggregatedModel:
    problem = ServingProblem(
        model=load_model_catalog().get("meta-llama/Llama-3.1-8B"),
        deployment=AggregatedDeployment(gpu=load_catalog()["h100-sxm"], parallelism=Parallelism(tp=1),
                                        chunked_prefill=chunked, token_budget=8192),
        workload=Workload(input_tokens=lognormal_lengths(median=1000, p90=3000), output_tokens=output,
                          arrival=Arrival(kind="poisson", rate_per_s=1.0)),
        engine=find_engine("vllm"), weight_dtype="bf16", kv_dtype="bf16",
    )
    return AggregatedModel(problem)


def test_decode_life_overlap_of_known_laws():
    assert decode_life_overlap(_model(fixed_length(300))) == pytest.approx(1.0)
    # lives of 1 and 3 iterations, equally likely: E[min] = (1 + 1 + 1 + 3) / 4 = 1.5 against E[D] = 2
    two = LengthDistribution(values=np.array([2.0, 4.0]), weights=np.array([0.5, 0.5]))
    assert decode_life_overlap(_model(two)) == pytest.approx(0.75)
    # a long-tailed life overlaps less than a fixed one (exponential lives: 1/2)
    assert 0.3 < decode_life_overlap(_model(lognormal_lengths(median=150, p90=450))) < 0.7


def test_decode_life_overlap_is_the_pairwise_mean_of_minima():
    # unsorted points with ties and zero-length lives, against E[min(D₁, D₂)] summed over every pair
    rng = np.random.default_rng(7)
    for size in (3, 40, 256):
        values = rng.choice(np.array([1.0, 2.0, 7.0, 30.0, 31.0, 400.0, 2000.0]), size=size)
        values[: size // 3] = np.round(rng.lognormal(4.0, 1.2, size // 3)) + 1.0
        weights = rng.random(size)
        weights /= weights.sum()
        d = values - 1.0
        pairwise = float(weights @ np.minimum(d[:, None], d[None, :]) @ weights) / float(weights @ d)
        law = LengthDistribution(values=values, weights=weights)
        assert decode_life_overlap(_model(law)) == pytest.approx(pairwise, rel=1e-12)


@pytest.mark.parametrize("chunked", [True, False])
def test_dispersion_is_poisson_at_light_load_and_grows_with_it(chunked):
    model = _model(lognormal_lengths(median=150, p90=450), chunked)
    sat = model.saturation_rate_per_s()
    rates = sat * np.array([0.005, 0.1, 0.3, 0.5, 0.7, 0.9])
    st = model.steady_state(rates, 1.0)
    f = batch_dispersion(model, st)
    assert f[0] == pytest.approx(1.0, abs=0.02)  # M/G/∞: Poisson occupancy
    assert np.all(np.diff(f) > 0)
    assert f[-1] > 3.0


def test_decode_elasticity_of_a_power_law():
    b = np.array([4.0, 30.0, 200.0])
    np.testing.assert_allclose(decode_elasticity(lambda x: 3.0 * x**0.4, b), 0.4, rtol=1e-9)
    np.testing.assert_allclose(decode_elasticity(lambda x: np.full_like(x, 0.01), b), 0.0, atol=1e-12)
    # capped below 1: the processor-sharing law diverges at 1
    assert decode_elasticity(lambda x: x**2, b).max() < 1.0
