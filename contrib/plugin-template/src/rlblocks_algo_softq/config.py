"""Soft Q-learning's hyperparameters. Imports only attrs, so configs validate without torch."""

from __future__ import annotations

from attrs import define, field, validators


@define(kw_only=True)
class SoftQConfig:
    """Hyperparameters of discrete soft Q-learning."""

    hidden_sizes: list[int] = field(factory=lambda: [128, 128])
    """Widths of the Q-network's hidden layers."""
    lr: float = field(default=1e-3, validator=validators.gt(0))
    """Adam learning rate."""
    gamma: float = field(default=0.99, validator=[validators.ge(0.0), validators.le(1.0)])
    """Discount factor."""
    alpha: float = field(default=0.05, validator=validators.gt(0))
    """Temperature: higher samples more uniformly and values entropy more."""
    n_step: int = field(default=3, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the target."""
    tau: float = field(default=0.01, validator=[validators.gt(0.0), validators.le(1.0)])
    """Soft update rate of the target network per gradient step."""
    greedy_eval: bool = True
    """Act greedily (argmax Q) when testing instead of sampling."""
