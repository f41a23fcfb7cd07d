"""Entry-point spec of NPG: imports nothing heavier than attrs."""

from rlblocks.plugins import AlgoSpec
from rlblocks_algo_npg.config import NPGConfig
from rlblocks_algo_npg.presets import DEFAULTS

SPEC = AlgoSpec(
    name="npg",
    summary="Natural policy gradient: conjugate gradient on Fisher-vector products, GAE critic.",
    impl="rlblocks_algo_npg.npg:NPGPolicy",
    config=NPGConfig,
    observation_spaces=("Box", "Discrete", "Dict", "MultiDiscrete"),
    action_spaces=("Discrete", "Box", "MultiDiscrete"),
    training="on-policy",
    action_masks=True,
    networks=("encoder", "actor", "critic"),
    defaults=DEFAULTS,
    env_defaults={
        # Pendulum: a short horizon and return scaling for the critic; two critic epochs per
        # rollout of 2048 steps.
        "Pendulum-*": {
            "buffer": {"size": 4_200},
            "trainer": {
                "max_env_steps": 200_000,
                "step_per_collect": 2_048,
                "repeat_per_collect": 2,
                "test_interval": 8_000,
            },
            "algo": {"gamma": 0.95, "value_scaling": True, "actor_step_size": 0.1},
        },
    },
)
