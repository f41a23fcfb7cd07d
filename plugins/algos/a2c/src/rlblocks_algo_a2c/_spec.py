"""Entry-point spec of A2C: imports nothing heavier than attrs."""

from typing import Any

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_a2c.config import A2CConfig

#: Pendulum: RL Zoo's a2c.yml settings for Pendulum-v1 where we have them (8 envs x 8 steps per
#: update, gamma 0.9, GAE lambda 0.9; its gSDE is replaced by a plain Gaussian starting at
#: log_std -0.5), Adam 1e-3 with standardised advantages and value scaling (as PPO's Pendulum
#: settings), and the Gaussian's mean squashed with tanh (Tianshou's ActorProb): without
#: tanh_mean neither of seeds 0-1 reached -250 in 400k env steps; with it, -250 took a median
#: 160k env steps (12 s here) over seeds 0-4, and all of seeds 0-9 reached it (140k-260k).
PENDULUM: dict[str, dict[str, Any]] = {
    "env": {"num_test_envs": 100},
    "buffer": {"size": 100},
    "trainer": {
        "max_env_steps": 600_000,
        "step_per_collect": 64,
        "batch_size": 64,
        "test_interval": 20_000,
    },
    "algo": {
        "gamma": 0.9,
        "gae_lambda": 0.9,
        "lr": 1e-3,
        "log_std_init": -0.5,
        "norm_adv": True,
        "value_scaling": True,
        "tanh_mean": True,
    },
}

SPEC = AlgoSpec(
    name="a2c",
    summary="Advantage actor-critic (synchronous A3C) with GAE, for discrete and Box actions.",
    impl="rlblocks_algo_a2c.a2c:A2CPolicy",
    config=A2CConfig,
    observation_spaces=("Box", "Discrete", "Dict", "MultiDiscrete"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    action_masks=True,
    networks=("encoder", "actor", "critic"),
    defaults={
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 25},
        "buffer": {"size": 256},
        "trainer": {
            "max_env_steps": 300_000,
            "step_per_collect": 40,
            "repeat_per_collect": 1,
            "batch_size": 256,
            "test_interval": 4_000,
            "test_episodes": 100,
        },
    },
    env_defaults={"Pendulum-*": PENDULUM},
)
