"""DQN's hyperparameters, each with its default and meaning. Imports only attrs."""

from __future__ import annotations

from attrs import define, field, validators

_pos = validators.gt(0)


@define(kw_only=True)
class DQNConfig:
    """Hyperparameters of DQN and its options."""

    hidden_sizes: list[int] = field(factory=lambda: [128, 128])
    """Widths of the Q-network's hidden layers."""
    activation: str = "relu"
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    lr: float = field(default=2e-3, validator=_pos)
    """Adam learning rate."""
    gamma: float = field(default=0.99, validator=[validators.ge(0.0), validators.le(1.0)])
    """Discount factor."""
    n_step: int = field(default=3, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the target (1 = classic DQN)."""
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling head: separate state-value and advantage streams."""
    target_update_interval: int = field(default=500, validator=validators.ge(0))
    """Gradient steps between hard copies into the target network when ``tau`` is None
    (0 and no tau = no target network)."""
    tau: float | None = 0.01
    """Soft (Polyak) update: move the target network this fraction towards the online network
    every gradient step. None switches to hard copies every ``target_update_interval`` steps."""
    eps_start: float = 1.0
    """Exploration epsilon at the start of training."""
    eps_end: float = 0.05
    """Exploration epsilon after the decay."""
    eps_decay_steps: int = field(default=5_000, validator=validators.ge(0))
    """Env steps over which epsilon decays linearly from eps_start to eps_end."""
    eps_test: float = 0.0
    """Epsilon used when testing (0 = greedy)."""
    loss: str = field(default="huber", validator=validators.in_(["huber", "mse"]))
    """TD loss: huber (smooth L1) or mse."""
    max_grad_norm: float | None = 10.0
    """Clip the gradient's global norm to this value (None = no clipping)."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations: through the Nature-DQN CNN or flattened like any Box."""
