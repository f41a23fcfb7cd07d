"""Run defaults VDN and QMIX share (MPE cooperative navigation). Standard library only: the
specs read them."""

from typing import Any

#: MPE's cooperative navigation (Lowe et al., 2017) as PettingZoo's mpe2 package ships it
SIMPLE_SPREAD = "mpe2.simple_spread_v3:parallel_env"

#: Tuned on simple_spread with 2 agents and 25-step episodes (seeds 0-1); see the README.
DEFAULTS: dict[str, Any] = {
    "env": {"id": SIMPLE_SPREAD, "num_envs": 8, "num_test_envs": 10},
    "buffer": {"size": 50_000},
    "trainer": {
        "max_env_steps": 60_000,
        "step_per_collect": 8,
        "update_per_step": 0.25,
        "batch_size": 64,
        # epsilon starts at 1 and draws only legal actions; the collector's random warm-up
        # would not read the agents' masks (and stores no recurrent state)
        "warmup_steps": 0,
        "test_interval": 5_000,
        "test_episodes": 20,
    },
}

#: by env id: cooperative navigation with two agents, 25 steps and discrete moves
ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "mpe2.simple_spread_v3:*": {
        "env": {"make_kwargs": {"N": 2, "max_cycles": 25, "continuous_actions": False}},
    },
}
