"""Entry-point spec of REINFORCE: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_reinforce.config import ReinforceConfig

SPEC = AlgoSpec(
    name="reinforce",
    summary="REINFORCE / vanilla policy gradient on Monte-Carlo returns of whole episodes.",
    impl="rlblocks_algo_reinforce.reinforce:ReinforcePolicy",
    config=ReinforceConfig,
    observation_spaces=("Box", "Discrete", "Dict", "MultiDiscrete"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    action_masks=True,
    networks=("encoder", "actor"),
    defaults={
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 25},
        "buffer": {"size": 20_000},
        "trainer": {
            "max_env_steps": 500_000,
            "episode_per_collect": 8,
            "repeat_per_collect": 1,
            "batch_size": 100_000,  # >= the rollout: one step on all of it
            "test_interval": 5_000,
            "test_episodes": 100,
        },
    },
)
