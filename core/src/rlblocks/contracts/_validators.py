"""attrs validators of hyperparameters, shared by core's config sections and algorithm configs.

Each runs once, when a config is built; its message says what the value must be and what it was,
and the config loader puts the field path in front (``$.algo.tau: must be in (0, 1], got -1.0``).
This module imports only the standard library, because plugin specs import config classes while
listing plugins. It also holds the checks of paths a run will write (a directory, a file), made
before the work that would write them.
"""

from __future__ import annotations

import difflib
import math
import os
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
    "writable_dir_problem",
    "writable_file_problem",
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


# -- paths a run writes ---------------------------------------------------------------------------


def _name_max(directory: str) -> int:
    """The longest file name the file system of ``directory`` takes (255 where unknown)."""
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def writable_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be (or become) a directory this process writes into, as one sentence
    naming the path and the fix; None when it can. Checked without creating anything: the path
    or its nearest existing ancestor must be a writable directory (a file in the way, a
    read-only or unwritable directory are refused), and each name to create must fit the file
    system's limit on name lengths."""
    text = os.fspath(path)
    full = os.path.abspath(text)
    missing: list[str] = []
    node = full
    while not os.path.lexists(node):
        parent, name = os.path.split(node)
        if parent == node:
            break
        missing.append(name)
        node = parent
    if os.path.lexists(node) and not os.path.isdir(node):
        return (
            f"{text} cannot be a directory: {node} is a file, not a directory; pick another "
            "path, or move the file away"
        )
    limit = _name_max(node)
    for name in missing:
        if len(name.encode()) > limit:
            return (
                f"{text} has a name of {len(name.encode())} bytes ({name[:24]}...), longer than "
                f"the {limit} the file system takes; pick a shorter name"
            )
    if not os.access(node, os.W_OK | os.X_OK):
        return (
            f"{text} cannot be written: {node} is not writable (a read-only file system or "
            "missing permissions); pick a directory you can write to"
        )
    return None


def writable_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (its directory could not be made or written,
    the path is a directory, or its name is too long), as one sentence; None when it can."""
    text = os.fspath(path)
    full = os.path.abspath(text)
    if os.path.isdir(full):
        return f"{text} is a directory; name a file"
    directory, name = os.path.split(full)
    problem = writable_dir_problem(directory)
    if problem is not None:
        return problem
    if len(name.encode()) > _name_max(directory):
        return f"{text}: the file name is longer than the file system takes; pick a shorter one"
    if os.path.exists(full) and not os.access(full, os.W_OK):
        return f"{text} cannot be written: the file is read-only; pick another path"
    return None
