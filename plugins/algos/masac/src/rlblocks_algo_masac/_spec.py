"""Entry-point spec of MASAC: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_maddpg.presets import ENV_DEFAULTS, MASAC_DEFAULTS
from rlblocks_algo_masac.config import MASACConfig

SPEC = AlgoSpec(
    name="masac",
    summary=(
        "MASAC: Soft Actor-Critic for many agents, decentralised Gaussian actors, twin "
        "centralised critics per agent on the global state and all actions, for Box actions."
    ),
    impl="rlblocks_algo_masac.masac:MASACPolicy",
    config=MASACConfig,
    observation_spaces=("Dict", "Box"),
    action_spaces=("Box",),
    training="off-policy",
    joint_agents=True,
    defaults=MASAC_DEFAULTS,
    env_defaults=ENV_DEFAULTS,
)
