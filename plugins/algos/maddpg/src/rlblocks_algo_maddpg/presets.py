"""Default settings of MADDPG and MASAC (MPE cooperative navigation with continuous moves).
Plain dicts only: the specs import this module while listing plugins."""

from __future__ import annotations

from typing import Any

#: MPE's cooperative navigation (Lowe et al., 2017) as PettingZoo's mpe2 package ships it
SIMPLE_SPREAD = "mpe2.simple_spread_v3:parallel_env"

# simple_spread with two agents and continuous moves, 4 envs; tuned on seeds 0-1 at a 30k-step
# budget (test return = the team's, 20 greedy episodes; a uniformly random policy scores -39):
# batch 256 and one gradient step per 4 env steps (the paper's batch 1024 every 100 steps
# learns too slowly for a small budget), 64-64 networks at Adam 1e-3, gamma 0.95, tau 0.01 and
# gradient norms clipped at 0.5 (the MADDPG paper and its authors' code, in config.py)
DEFAULTS: dict[str, Any] = {
    "env": {"id": SIMPLE_SPREAD, "num_envs": 4, "num_test_envs": 10},
    "buffer": {"size": 100_000},
    "trainer": {
        "max_env_steps": 100_000,
        "step_per_collect": 40,
        "update_per_step": 0.25,
        "batch_size": 256,
        "warmup_steps": 1_000,
        "test_interval": 2_500,
        "test_episodes": 20,
    },
}

#: MADDPG: exploration noise 0.3 ([-1, 1] units) passed -20 sooner than 0.1 on seed 0 (17.5k
#: against 20k env steps) and reached -15.4 against -18.4 at 20k; 3-step targets did not help
#: (-20.4 against -19.3 at 12.5k)
MADDPG_DEFAULTS: dict[str, Any] = {**DEFAULTS, "algo": {"exploration_sigma": 0.3}}

#: MASAC: 3-step targets reached -16.4 at 12.5k env steps on seed 0, against -21.1 with 1-step
MASAC_DEFAULTS: dict[str, Any] = {**DEFAULTS, "algo": {"n_step": 3}}

#: by env id: two agents, 25-step episodes, continuous moves
ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "mpe2.simple_spread_v3:*": {
        "env": {"make_kwargs": {"N": 2, "max_cycles": 25, "continuous_actions": True}},
    },
}
