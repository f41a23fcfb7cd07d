"""attrs validators of hyperparameters, shared by core's config sections and algorithm configs.

Each runs once, when a config is built; its message says what the value must be and what it was,
and the config loader puts the field path in front (``$.algo.tau: must be in (0, 1], got -1.0``).
This module imports only the standard library, because plugin specs import config classes while
listing plugins.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "ACTIVATIONS",
    "activation",
    "finite",
    "hidden_sizes",
    "import_path",
    "non_negative",
    "one_of",
    "optional",
    "optional_hidden_sizes",
    "positive",
    "unit_interval",
    "unit_interval_open_low",
]

Validator = Callable[[Any, Any, Any], None]

#: Activation names the networks accept (``rlblocks.algo.nets`` builds them).
ACTIVATIONS = ("relu", "tanh", "elu", "gelu", "silu")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _NumberCheck:
    """A validator of numbers: ``test(value)`` must hold; ``wanted`` says what it must be."""

    def __init__(self, wanted: str, test: Callable[[float], bool]) -> None:
        self.wanted = wanted
        self.test = test

    def __call__(self, _inst: Any, _attribute: Any, value: Any) -> None:
        if not _is_number(value) or not self.test(value):
            raise ValueError(f"must be {self.wanted}, got {value!r}")

    def __repr__(self) -> str:
        return f"<validator: {self.wanted}>"


finite = _NumberCheck("a finite number", math.isfinite)
"""A finite number (no NaN, no infinity)."""
positive = _NumberCheck("a finite number > 0", lambda v: 0 < v < math.inf)
"""A finite number > 0 (learning rates, temperatures, step sizes)."""
non_negative = _NumberCheck("a finite number >= 0", lambda v: 0 <= v < math.inf)
"""A finite number >= 0 (loss weights, noise scales)."""
unit_interval = _NumberCheck("in [0, 1]", lambda v: 0 <= v <= 1)
"""A number in [0, 1] (discounts, GAE lambda, exploration rates)."""
unit_interval_open_low = _NumberCheck("in (0, 1]", lambda v: 0 < v <= 1)
"""A number in (0, 1] (Polyak rates: 0 would never move the target)."""


def optional(check: _NumberCheck, meaning: str = "") -> Validator:
    """``check``, or None; ``meaning`` (what None does) goes into the message."""
    note = f" ({meaning})" if meaning else ""
    either = _NumberCheck(f"{check.wanted} or None{note}", check.test)

    def check_optional(inst: Any, attribute: Any, value: Any) -> None:
        if value is not None:
            either(inst, attribute, value)

    return check_optional


def one_of(*choices: str) -> Validator:
    """One of ``choices``; a near miss gets a suggestion."""

    def check(_inst: Any, _attribute: Any, value: Any) -> None:
        if value in choices:
            return
        close = difflib.get_close_matches(str(value), choices, n=1)
        close = close or [c for c in choices if str(value) and c.startswith(str(value))][:1]
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        raise ValueError(f"unknown value {value!r}{hint} choose one of: {', '.join(choices)}")

    return check


activation = one_of(*ACTIVATIONS)
"""An activation name of :data:`ACTIVATIONS`."""


def hidden_sizes(_inst: Any, _attribute: Any, value: Any) -> None:
    """Layer widths: a list of ints >= 1 (an empty list makes the network a linear map)."""
    ok = isinstance(value, list | tuple) and all(
        isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in value
    )
    if not ok:
        raise ValueError(
            f"must be a list of layer widths, each an int >= 1 (e.g. [64, 64]), got {value!r}"
        )


def optional_hidden_sizes(inst: Any, attribute: Any, value: Any) -> None:
    """Layer widths as :func:`hidden_sizes`, or None (then the network takes the shared
    ``hidden_sizes``)."""
    if value is not None:
        hidden_sizes(inst, attribute, value)


def import_path(_inst: Any, _attribute: Any, value: Any) -> None:
    """None, or where code lives: ``"package.module:name"`` (imported only when a run is built
    from a config its user gave, or from a run directory they trust)."""
    if value is None:
        return
    module, sep, name = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not (module and sep and name):
        raise ValueError(
            f"must be an import path 'package.module:name' (a factory or class), got {value!r}"
        )
