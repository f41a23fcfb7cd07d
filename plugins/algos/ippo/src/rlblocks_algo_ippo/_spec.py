"""Entry-point spec of IPPO: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_ippo.presets import DEFAULTS, ENV_DEFAULTS
from rlblocks_algo_ppo.config import PPOConfig

SPEC = AlgoSpec(
    name="ippo",
    summary=(
        "Independent PPO: one PPO policy shared by every agent of a PettingZoo env, each agent "
        "learning from its own observations, rewards and advantages."
    ),
    impl="rlblocks_algo_ppo.ppo:PPOPolicy",
    config=PPOConfig,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    action_masks=True,
    multi_agent=True,
    networks=("encoder", "actor", "critic"),
    defaults=DEFAULTS,
    env_defaults=ENV_DEFAULTS,
)
