"""The network option every actor-critic and value-based config shares: ``network = "mlp" |
"simba"`` and the SimBa size. Imports only attrs (and the attrs-only :mod:`rlblocks.contracts`),
because plugin specs import config classes while listing plugins.
"""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.contracts import validators as check

__all__ = ["NetworkConfig"]


@define(kw_only=True, slots=False)
class NetworkConfig:
    """Which network the default actors, critics and Q-networks use. A mixin without slots, so
    a config may combine it with other option mixins (two slotted bases cannot be combined)."""

    network: str = field(default="mlp", validator=check.one_of("mlp", "simba"))
    """``mlp``: plain MLPs of ``hidden_sizes``. ``simba``: SimBa networks (Lee et al., 2024):
    observations normalised by running statistics of the training collects (saved in
    checkpoints), a linear embedding, pre-LayerNorm residual blocks and a final LayerNorm;
    ``hidden_sizes`` and ``activation`` are then unused (see ``network_width``)."""
    network_width: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """SimBa width of every network; None: the paper's, 128 for actors and 512 for critics and
    Q-networks."""
    network_blocks: int | None = field(
        default=None, validator=validators.optional(validators.ge(0))
    )
    """SimBa residual blocks of every network; None: the paper's, 1 for actors and 2 for critics
    and Q-networks."""
