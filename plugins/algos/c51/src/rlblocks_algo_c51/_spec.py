"""Entry-point spec of C51: imports nothing heavier than attrs."""

from rlblocks.env_families import atari_presets
from rlblocks.plugins.spec import AlgoSpec
from rlblocks_algo_c51.config import C51Config

SPEC = AlgoSpec(
    name="c51",
    summary="C51: categorical distributional DQN (dueling, noisy, n-step, double options).",
    impl="rlblocks_algo_c51.c51:C51Policy",
    config=C51Config,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="off-policy",
    # ALE/* ids: the Atari pipeline and the paper's settings (rlblocks.atari)
    env_defaults=atari_presets("c51"),
    defaults={
        # returns of CartPole with gamma 0.9 stay within the default support [-10, 10]
        "algo": {"gamma": 0.9, "lr": 1e-3, "n_step": 3},
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 20},
        "buffer": {"size": 20_000},
        "trainer": {
            "max_env_steps": 100_000,
            "step_per_collect": 8,
            "update_per_step": 0.25,
            "batch_size": 64,
            "warmup_steps": 1_000,
            "test_interval": 2_500,
            "test_episodes": 100,
        },
    },
)
