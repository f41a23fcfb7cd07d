"""Entry-point spec of VDN: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_qmix.config import VDNConfig
from rlblocks_algo_qmix.presets import DEFAULTS, ENV_DEFAULTS

SPEC = AlgoSpec(
    name="vdn",
    summary=(
        "VDN: per-agent Q-networks shared across agents whose sum is the team's Q-value "
        "(cooperative, discrete actions)."
    ),
    impl="rlblocks_algo_qmix.qmix:VDNPolicy",
    config=VDNConfig,
    observation_spaces=("Dict",),
    action_spaces=("MultiDiscrete",),
    training="off-policy",
    joint_agents=True,
    action_masks=True,
    defaults=DEFAULTS,
    env_defaults=ENV_DEFAULTS,
)
