"""Entry-point spec of MADDPG (and MATD3): imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_maddpg.config import MADDPGConfig
from rlblocks_algo_maddpg.presets import ENV_DEFAULTS, MADDPG_DEFAULTS

SPEC = AlgoSpec(
    name="maddpg",
    summary=(
        "MADDPG (MATD3 with algo.td3=true): decentralised deterministic actors, a centralised "
        "critic per agent on the global state and all actions, for Box actions of many agents."
    ),
    impl="rlblocks_algo_maddpg.maddpg:MADDPGPolicy",
    config=MADDPGConfig,
    observation_spaces=("Dict", "Box"),
    action_spaces=("Box",),
    training="off-policy",
    joint_agents=True,
    defaults=MADDPG_DEFAULTS,
    env_defaults=ENV_DEFAULTS,
)
