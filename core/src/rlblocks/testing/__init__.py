"""Testing helpers for rlblocks and its plugins: pytest fixtures and the conformance checks.

The pytest plugin (:mod:`rlblocks.testing.plugin`) is loaded automatically by pytest once rlblocks
is installed; the checks are imported on first use so that loading the plugin stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "CrashAt",
    "check_algorithm",
    "check_buffer",
    "check_vector_env",
]

if TYPE_CHECKING:
    from rlblocks.testing.algo_checks import check_algorithm
    from rlblocks.testing.buffer_checks import check_buffer
    from rlblocks.testing.env_checks import check_vector_env
    from rlblocks.testing.hooks import CrashAt

__getattr__, __dir__ = attach(__name__, __file__)
