"""PSRL's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.contracts import validators as check


@define(kw_only=True)
class PSRLConfig:
    """Posterior sampling for reinforcement learning (Osband, Russo and Van Roy, 2013)."""

    transition_prior: float = field(default=1.0, validator=check.positive)
    """Concentration of the Dirichlet prior over each (state, action)'s next state (and the
    episode's end), the same for every outcome: 1 is uniform over all of them."""
    reward_prior_mean: float = field(default=0.0, validator=check.finite)
    """Mean of the Normal prior over each (state, action)'s mean reward."""
    reward_prior_std: float = field(default=1.0, validator=check.positive)
    """Standard deviation of that prior."""
    reward_noise_std: float = field(default=1.0, validator=check.positive)
    """Standard deviation of a reward around its (state, action)'s mean, taken as known: the
    posterior of the mean is Normal, narrowing as ``1 / sqrt(n)`` with ``n`` visits."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount of the value iteration that solves each sampled MDP."""
    vi_tolerance: float = field(default=1e-6, validator=check.positive)
    """Value iteration stops when no state value changes by more than this."""
    vi_max_iterations: int = field(default=2_000, validator=validators.ge(1))
    """Value iteration stops after this many sweeps in any case (gamma = 1 may not converge)."""
    test_on_mean: bool = True
    """Tests act greedily on the posterior-mean MDP (the best guess); False: on the MDP last
    sampled, as in training."""
