"""Entry-point spec of discrete BCQ: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_discrete_bcq.config import DiscreteBCQConfig

SPEC = AlgoSpec(
    name="discrete-bcq",
    summary="Discrete BCQ: offline RL from a fixed dataset, Q-learning restricted to the actions "
    "a behaviour-cloning model finds likely, for Discrete actions.",
    impl="rlblocks_algo_discrete_bcq.discrete_bcq:DiscreteBCQPolicy",
    config=DiscreteBCQConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="offline",
    action_masks=True,
    # encoder: the observation encoder both heads share; critic: the Q head; actor: the
    # behaviour-cloning head (each over the encoder's features)
    networks=("encoder", "actor", "critic"),
    # the paper's settings (DiscreteBCQConfig's defaults) are for Atari; on the small
    # vector-observation tasks the authors' code uses Adam at 3e-4 (epsilon 1e-8), batch 64, a
    # target network that moves 0.005 every step, and tests of 10 episodes every 5,000
    # gradient steps. The offline budget of 1M gradient steps, as the other offline algorithms.
    # A run names its dataset (buffer.dataset, --dataset).
    defaults={
        "algo": {"lr": 3e-4, "adam_eps": 1e-8, "tau": 0.005},
        "env": {"id": "CartPole-v1", "num_test_envs": 10},
        "trainer": {
            "batch_size": 64,
            "test_interval": 5_000,
            "test_episodes": 10,
            "max_gradient_steps": 1_000_000,
        },
    },
)
