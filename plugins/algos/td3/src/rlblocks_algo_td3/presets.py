"""TD3's per-env-family defaults, applied by env id over the algorithm's own defaults in
``_spec.py`` and under the user's config and flags. Plain dicts only."""

from __future__ import annotations

from typing import Any

from rlblocks.run import for_mujoco

#: Gymnasium MuJoCo locomotion: the TD3 paper's settings (Fujimoto et al., 2018, and the
#: authors' published code: Adam 3e-4, batch 256, 256-256 ReLU networks, tau 0.005, exploration
#: noise 0.1, policy noise 0.2 clipped at 0.5, policy delay 2, 25k random warm-up steps), as
#: Tianshou's MuJoCo examples use (examples/mujoco/mujoco_td3.py).
MUJOCO: dict[str, dict[str, Any]] = {
    "env": {"num_envs": 1, "num_test_envs": 10},
    "buffer": {"size": 1_000_000},
    "trainer": {
        "max_env_steps": 1_000_000,
        "step_per_collect": 1,
        "update_per_step": 1.0,
        "batch_size": 256,
        "warmup_steps": 25_000,
        "test_interval": 5_000,
        "test_episodes": 10,
    },
    "algo": {
        "n_step": 1,  # one-step targets as in the paper (the Pendulum defaults use 3)
        "hidden_sizes": [256, 256],
        "actor_lr": 3e-4,
        "critic_lr": 3e-4,
        "tau": 0.005,
        "gamma": 0.99,
        "exploration_sigma": 0.1,
        "policy_noise": 0.2,
        "noise_clip": 0.5,
        "policy_delay": 2,
    },
}
ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = for_mujoco(MUJOCO)
