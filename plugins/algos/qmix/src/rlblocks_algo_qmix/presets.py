"""Run defaults VDN and QMIX share (MPE cooperative navigation). Standard library only: the
specs read them."""

#: Tuned on simple_spread with 2 agents and 25-step episodes (seeds 0-1); see the README.
DEFAULTS: dict[str, dict] = {
    "env": {
        "id": "mpe2.simple_spread_v3:parallel_env",
        "make_kwargs": {"N": 2, "max_cycles": 25},
        "num_envs": 8,
        "num_test_envs": 10,
    },
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
