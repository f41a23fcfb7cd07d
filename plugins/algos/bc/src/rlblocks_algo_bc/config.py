"""Behaviour cloning's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.contracts import validators as check


def _log_std_max(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


@define(kw_only=True)
class BCConfig:
    """Behaviour cloning (Pomerleau, 1991, "Efficient Training of Artificial Neural Networks
    for Autonomous Navigation"; the supervised baseline of offline RL): a policy fitted to the
    dataset's actions, with no reward and no value function.

    The optimiser settings are d3rlpy's BC defaults (Adam at 1e-3, batch 100: the trainer's
    ``batch_size``); the network, two hidden layers of 256 ReLU units, is TD3+BC's actor, and
    the observations are normalised with the dataset's statistics as TD3+BC does.
    """

    loss: str = field(default="mse", validator=check.one_of("mse", "nll"))
    """Box actions: ``mse`` fits a deterministic actor ``tanh(f(s))`` to the dataset's actions
    by mean squared error; ``nll`` fits a tanh-squashed Gaussian by maximum likelihood
    (minimising ``-log pi(a|s)``; it can represent a spread of actions per state). Discrete and
    MultiDiscrete actions are always fitted by cross-entropy."""
    hidden_sizes: list[int] = field(factory=lambda: [256, 256], validator=check.hidden_sizes)
    """Widths of the policy network's hidden layers (after the encoder)."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate."""
    weight_decay: float = field(default=0.0, validator=check.non_negative)
    """L2 penalty of Adam (``weight_decay``); 0: none."""
    max_grad_norm: float | None = field(
        default=None, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the global gradient norm to this (None: no clipping)."""
    log_std_min: float = field(default=-5.0, validator=check.finite)
    """``loss="nll"``: lower clamp of the Gaussian's log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _log_std_max])
    """``loss="nll"``: upper clamp of the Gaussian's log standard deviation."""
    obs_norm: bool | None = None
    """Normalise each observation feature with the dataset's mean and standard deviation
    (computed once, from the whole buffer, at the first update; saved with the weights). None:
    on for vector Box observations, off for others (images, Dict, Discrete); True refuses an
    observation space it cannot normalise."""
    obs_norm_eps: float = field(default=1e-3, validator=check.positive)
    """Added to the standard deviation before dividing: ``(s - mean) / (std + eps)``."""
    deterministic_eval: bool = True
    """Act with the most likely action (argmax, the Gaussian's mean) when testing; a policy in
    training mode samples (``loss="nll"`` and discrete actions)."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations: through a Nature-DQN CNN (trained with the loss) or flattened."""
    encoder: str | None = field(default=None, validator=check.import_path)
    """Import path of your own observation encoder (``"package.module:factory"``), called as
    ``factory(observation_space, action_space, **encoder_kwargs)`` for a module that maps
    observations to features ``[B, D]``; None: the built-in one. A run directory that names one
    imports it again only when trusted (``--trust-imports``)."""
    encoder_kwargs: dict[str, Any] = field(factory=dict)
    """Keyword arguments of the ``encoder`` factory."""
