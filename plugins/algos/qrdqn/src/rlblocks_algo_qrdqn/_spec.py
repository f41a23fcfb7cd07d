"""Entry-point spec of QR-DQN: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks.run import atari_presets
from rlblocks_algo_qrdqn.config import QRDQNConfig

SPEC = AlgoSpec(
    name="qrdqn",
    summary="QR-DQN: quantile regression distributional DQN (dueling, noisy, n-step, double).",
    impl="rlblocks_algo_qrdqn.qrdqn:QRDQNPolicy",
    config=QRDQNConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="off-policy",
    action_masks=True,
    networks=("encoder", "model"),
    # ALE/* ids: the Atari pipeline and the paper's settings (rlblocks.run)
    env_defaults=atari_presets("qrdqn"),
    defaults={
        # CartPole: quantiles need no bounded support, so gamma 0.99 (Tianshou's CartPole test
        # uses 0.9 for a threshold of 195; with 0.9, seed 0 stayed under 300 for 100k steps).
        # lr 2.3e-3, 10 quantiles, epsilon 1 -> 0.04 over 8k steps and 0.5 gradient steps per
        # env step are the RL Baselines3 Zoo's CartPole-v1 settings for QR-DQN (qrdqn.yml,
        # rl_zoo3 2.9); with rlblocks' 3-step double-Q targets and 128-128 network, seeds 0-2
        # reached 475 at 24.7k / 22.5k / 15k env steps, against 47k-67k with the earlier lr 1e-3,
        # 32 quantiles, epsilon over 5k to 0.05 and 0.25 updates per step (256-256 as in the zoo
        # solved at 10k / 20k / 25k for twice the cost per update; 0.25 updates per step needed
        # 30k-38k)
        "algo": {
            "gamma": 0.99,
            "lr": 2.3e-3,
            "n_step": 3,
            "num_quantiles": 10,
            "eps_decay_steps": 8_000,
            "eps_end": 0.04,
        },
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 20},
        "buffer": {"size": 20_000},
        "trainer": {
            "max_env_steps": 100_000,
            "step_per_collect": 8,
            "update_per_step": 0.5,
            "batch_size": 64,
            "warmup_steps": 1_000,
            "test_interval": 2_500,
            "test_episodes": 100,
        },
    },
)
