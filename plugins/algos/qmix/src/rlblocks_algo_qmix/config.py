"""Hyperparameters of VDN and QMIX, each with its default and meaning. Imports only attrs (and
core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.contracts import validators as check


def _not_above_start(inst: VDNConfig, _attribute: object, value: float) -> None:
    if value > inst.eps_start:
        raise ValueError(
            f"eps_end={value} is above eps_start={inst.eps_start}; epsilon decays from "
            "eps_start to eps_end"
        )


@define(kw_only=True)
class VDNConfig:
    """Agent networks, target, exploration and optimisation of value decomposition (VDN's
    settings; QMIX adds its mixer's)."""

    hidden_sizes: list[int] = field(factory=lambda: [64, 64], validator=check.hidden_sizes)
    """Widths of the agent Q-network's hidden layers (recurrent: the layers before the GRU;
    the GRU has ``rnn_hidden`` units)."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    agent_id: bool = True
    """Append a one-hot of the agent's index to its observation: one network shared by every
    agent (parameter sharing) can then act differently per agent."""
    recurrent: bool = False
    """A GRU in the agent network, learned over windows of consecutive steps (needs
    ``buffer.sampler=sequence``, e.g. with ``buffer.start=episode`` and ``buffer.length`` the
    episode length: whole episodes, as the papers train); acting carries its state."""
    rnn_hidden: int = field(default=64, validator=validators.ge(1))
    """Units of the agent network's GRU (``recurrent``)."""
    lr: float = field(default=5e-4, validator=check.positive)
    """Adam learning rate."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount factor."""
    n_step: int = field(default=1, validator=validators.ge(1))
    """Steps of real team reward before bootstrapping the target (1: the papers' one-step
    target)."""
    double: bool = True
    """Double Q: each agent's next action is picked by the online network and valued by the
    target network."""
    target_update_interval: int = field(default=200, validator=validators.ge(1))
    """Gradient steps between hard copies into the target networks when ``tau`` is None."""
    tau: float | None = field(
        default=0.01, validator=check.optional(check.unit_interval_open_low, "hard copies")
    )
    """Soft (Polyak) target update: this fraction towards the online networks every gradient
    step. None: hard copies every ``target_update_interval`` gradient steps."""
    eps_start: float = field(default=1.0, validator=check.unit_interval)
    """Each agent's exploration epsilon at the start of training."""
    eps_end: float = field(default=0.05, validator=[check.unit_interval, _not_above_start])
    """Epsilon after the decay."""
    eps_decay_steps: int = field(default=10_000, validator=validators.ge(0))
    """Env steps over which epsilon decays linearly from eps_start to eps_end."""
    eps_test: float = field(default=0.0, validator=check.unit_interval)
    """Epsilon when testing (0 = greedy)."""
    loss: str = field(default="mse", validator=validators.in_(["huber", "mse"]))
    """TD loss on the team's Q-value: mse (the papers') or huber."""
    max_grad_norm: float | None = field(
        default=10.0, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the gradient's global norm to this value (None = no clipping)."""


@define(kw_only=True)
class QMIXConfig(VDNConfig):
    """VDN's settings plus QMIX's mixing network."""

    mixing_embed_dim: int = field(default=32, validator=validators.ge(1))
    """Width of the mixing network's hidden layer (the paper's 32)."""
    hypernet_hidden: int = field(default=64, validator=validators.ge(1))
    """Hidden width of the hypernetworks that make the mixing weights from the state (one
    hidden layer of 64 units, as in the paper's SMAC runs)."""
