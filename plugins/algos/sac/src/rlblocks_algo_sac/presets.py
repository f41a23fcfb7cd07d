"""SAC's per-env-family defaults, applied by env id (``rlblocks train sac --env ID``) over the
algorithm's own defaults in ``_spec.py`` and under the user's config and flags. Plain dicts
only: the spec imports this module while listing plugins."""

from __future__ import annotations

from typing import Any

from rlblocks.env_families import for_mujoco

#: Gymnasium MuJoCo locomotion: the SAC paper's settings (Haarnoja et al., 2018, table 1: Adam
#: 3e-4, batch 256, 256-256 ReLU networks, tau 0.005, gamma 0.99, one gradient step per env
#: step, target entropy -dim(A)) with 10k random warm-up steps and a 1M-transition buffer, as
#: Tianshou's MuJoCo examples use (examples/mujoco/mujoco_sac.py).
MUJOCO: dict[str, dict[str, Any]] = {
    "env": {"num_envs": 1, "num_test_envs": 10},
    "buffer": {"size": 1_000_000},
    "trainer": {
        "max_env_steps": 1_000_000,
        "step_per_collect": 1,
        "update_per_step": 1.0,
        "batch_size": 256,
        "warmup_steps": 10_000,
        "test_interval": 5_000,
        "test_episodes": 10,
    },
    "algo": {
        "n_step": 1,  # one-step targets as in the paper (the Pendulum defaults use 3)
        "hidden_sizes": [256, 256],
        "actor_lr": 3e-4,
        "critic_lr": 3e-4,
        "alpha_lr": 3e-4,
        "tau": 0.005,
        "gamma": 0.99,
        "auto_alpha": True,
    },
}
#: InvertedPendulum balances within a few thousand steps: it replaces the MuJoCo preset (same
#: key) and keeps the algorithm's small Pendulum-sized defaults from ``_spec.py``, with a short
#: warm-up and test horizon.
INVERTED_PENDULUM: dict[str, dict[str, Any]] = {
    "trainer": {"warmup_steps": 1_000, "max_env_steps": 50_000, "test_interval": 2_000},
}

ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    **for_mujoco(MUJOCO),
    "InvertedPendulum-*": INVERTED_PENDULUM,
}
