"""Entry-point spec of TD3: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_td3.config import TD3Config
from rlblocks_algo_td3.presets import ENV_DEFAULTS

SPEC = AlgoSpec(
    name="td3",
    summary="TD3: twin critics, target policy smoothing, delayed actor updates, for Box actions.",
    impl="rlblocks_algo_td3.td3:TD3Policy",
    config=TD3Config,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Box",),
    training="off-policy",
    networks=("encoder", "actor", "critic"),
    # Pendulum-v1 and any env without a preset (see presets.py for MuJoCo), tuned on seeds 0-4
    # (docs/benchmarks/offpolicy_time_to_solve.md reports other seeds): 3-step targets and a
    # test every 1,000 env steps (the trainer's 10-episode screen keeps failing tests cheap)
    # solve soonest; small 64-64 networks at lr 1e-3, batch 128, one gradient step per env step
    # and 1,000 random warm-up steps beat larger batches, fewer updates per step over more envs,
    # and a shorter warm-up.
    defaults={
        "env": {"id": "Pendulum-v1", "num_envs": 4, "num_test_envs": 100},
        "buffer": {"size": 20_000},
        "trainer": {
            "max_env_steps": 50_000,
            "step_per_collect": 4,
            "update_per_step": 1.0,
            "batch_size": 128,
            "warmup_steps": 1_000,
            "test_interval": 1_000,
            "test_episodes": 100,
        },
        "algo": {"hidden_sizes": [64, 64], "actor_lr": 1e-3, "critic_lr": 1e-3, "n_step": 3},
    },
    env_defaults=ENV_DEFAULTS,
)
