"""SAC's per-env-family defaults, applied by env id (``rlblocks train sac --env ID``) over the
algorithm's own defaults in ``_spec.py`` and under the user's config and flags. Plain dicts
only: the spec imports this module while listing plugins."""

from __future__ import annotations

from typing import Any

from rlblocks.run import for_mujoco

#: Gymnasium MuJoCo locomotion: 256-256 ReLU networks, batch 256, tau 0.005, gamma 0.99, one
#: gradient step per env step, 10k random warm-up steps and a 1M-transition buffer (the SAC
#: paper's, Haarnoja et al., 2018, table 1), with Adam 1e-3 and a fixed temperature of 0.2 as in
#: Tianshou's MuJoCo example (examples/mujoco/mujoco_sac.py; Weng et al., 2022, table 2 reports
#: it on nine tasks at 1M steps) instead of the paper's 3e-4 and automatic entropy tuning. Chosen
#: on seeds 0-2 at a 50k-step budget (final test return, 10 episodes): HalfCheetah-v5 3892, 3134,
#: 3616 with the paper's settings against 3537, 4738, 4708 with these; Hopper-v5 310, 508, 298
#: against 323, 530, 624. ``--set algo.auto_alpha=true`` tunes the temperature again (from 0.2,
#: towards -dim(A) entropy, at ``alpha_lr``).
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
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 3e-4,
        "tau": 0.005,
        "gamma": 0.99,
        "auto_alpha": False,
        "alpha": 0.2,
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
