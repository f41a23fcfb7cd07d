"""Entry-point spec of BCQ: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_bcq.config import BCQConfig

SPEC = AlgoSpec(
    name="bcq",
    summary="BCQ: offline RL from a fixed dataset, a VAE of the dataset's actions, a bounded "
    "perturbation and soft clipped double Q, for Box actions.",
    impl="rlblocks_algo_bcq.bcq:BCQPolicy",
    config=BCQConfig,
    observation_spaces=("Box",),
    action_spaces=("Box",),
    training="offline",
    # encoder: of every network (the VAE's too); actor: the perturbation model's head, over
    # [features, action]; critic: each critic's head
    networks=("encoder", "actor", "critic"),
    # the paper's schedule (the algorithm's own settings are BCQConfig's defaults): batch 100,
    # an evaluation of 10 episodes every 5,000 gradient steps (the offline trainer counts its
    # test_interval in gradient steps) and a budget of 1M gradient steps, the authors' code's
    # (the paper's figures stop at 300,000); a run names its dataset (buffer.dataset, --dataset)
    defaults={
        "env": {"id": "Pendulum-v1", "num_test_envs": 10},
        "trainer": {
            "batch_size": 100,
            "test_interval": 5_000,
            "test_episodes": 10,
            "max_gradient_steps": 1_000_000,
        },
    },
)
