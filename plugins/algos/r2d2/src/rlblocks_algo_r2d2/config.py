"""R2D2's hyperparameters, each with its default and meaning, and the options of the
``prioritized-sequence`` sampler. Imports only attrs (and core's attrs-only config pieces),
because plugin specs import config classes while listing plugins."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ValueBasedConfig
from rlblocks.contracts import validators as check


def _no_noisy(_inst: Any, _attribute: object, value: bool) -> None:
    if value:
        raise ValueError(
            "R2D2 explores with epsilon-greedy; noisy layers are not supported in its "
            "recurrent Q-network (leave noisy=false)"
        )


@define(kw_only=True)
class R2D2Config(ValueBasedConfig):
    """R2D2 (Kapturowski et al., 2019): the value-based fields plus the recurrent network,
    value rescaling and the priority of a window.

    ``hidden_sizes`` are the Q head's layers after the recurrent core; ``torso_sizes`` the
    layers between the observation encoder and the recurrent core. The window length and the
    burn-in are options of the buffer's sampler (``buffer.length``, ``buffer.burn_in``)."""

    hidden_sizes: list[int] = field(factory=lambda: [64], validator=check.hidden_sizes)
    """Widths of the Q head's hidden layers (after the recurrent core)."""
    torso_sizes: list[int] = field(factory=lambda: [64], validator=check.hidden_sizes)
    """Widths of the layers between the observation encoder and the recurrent core (empty:
    the encoder feeds the recurrent core directly)."""
    cell: str = field(default="lstm", validator=validators.in_(("lstm", "gru")))
    """Recurrent cell: "lstm" (the paper's) or "gru"."""
    rnn_hidden: int = field(default=64, validator=validators.ge(1))
    """Hidden size of the recurrent core."""
    rnn_layers: int = field(default=1, validator=validators.ge(1))
    """Stacked recurrent layers."""
    noisy: bool = field(default=False, validator=_no_noisy)
    """Not supported (R2D2 explores with epsilon-greedy)."""
    value_rescaling: bool = True
    """Learn Q in the rescaled space h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x and build the
    n-step target as h(partial + discount * h^-1(Q_target)) (the paper's choice); False: plain
    targets."""
    rescale_eps: float = field(default=1e-3, validator=check.positive)
    """The eps of the value rescaling h (keeps h invertible and Lipschitz)."""
    priority_eta: float = field(default=0.9, validator=check.unit_interval)
    """A window's priority: eta * max|td| + (1 - eta) * mean|td| over its learned steps."""
    lr_decay_steps: int | None = field(
        default=None, validator=check.optional(check.positive, "a constant rate")
    )
    """Anneal the learning rate linearly to zero over this many env steps (None: constant):
    late, small steps keep a learned policy from drifting away again."""
    loss: str = field(default="mse", validator=validators.in_(["huber", "mse"]))
    """TD loss per learned step: mse (half squared error, the paper's) or huber."""
