"""Entry-point spec of REDQ: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_redq.config import REDQConfig
from rlblocks_algo_redq.presets import ENV_DEFAULTS

SPEC = AlgoSpec(
    name="redq",
    summary="REDQ: SAC with a critic ensemble, random target subsets and a high update ratio.",
    impl="rlblocks_algo_redq.redq:REDQPolicy",
    config=REDQConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Box",),
    training="off-policy",
    networks=("encoder", "actor", "critic"),
    # Pendulum-v1 and any env without a preset (see presets.py for MuJoCo)
    defaults={
        "env": {"id": "Pendulum-v1", "num_envs": 4, "num_test_envs": 100},
        "buffer": {"size": 20_000},
        "trainer": {
            "max_env_steps": 30_000,
            "step_per_collect": 4,
            "update_per_step": 5.0,
            "batch_size": 128,
            "warmup_steps": 500,
            "test_interval": 1_000,
            "test_episodes": 100,
        },
        "algo": {
            "hidden_sizes": [64, 64],
            "actor_lr": 1e-3,
            "critic_lr": 1e-3,
            "alpha_lr": 1e-3,
            "ensemble_size": 10,
            "actor_delay": 5,
        },
    },
    env_defaults=ENV_DEFAULTS,
)
