"""REDQ's per-env-family defaults, applied by env id over the algorithm's own defaults in
``_spec.py`` and under the user's config and flags. Plain dicts only."""

from __future__ import annotations

from typing import Any

from rlblocks.run import for_mujoco

#: Gymnasium MuJoCo locomotion: the REDQ paper's settings (Chen et al., 2021, table 1: N = 10,
#: M = 2, G = 20, Adam 3e-4, batch 256, 256-256 networks, tau 0.005, 5k random warm-up steps),
#: as Tianshou's examples/mujoco/mujoco_redq.py uses them.
MUJOCO: dict[str, dict[str, Any]] = {
    "env": {"num_envs": 1, "num_test_envs": 10},
    "buffer": {"size": 1_000_000},
    "trainer": {
        "max_env_steps": 300_000,
        "step_per_collect": 1,
        "update_per_step": 20.0,
        "batch_size": 256,
        "warmup_steps": 5_000,
        "test_interval": 5_000,
        "test_episodes": 10,
    },
    "algo": {
        "hidden_sizes": [256, 256],
        "actor_lr": 3e-4,
        "critic_lr": 3e-4,
        "alpha_lr": 3e-4,
        "ensemble_size": 10,
        "subset_size": 2,
        "actor_delay": 20,
    },
}
ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = for_mujoco(MUJOCO)
