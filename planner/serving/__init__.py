"""Steady-state serving dynamics: continuous batching with a token budget, disaggregated pools, queueing."""
