"""CrossQ's per-env-family defaults, applied by env id over the algorithm's own defaults in
``_spec.py`` and under the user's config and flags. Plain dicts only: the spec imports this
module while listing plugins."""

from __future__ import annotations

from typing import Any

from rlblocks.run import for_mujoco

#: Gymnasium MuJoCo locomotion: the CrossQ paper's settings (Bhatt et al., 2024, appendix,
#: hyperparameter table): 2048-2048 critics and a 256-256 actor, both with Batch
#: Renormalization (momentum 0.99, 100k warm-up passes as in its reference code), Adam 1e-3
#: with beta1 = 0.5, batch 256, gamma 0.99, one gradient step per env step, an actor step
#: every 3, automatic entropy tuning towards -dim(A) and 5,000 random warm-up steps.
MUJOCO: dict[str, dict[str, Any]] = {
    "env": {"num_envs": 1, "num_test_envs": 10},
    "buffer": {"size": 1_000_000},
    "trainer": {
        "max_env_steps": 1_000_000,
        "step_per_collect": 1,
        "update_per_step": 1.0,
        "batch_size": 256,
        "warmup_steps": 5_000,
        "test_interval": 5_000,
        "test_episodes": 10,
    },
    "algo": {
        "n_step": 1,
        "hidden_sizes": [256, 256],
        "critic_hidden_sizes": [2048, 2048],
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
        "adam_beta1": 0.5,
        "gamma": 0.99,
        "policy_delay": 3,
        "bn_momentum": 0.99,
        "bn_warmup": 100_000,
        "auto_alpha": True,
    },
}

#: InvertedPendulum balances within a few thousand steps: it keeps the small Pendulum-sized
#: defaults from ``_spec.py``, with a short warm-up and test horizon.
INVERTED_PENDULUM: dict[str, dict[str, Any]] = {
    "trainer": {"warmup_steps": 1_000, "max_env_steps": 50_000, "test_interval": 2_000},
}

ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    **for_mujoco(MUJOCO),
    "InvertedPendulum-*": INVERTED_PENDULUM,
}
