"""Discrete BCQ's hyperparameters, each with its default and meaning. Imports only attrs (and
core's attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.contracts import validators as check


def _below_one(_inst: Any, attribute: Any, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(
            f"must be in [0, 1): the most likely action has G(a|s) / max G = 1, which is not "
            f"above 1, so {attribute.name} >= 1 would allow no action; got {value!r}"
        )


@define(kw_only=True)
class DiscreteBCQConfig:
    """Discrete Batch-Constrained deep Q-learning (Fujimoto, Conti, Ghavamzadeh & Pineau, 2019,
    "Benchmarking Batch Deep Reinforcement Learning Algorithms", NeurIPS Deep RL workshop), for
    Discrete actions.

    The defaults are the paper's (its Atari hyperparameter table): ``threshold`` 0.3, Adam at
    6.25e-5 with epsilon 1.5e-4, batch 32 (the trainer's ``batch_size``), ``gamma`` 0.99,
    one-step targets, a Huber loss and the target network replaced every 8,000 gradient steps.
    The rest follow the authors' code (github.com/sfujim/BCQ, ``discrete_BCQ``): its network
    for vector observations (a Q head and a behaviour-cloning head, each two hidden layers of
    256 units, over the shared observation encoder that its Atari network shares too), and the
    penalty ``0.01 * mean(logits^2)`` on the behaviour-cloning head's logits. The paper tests
    with 0.1% random actions; ``eps_test`` is 0 here so that a test is a function of the state.
    """

    hidden_sizes: list[int] = field(factory=lambda: [256, 256], validator=check.hidden_sizes)
    """Widths of the hidden layers of the Q head and of the behaviour-cloning head."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    lr: float = field(default=6.25e-5, validator=check.positive)
    """Adam learning rate of the whole network (both heads and the encoder)."""
    adam_eps: float = field(default=1.5e-4, validator=check.positive)
    """Adam's epsilon."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount factor."""
    n_step: int = field(default=1, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the target (cut at episode ends)."""
    threshold: float = field(default=0.3, validator=_below_one)
    """``tau``: an action is allowed at ``s`` when ``G(a|s) / max_a' G(a'|s) > threshold``.
    0 allows every action: offline (double) DQN. Near 1: the behaviour policy's most likely
    action only, behaviour cloning."""
    imitation_logit_penalty: float = field(default=0.01, validator=check.non_negative)
    """Weight of ``mean(logits^2)`` in the loss: keeps the behaviour-cloning head's logits
    small, so no action's ratio collapses to exactly 0."""
    loss: str = field(default="huber", validator=validators.in_(["huber", "mse"]))
    """The Q head's TD loss: huber (smooth L1) or mse."""
    target_update_interval: int = field(default=8_000, validator=validators.ge(1))
    """Gradient steps between hard copies into the target network when ``tau`` is None."""
    tau: float | None = field(
        default=None, validator=check.optional(check.unit_interval_open_low, "hard copies")
    )
    """Soft (Polyak) update rate of the target network per gradient step; None: hard copies
    every ``target_update_interval`` steps (the paper's)."""
    eps_test: float = field(default=0.0, validator=check.unit_interval)
    """Share of random actions when testing (the paper's 0.001; 0: greedy among the allowed
    actions)."""
    max_grad_norm: float | None = field(
        default=None, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the gradient's global norm to this value (None: no clipping, as the authors)."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations: through the Nature-DQN CNN (shared by both heads, as the authors'
    Atari network) or flattened like any Box."""
    encoder: str | None = field(default=None, validator=check.import_path)
    """Import path of your own observation encoder (``"package.module:factory"``), called as
    ``factory(observation_space, action_space, **encoder_kwargs)`` for a module that maps
    observations to features ``[B, D]``; None: the built-in one. A run directory that names one
    imports it again only when trusted (``--trust-imports``)."""
    encoder_kwargs: dict[str, Any] = field(factory=dict)
    """Keyword arguments of the ``encoder`` factory."""
