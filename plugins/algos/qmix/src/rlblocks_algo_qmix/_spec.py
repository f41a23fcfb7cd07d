"""Entry-point spec of QMIX: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_qmix.config import QMIXConfig
from rlblocks_algo_qmix.presets import DEFAULTS, ENV_DEFAULTS

SPEC = AlgoSpec(
    name="qmix",
    summary=(
        "QMIX: per-agent Q-networks shared across agents, mixed into the team's Q-value by a "
        "monotonic hypernetwork of the global state (cooperative, discrete actions)."
    ),
    impl="rlblocks_algo_qmix.qmix:QMIXPolicy",
    config=QMIXConfig,
    observation_spaces=("Dict",),
    action_spaces=("MultiDiscrete",),
    training="off-policy",
    joint_agents=True,
    action_masks=True,
    defaults=DEFAULTS,
    env_defaults=ENV_DEFAULTS,
)
