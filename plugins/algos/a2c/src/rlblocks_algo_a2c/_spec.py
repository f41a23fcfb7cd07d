"""Entry-point spec of A2C: imports nothing heavier than attrs."""

from rlblocks.plugins.spec import AlgoSpec
from rlblocks_algo_a2c.config import A2CConfig

SPEC = AlgoSpec(
    name="a2c",
    summary="Advantage actor-critic (synchronous A3C) with GAE, for discrete and Box actions.",
    impl="rlblocks_algo_a2c.a2c:A2CPolicy",
    config=A2CConfig,
    observation_spaces=("Box", "Discrete", "Dict", "MultiDiscrete"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
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
)
