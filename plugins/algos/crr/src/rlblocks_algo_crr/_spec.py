"""Entry-point spec of CRR: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_crr.config import CRRConfig

SPEC = AlgoSpec(
    name="crr",
    summary="Critic Regularized Regression: offline RL from a fixed dataset, behaviour cloning "
    "filtered by a critic's advantage (binary or exponential), for Box and Discrete actions.",
    impl="rlblocks_algo_crr.crr:CRRPolicy",
    config=CRRConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Box", "Discrete"),
    training="offline",
    action_masks=True,
    networks=("encoder", "actor", "critic"),
    # the offline schedule td3bc, cql and iql have too: batch 256, 10 test episodes every 5,000
    # gradient steps (the offline trainer counts its test_interval in gradient steps) and a
    # budget of 1M gradient steps; a run names its dataset (buffer.dataset, --dataset). The
    # algorithm's own settings are CRRConfig's defaults.
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
