"""NPG's schedules (public: TRPO, NPG plus a line search, runs the same CartPole schedule)."""

from typing import Any

#: Section defaults of an NPG run: CartPole-v1, one full-batch natural-gradient step per rollout.
DEFAULTS: dict[str, dict[str, Any]] = {
    "env": {"id": "CartPole-v1", "num_envs": 8, "num_test_envs": 25},
    "buffer": {"size": 2_100},
    "trainer": {
        "max_env_steps": 300_000,
        "step_per_collect": 1_024,
        "repeat_per_collect": 1,
        "batch_size": 100_000,  # >= the rollout: one step on all of it
        "test_interval": 4_000,
        "test_episodes": 100,
    },
}
