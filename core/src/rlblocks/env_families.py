"""Families of gymnasium env ids that algorithm presets target, as ``fnmatch`` patterns for an
:class:`~rlblocks.plugins.spec.AlgoSpec`'s ``env_defaults``. Plain data: specs import it while
listing plugins."""

from __future__ import annotations

from typing import Any

__all__ = ["MUJOCO_ENVS", "for_mujoco"]

#: Gymnasium's MuJoCo tasks (any version suffix).
MUJOCO_ENVS = (
    "Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
    "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d",
)  # fmt: skip


def for_mujoco(preset: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"Ant-*": preset, "HalfCheetah-*": preset, ...}`` for every MuJoCo task."""
    return {f"{name}-*": preset for name in MUJOCO_ENVS}
