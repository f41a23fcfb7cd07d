"""Entry-point spec of BDQ: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_bdq.config import BDQConfig

SPEC = AlgoSpec(
    name="bdq",
    summary="BDQ: branching dueling Q-network over Box actions discretised per dimension.",
    impl="rlblocks_algo_bdq.bdq:BDQPolicy",
    config=BDQConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Box",),
    training="off-policy",
    networks=("encoder", "model"),
    # Pendulum-v1 (they apply to other envs too), tuned on seeds 0-2: the loop of the DDPG / TD3 /
    # SAC Pendulum defaults (4 envs, one gradient step per env step, batch 128, 1,000 random
    # warm-up steps, a test every 1,000 env steps with the trainer's 10-episode screen) and
    # 3-step targets, over a 64-64 trunk with 64-wide heads and the config's 25 bins, soft
    # targets (tau 0.01) and epsilon 1 -> 0.05 over 5,000 steps: -250 over 100 test episodes
    # within 4,000-6,000 env steps. 11 bins did as well, and a 2,000-step epsilon decay no
    # better. Tianshou's test (test/discrete/test_bdqn.py) for comparison: 40 bins, gamma 0.9,
    # 1-step targets, hard target copies every 200 steps, 10 envs, 0.1 gradient steps per env
    # step, epsilon 0.76 decaying by 1e-4 per step, a 64-64 trunk with 64-wide heads.
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
        "algo": {"hidden_sizes": [64, 64], "n_step": 3},
    },
)
