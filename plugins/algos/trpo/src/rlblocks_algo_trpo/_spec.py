"""Entry-point spec of TRPO: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_npg.presets import DEFAULTS as NPG_DEFAULTS
from rlblocks_algo_trpo.config import TRPOConfig

SPEC = AlgoSpec(
    name="trpo",
    summary="Trust Region Policy Optimization: natural gradient with a KL-constrained line search.",
    impl="rlblocks_algo_trpo.trpo:TRPOPolicy",
    config=TRPOConfig,
    observation_spaces=("Box", "Discrete", "Dict", "MultiDiscrete"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    action_masks=True,
    networks=("encoder", "actor", "critic"),
    # the same CartPole schedule as NPG (TRPO is NPG plus a line search)
    defaults=NPG_DEFAULTS,
    env_defaults={
        # Pendulum: a short horizon and return scaling for the critic; two critic epochs per
        # rollout of 2048 steps.
        "Pendulum-*": {
            "buffer": {"size": 4_200},
            "trainer": {
                "max_env_steps": 150_000,
                "step_per_collect": 2_048,
                "repeat_per_collect": 2,
                "test_interval": 8_000,
            },
            "algo": {"gamma": 0.95, "value_scaling": True, "max_kl": 0.02},
        },
    },
)
