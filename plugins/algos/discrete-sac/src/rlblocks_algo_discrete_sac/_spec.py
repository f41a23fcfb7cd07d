"""Entry-point spec of discrete SAC: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_discrete_sac.config import DiscreteSACConfig

SPEC = AlgoSpec(
    name="discrete-sac",
    summary="Soft Actor-Critic over a categorical policy, for Discrete actions.",
    impl="rlblocks_algo_discrete_sac.discrete_sac:DiscreteSACPolicy",
    config=DiscreteSACConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="off-policy",
    action_masks=True,
    networks=("encoder", "actor", "critic"),
    defaults={
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 100},
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
        "algo": {
            "hidden_sizes": [128, 128],
            "actor_lr": 1e-3,
            "critic_lr": 1e-3,
            "n_step": 3,
            "tau": 0.01,
        },
    },
)
