"""Entry-point spec of GAIL: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_gail.config import GAILConfig

SPEC = AlgoSpec(
    name="gail",
    summary="GAIL: imitation of a dataset's expert through a discriminator's reward, learned "
    "on-policy (PPO, or any on-policy algorithm by config).",
    impl="rlblocks_algo_gail.gail:GAILPolicy",
    config=GAILConfig,
    observation_spaces=("Box",),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    uses_dataset=True,
    networks=("encoder", "actor", "critic"),
    # PPO's CartPole schedule (8 envs, 256 env steps per collect learned as one minibatch for 10
    # epochs at lr 2e-3, 100 test episodes every 2,048 env steps) with a larger budget: the
    # reward is learned along the way. The expert's transitions come from --dataset.
    defaults={
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 100},
        "buffer": {"size": 2_100},
        "trainer": {
            "max_env_steps": 500_000,
            "step_per_collect": 256,
            "repeat_per_collect": 10,
            "batch_size": 256,
            "test_interval": 2_048,
            "test_episodes": 100,
        },
        "algo": {"learner_config": {"lr": 2e-3}},
    },
)
