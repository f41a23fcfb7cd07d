"""Entry-point spec of PSRL: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_psrl.config import PSRLConfig

SPEC = AlgoSpec(
    name="psrl",
    summary="Posterior sampling for tabular MDPs: sample an MDP from the posterior, act on its "
    "optimal policy (Discrete observations and actions).",
    impl="rlblocks_algo_psrl.psrl:PSRLPolicy",
    config=PSRLConfig,
    observation_spaces=("Discrete",),
    action_spaces=("Discrete",),
    # on-policy: each collect's episodes update the counts once, then a new MDP is sampled for
    # the next collect (Osband et al. sample once per episode: one env, one episode a collect)
    training="on-policy",
    networks=(),
    # FrozenLake-v1 (slippery 4x4): one env and one episode per collect, so each episode acts
    # on an MDP of its own; gymnasium's threshold for it is a success rate of 0.70
    defaults={
        "env": {"id": "FrozenLake-v1", "num_envs": 1, "num_test_envs": 10},
        "buffer": {"size": 1_000},
        "trainer": {
            "max_env_steps": 50_000,
            "episode_per_collect": 1,
            "repeat_per_collect": 1,
            "batch_size": 1,  # unused: each update reads the whole collect
            "test_interval": 1_000,
            "test_episodes": 100,
        },
    },
)
