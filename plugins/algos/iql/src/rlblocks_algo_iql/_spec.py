"""Entry-point spec of IQL: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_iql.config import IQLConfig

SPEC = AlgoSpec(
    name="iql",
    summary="Implicit Q-Learning: offline RL from a fixed dataset, an expectile state value and "
    "advantage-weighted policy extraction, for Box and Discrete actions.",
    impl="rlblocks_algo_iql.iql:IQLPolicy",
    config=IQLConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Box", "Discrete"),
    training="offline",
    action_masks=True,
    networks=("encoder", "actor", "critic"),
    # the authors' schedule (the algorithm's own settings are IQLConfig's defaults): batch 256,
    # an evaluation of 10 episodes every 5,000 gradient steps (the offline trainer counts its
    # test_interval in gradient steps) and a budget of 1M gradient steps; a run names its
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
