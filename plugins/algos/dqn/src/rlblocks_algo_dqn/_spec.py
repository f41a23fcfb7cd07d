"""Entry-point spec of DQN: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks.run import atari_presets
from rlblocks_algo_dqn.config import DQNConfig

SPEC = AlgoSpec(
    name="dqn",
    summary="Deep Q-Network with Double, dueling and n-step options.",
    impl="rlblocks_algo_dqn.dqn:DQNPolicy",
    config=DQNConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="off-policy",
    networks=("encoder", "model"),
    action_masks=True,
    # ALE/* ids: the Atari pipeline and the paper's settings (rlblocks.run)
    env_defaults=atari_presets("dqn"),
    defaults={
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
