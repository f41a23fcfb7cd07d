"""Entry-point spec of PPO: imports nothing heavier than attrs."""

from rlblocks.plugins.spec import AlgoSpec
from rlblocks_algo_ppo.config import PPOConfig

SPEC = AlgoSpec(
    name="ppo",
    summary="Proximal Policy Optimization (clipped surrogate, GAE) for discrete and Box actions.",
    impl="rlblocks_algo_ppo.ppo:PPOPolicy",
    config=PPOConfig,
    observation_spaces=("Box", "Discrete", "Dict", "MultiDiscrete"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    defaults={
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 25},
        "buffer": {"size": 2_100},
        "trainer": {
            "max_env_steps": 200_000,
            "step_per_collect": 1_024,
            "repeat_per_collect": 10,
            "batch_size": 256,
            "test_interval": 4_000,
            "test_episodes": 100,
        },
    },
)
