"""Entry-point spec of Rainbow: imports nothing heavier than attrs."""

from rlblocks.env_families import atari_presets
from rlblocks.plugins.spec import AlgoSpec
from rlblocks_algo_rainbow.config import RainbowConfig

SPEC = AlgoSpec(
    name="rainbow",
    summary="Rainbow: C51 + prioritized replay + n-step + noisy + dueling + double, switchable.",
    impl="rlblocks_algo_rainbow.rainbow:RainbowPolicy",
    config=RainbowConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="off-policy",
    # ALE/* ids: the Atari pipeline and the paper's settings (rlblocks.atari)
    env_defaults=atari_presets("rainbow"),
    defaults={
        # returns of CartPole with gamma 0.9 stay within the default support [-10, 10]; on
        # CartPole epsilon-greedy (1 -> 0.05 over 5k steps, as C51's) helps the noisy layers
        # explore early (Tianshou's CartPole test also adds epsilon): tuned on seeds 0-2,
        # solved at 27.5k / 30k / 70k env steps, against 97.5k+ with noisy nets alone
        "algo": {"gamma": 0.9, "lr": 1e-3, "n_step": 3, "eps_start": 1.0, "eps_end": 0.05,
                 "eps_decay_steps": 5_000},
        "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 20},
        # prioritized replay (Schaul et al. 2016's alpha and beta), beta annealed to 1
        "buffer": {
            "size": 20_000,
            "sampler": "prioritized",
            "alpha": 0.5,
            "beta": 0.4,
            "beta_anneal_steps": 100_000,
        },
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
