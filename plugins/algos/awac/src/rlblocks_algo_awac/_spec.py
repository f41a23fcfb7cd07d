"""Entry-point spec of AWAC: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_awac.config import AWACConfig

SPEC = AlgoSpec(
    name="awac",
    summary="Advantage Weighted Actor-Critic, offline: twin critics of the policy and an actor "
    "that clones the dataset's actions weighted by exp(advantage / lambda), for Box actions.",
    impl="rlblocks_algo_awac.awac:AWACPolicy",
    config=AWACConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Box",),
    training="offline",
    networks=("encoder", "actor", "critic"),
    # the authors' batch of 1,024 (rlkit's AWAC MuJoCo launcher), 10 test episodes every 5,000
    # gradient steps (the offline trainer counts its test_interval in gradient steps) and a
    # budget of 1M gradient steps, as td3bc and cql; a run names its dataset (buffer.dataset,
    # --dataset). The algorithm's own settings are AWACConfig's defaults.
    defaults={
        "env": {"id": "Pendulum-v1", "num_test_envs": 10},
        "trainer": {
            "batch_size": 1_024,
            "test_interval": 5_000,
            "test_episodes": 10,
            "max_gradient_steps": 1_000_000,
        },
    },
)
