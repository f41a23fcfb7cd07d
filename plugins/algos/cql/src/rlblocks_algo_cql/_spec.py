"""Entry-point spec of CQL: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_cql.config import CQLConfig

SPEC = AlgoSpec(
    name="cql",
    summary="Conservative Q-Learning: offline RL from a fixed dataset, SAC with a conservative "
    "penalty on the critics, for Box actions.",
    impl="rlblocks_algo_cql.cql:CQLPolicy",
    config=CQLConfig,
    observation_spaces=("Box",),
    action_spaces=("Box",),
    training="offline",
    networks=("encoder", "actor", "critic"),
    # the offline schedule td3bc has too: batch 256 (the authors'), 10 test episodes every 5,000
    # gradient steps (the offline trainer counts its test_interval in gradient steps) and a
    # budget of 1M gradient steps; a run names its dataset (buffer.dataset, --dataset). The
    # algorithm's own settings are CQLConfig's defaults.
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
