"""Entry-point spec of behaviour cloning: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_bc.config import BCConfig

SPEC = AlgoSpec(
    name="bc",
    summary="Behaviour cloning: offline imitation of a dataset's actions (MSE or Gaussian "
    "likelihood for Box actions, cross-entropy for discrete ones).",
    impl="rlblocks_algo_bc.bc:BCPolicy",
    config=BCConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict"),
    action_spaces=("Box", "Discrete", "MultiDiscrete"),
    training="offline",
    action_masks=True,
    networks=("encoder", "actor"),
    # d3rlpy's BC schedule (batch 100, Adam at 1e-3: BCConfig's defaults), tested every 1,000
    # gradient steps on 10 episodes, with a budget of 100,000 gradient steps: cloning converges
    # far sooner than offline RL's 1M. A run names its dataset (buffer.dataset, --dataset).
    defaults={
        "env": {"id": "Pendulum-v1", "num_test_envs": 10},
        "trainer": {
            "batch_size": 100,
            "test_interval": 1_000,
            "test_episodes": 10,
            "max_gradient_steps": 100_000,
        },
    },
)
