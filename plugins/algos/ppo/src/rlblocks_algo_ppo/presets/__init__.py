"""Config files with PPO settings from the literature; ``python -m rlblocks_algo_ppo.presets NAME``
prints the path of ``NAME.toml`` (for ``rlblocks train ppo --config``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["preset_path"]


def preset_path(name: str) -> Path:
    """Path of the preset ``name`` (``"mujoco"``)."""
    path = Path(__file__).with_name(f"{name}.toml")
    if not path.is_file():
        known = sorted(p.stem for p in Path(__file__).parent.glob("*.toml"))
        raise FileNotFoundError(f"no PPO preset {name!r}; known presets: {known}")
    return path
