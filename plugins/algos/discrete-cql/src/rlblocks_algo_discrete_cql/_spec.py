"""Entry-point spec of discrete CQL: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_discrete_cql.config import DiscreteCQLConfig

SPEC = AlgoSpec(
    name="discrete-cql",
    summary="Discrete CQL: offline RL from a fixed dataset, QR-DQN with a conservative penalty "
    "on Q, for Discrete actions.",
    impl="rlblocks_algo_discrete_cql.discrete_cql:DiscreteCQLPolicy",
    config=DiscreteCQLConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="offline",
    action_masks=True,
    networks=("encoder", "model"),
    # CartPole settings of Tianshou's discrete CQL test (test/offline/test_discrete_cql.py:
    # Adam at 3e-3, 3-step targets, 200 quantiles, one hidden layer of 64, batch 32, target
    # network every 500 steps), tested every 1,000 gradient steps on 10 episodes; the offline
    # budget of 1M gradient steps, as td3bc and cql. A run names its dataset (--dataset).
    defaults={
        "algo": {"lr": 3e-3, "n_step": 3, "num_quantiles": 200, "hidden_sizes": [64]},
        "env": {"id": "CartPole-v1", "num_test_envs": 10},
        "trainer": {
            "batch_size": 32,
            "test_interval": 1_000,
            "test_episodes": 10,
            "max_gradient_steps": 1_000_000,
        },
    },
)
