"""Default settings of MADDPG and MASAC (MPE cooperative navigation, continuous actions)."""

from __future__ import annotations

from typing import Any

#: MPE's cooperative navigation (Lowe et al., 2017) as PettingZoo's mpe2 package ships it
SIMPLE_SPREAD = "mpe2.simple_spread_v3:parallel_env"

DEFAULTS: dict[str, Any] = {
    "env": {"id": SIMPLE_SPREAD, "num_envs": 4, "num_test_envs": 10},
    "buffer": {"size": 100_000},
    "trainer": {
        "max_env_steps": 100_000,
        "step_per_collect": 100,
        "update_per_step": 0.1,
        "batch_size": 1024,
        "warmup_steps": 1_000,
        "test_interval": 5_000,
        "test_episodes": 50,
    },
    "algo": {},
}

#: by env id: two agents, 25-step episodes, continuous moves
ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "mpe2.simple_spread_v3:*": {
        "env": {"make_kwargs": {"N": 2, "max_cycles": 25, "continuous_actions": True}},
    },
}
