"""IPPO's default settings (MPE cooperative navigation); MAPPO uses them too."""

from typing import Any

#: MPE's cooperative navigation (Lowe et al., 2017) as PettingZoo's mpe2 package ships it: three
#: agents cover three landmarks, 25 steps per episode, five discrete moves
SIMPLE_SPREAD = "mpe2.simple_spread_v3:parallel_env"

# simple_spread: 8 envs x 3 agents; 400 env steps (1,200 agent transitions) per collect,
# learned in two minibatches for 10 epochs; lr, entropy bonus and widths near the MAPPO
# paper's MPE settings (Yu et al., 2022, appendix: lr 7e-4, 64 units, entropy 0.01)
DEFAULTS: dict[str, Any] = {
    "env": {
        "id": SIMPLE_SPREAD,
        "num_envs": 8,
        "num_test_envs": 10,
    },
    "buffer": {"size": 1_300},
    "trainer": {
        "max_env_steps": 200_000,
        "step_per_collect": 400,
        "repeat_per_collect": 10,
        "batch_size": 600,
        "test_interval": 10_000,
        "test_episodes": 50,
    },
    "algo": {"lr": 7e-4, "ent_coef": 0.01, "hidden_sizes": [64, 64]},
}

#: by env id: MPE's navigation with three agents, 25 steps and discrete moves, in both APIs
ENV_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "mpe2.simple_spread_v3:*": {
        "env": {"make_kwargs": {"N": 3, "max_cycles": 25, "continuous_actions": False}},
    },
}
