"""C51's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only config pieces)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ValueBasedConfig
from rlblocks.contracts import validators as check


def _above_v_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.v_min:
        raise ValueError(f"must be > v_min={inst.v_min}, got {value!r}")


@define(kw_only=True)
class C51Config(ValueBasedConfig):
    """C51 (Bellemare et al., 2017): the value-based fields plus the categorical support."""

    num_atoms: int = field(default=51, validator=validators.ge(2))
    """Atoms of the categorical return distribution (evenly spaced on [v_min, v_max])."""
    v_min: float = field(default=-10.0, validator=check.finite)
    """Smallest return the support represents (lower returns are clipped to it)."""
    v_max: float = field(default=10.0, validator=[check.finite, _above_v_min])
    """Largest return the support represents (higher returns are clipped to it)."""
