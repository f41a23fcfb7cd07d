"""Entry-point spec of TD3+BC: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_td3bc.config import TD3BCConfig

SPEC = AlgoSpec(
    name="td3bc",
    summary="TD3+BC: offline RL from a fixed dataset, TD3 plus behaviour cloning, for Box actions.",
    impl="rlblocks_algo_td3bc.td3bc:TD3BCPolicy",
    config=TD3BCConfig,
    observation_spaces=("Box",),
    action_spaces=("Box",),
    training="offline",
    networks=("encoder", "actor", "critic"),
    # the paper's schedule (the algorithm's own settings are TD3BCConfig's defaults): batch
    # 256, an evaluation of 10 episodes every 5,000 gradient steps (the offline trainer counts
    # its test_interval in gradient steps) and a budget of 1M gradient steps; a run names its
    # dataset (buffer.dataset, --dataset)
    defaults={
        "env": {"id": "Pendulum-v1", "num_test_envs": 10},
        "trainer": {
            "batch_size": 256,
            "test_interval": 5_000,
            "test_episodes": 10,
            "max_gradient_steps": 1_000_000,
        },
    },
)
