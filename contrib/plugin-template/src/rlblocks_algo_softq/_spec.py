"""The entry point's target: what `rlblocks list` shows and how a run is built."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_softq.config import SoftQConfig

SPEC = AlgoSpec(
    name="softq",
    summary="Discrete soft Q-learning (the plugin template).",
    impl="rlblocks_algo_softq.softq:SoftQPolicy",
    config=SoftQConfig,
    observation_spaces=("Box",),
    action_spaces=("Discrete",),
    training="off-policy",
    defaults={
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 20},
        "buffer": {"size": 20_000},
        "trainer": {
            "max_env_steps": 60_000,
            "step_per_collect": 8,
            "update_per_step": 0.25,
            "batch_size": 64,
            "warmup_steps": 1_000,
            "test_interval": 2_500,
        },
    },
)
