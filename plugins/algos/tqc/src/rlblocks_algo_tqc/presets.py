"""TQC's per-env-family defaults, applied by env id over the algorithm's own defaults in
``_spec.py`` and under the user's config and flags. Plain dicts only: the spec imports this
module while listing plugins."""

from __future__ import annotations

from typing import Any

from rlblocks.run import for_mujoco

#: Gymnasium MuJoCo locomotion: the TQC paper's settings (Kuznetsov et al., 2020, appendix,
#: hyperparameter table): N = 5 critics of M = 25 atoms, each critic a 512-512-512 MLP, the
#: actor 256-256, Adam 3e-4 for actor, critics and temperature, batch 256, gamma 0.99,
#: tau 0.005, a 1M-transition buffer, one gradient step per env step and automatic entropy
#: tuning towards -dim(A); d = 2 atoms dropped per critic except where ``DROPPED`` says.
#: The 10k random warm-up steps are our SAC preset's.
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
        "n_step": 1,
        "hidden_sizes": [256, 256],
        "critic_hidden_sizes": [512, 512, 512],
        "actor_lr": 3e-4,
        "critic_lr": 3e-4,
        "alpha_lr": 3e-4,
        "tau": 0.005,
        "gamma": 0.99,
        "auto_alpha": True,
        "n_critics": 5,
        "n_quantiles": 25,
        "drop_per_critic": 2,
    },
}

#: Atoms dropped per critic where the paper's table departs from 2: Hopper 5, HalfCheetah 0.
DROPPED: dict[str, int] = {"Hopper": 5, "HalfCheetah": 0}


def _with_drop(preset: dict[str, dict[str, Any]], drop: int) -> dict[str, dict[str, Any]]:
    return {**preset, "algo": {**preset["algo"], "drop_per_critic": drop}}


#: InvertedPendulum balances within a few thousand steps: it keeps the small Pendulum-sized
#: defaults from ``_spec.py``, with a short warm-up and test horizon.
INVERTED_PENDULUM: dict[str, dict[str, Any]] = {
    "trainer": {"warmup_steps": 1_000, "max_env_steps": 50_000, "test_interval": 2_000},
}

ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    **for_mujoco(MUJOCO),
    **{f"{name}-*": _with_drop(MUJOCO, drop) for name, drop in DROPPED.items()},
    "InvertedPendulum-*": INVERTED_PENDULUM,
}
