"""Families of gymnasium env ids that algorithm presets target, as ``fnmatch`` patterns for an
:class:`~rlblocks.plugins.AlgoSpec`'s ``env_defaults``. Plain data: specs import it while
listing plugins."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ATARI_ENVS",
    "MUJOCO_ENVS",
    "atari100k_config",
    "atari_env_config",
    "atari_presets",
    "for_mujoco",
]

#: Gymnasium's MuJoCo tasks (any version suffix).
MUJOCO_ENVS = (
    "Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
    "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d",
)  # fmt: skip


def for_mujoco(preset: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"Ant-*": preset, "HalfCheetah-*": preset, ...}`` for every MuJoCo task."""
    return {f"{name}-*": preset for name in MUJOCO_ENVS}


# -- Atari (the pipeline is described in rlblocks.run) -------------------------------------
#: The env ids the Atari presets apply to (an ``fnmatch`` pattern).
ATARI_ENVS = "ALE/*"


def _preprocessing(noop_max: int, frame_skip: int, screen_size: int) -> dict[str, Any]:
    return {
        "path": "gymnasium.wrappers:AtariPreprocessing",
        "kwargs": {
            "noop_max": noop_max, "frame_skip": frame_skip, "screen_size": screen_size,
            "terminal_on_life_loss": False, "grayscale_obs": True, "scale_obs": False,
        },
    }  # fmt: skip


def atari_env_config(
    sticky: float | None = None,
    episodic_life: bool = False,
    clip_rewards: bool = True,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    full_action_space: bool = False,
    fire_reset: bool = False,
) -> dict[str, Any]:
    """The ``env`` config section (make kwargs, wrappers, training-only wrappers) of the Atari
    pipeline (see :mod:`rlblocks.run`); ``sticky=None`` keeps the id's own sticky-action
    probability (0.25 in v5); ``fire_reset`` adds :class:`rlblocks.run.FireReset`."""
    make_kwargs: dict[str, Any] = {"frameskip": 1, "full_action_space": full_action_space}
    if sticky is not None:
        make_kwargs["repeat_action_probability"] = float(sticky)
    train: list[Any] = []
    if episodic_life:
        train.append("rlblocks.run:EpisodicLife")
    if clip_rewards:
        train.append(
            {
                "path": "gymnasium.wrappers:ClipReward",
                "kwargs": {"min_reward": -1.0, "max_reward": 1.0},
            }
        )
    wrappers: list[Any] = [_preprocessing(noop_max, frame_skip, screen_size)]
    if fire_reset:
        wrappers.append("rlblocks.run:FireReset")
    return {
        "make_kwargs": make_kwargs,
        "wrappers": wrappers,
        "train_wrappers": train,
    }


#: What every Atari preset shares: the pipeline, 4 stacked frames stored once, one training env
#: (the papers step one), and tests of 10 whole games.
_COMMON: dict[str, Any] = {
    "env": {"num_envs": 1, "num_test_envs": 5, **atari_env_config()},
    "buffer": {"size": 1_000_000, "stack_num": 4, "ignore_obs_next": True},
    "trainer": {
        "max_env_steps": 50_000_000,  # 200M frames
        "step_per_collect": 4,
        "update_per_step": 0.25,  # one gradient step every 4 agent steps
        "batch_size": 32,
        "warmup_steps": 20_000,  # 80k frames
        "test_interval": 250_000,  # 1M frames
        "test_episodes": 10,
        "checkpoint_interval": 250_000,
    },
}

#: What the papers' value-based agents share: the Nature head width, discount, hard target
#: copies every 2,000 gradient steps (32k frames), and epsilon-greedy exploration decayed to
#: 0.01 over 1M frames (0.001 when testing).
_SHARED_ALGO: dict[str, Any] = {
    "hidden_sizes": [512], "gamma": 0.99, "target_update_interval": 2_000, "tau": None,
    "eps_start": 1.0, "eps_end": 0.01, "eps_decay_steps": 250_000, "eps_test": 0.001,
}  # fmt: skip
#: The distributional papers' Adam epsilon (0.01 / batch size 32).
_ADAM_EPS = 3.125e-4
#: Per algorithm (agent steps; one gradient step every 4 of them, so a target update interval
#: of 2,000 gradient steps is the papers' 32k frames). Sources: Rainbow and C51 — Hessel et al.
#: 2018, Table 1; QR-DQN — Dabney et al. 2018a; IQN — Dabney et al. 2018b; FQF — Yang et al.
#: 2019; DQN — Mnih et al. 2015 with Adam as in Dopamine.
_ALGOS: dict[str, dict[str, Any]] = {
    "dqn": {"algo": {"lr": 6.25e-5, "n_step": 1, "max_grad_norm": 10.0}},
    "c51": {"algo": {"lr": 2.5e-4, "adam_eps": _ADAM_EPS, "n_step": 1, "eps_decay_steps": 62_500,
                     "v_min": -10.0, "v_max": 10.0, "num_atoms": 51}},
    "rainbow": {
        # noisy nets explore: epsilon stays 0 (RainbowConfig's own default)
        "algo": {"lr": 6.25e-5, "adam_eps": 1.5e-4, "n_step": 3, "noisy_sigma0": 0.5,
                 "v_min": -10.0, "v_max": 10.0, "num_atoms": 51, "eps_start": 0.0,
                 "eps_end": 0.0, "eps_test": 0.0},
        "buffer": {"sampler": "prioritized", "alpha": 0.5, "beta": 0.4,
                   "beta_anneal_steps": 50_000_000},
    },
    "qrdqn": {"algo": {"lr": 5e-5, "adam_eps": _ADAM_EPS, "n_step": 1, "num_quantiles": 200}},
    "iqn": {"algo": {"lr": 5e-5, "adam_eps": _ADAM_EPS, "n_step": 1, "num_tau_samples": 64,
                     "num_tau_prime_samples": 64, "num_quantile_samples": 32,
                     "embedding_dim": 64}},
    "fqf": {"algo": {"lr": 5e-5, "adam_eps": _ADAM_EPS, "n_step": 1, "num_fractions": 32,
                     "fraction_lr": 2.5e-9, "embedding_dim": 64}},
}  # fmt: skip


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def atari_presets(algo: str) -> dict[str, dict[str, Any]]:
    """``{"ALE/*": config}`` for an algorithm spec's ``env_defaults``: the pipeline and the
    papers' hyperparameters for ``algo`` (one of dqn, c51, rainbow, qrdqn, iqn, fqf)."""
    if algo not in _ALGOS:
        raise KeyError(f"no Atari preset for {algo!r}; presets: {', '.join(_ALGOS)}")
    return {ATARI_ENVS: _merge(_merge(_COMMON, {"algo": _SHARED_ALGO}), _ALGOS[algo])}


def atari100k_config(algo: str = "rainbow") -> dict[str, Any]:
    """Config of the Atari 100k protocol (100k agent steps = 400k frames; Kaiser et al., 2020)
    with Data-Efficient Rainbow's settings (van Hasselt et al., 2019, Table 1): no sticky
    actions, episodic life and clipped rewards in training, a gradient step every agent step
    after 1,600 steps, 20-step returns, target updates every 2,000 steps, Adam lr 1e-4,
    noisy nets with sigma0 0.1, 256 hidden units, a 100k buffer. Pass it as
    ``rlblocks.train("rainbow", env="ALE/Pong-v5", config=atari100k_config())``."""
    if algo != "rainbow":
        raise KeyError(f"the Atari 100k preset is Data-Efficient Rainbow's; got {algo!r}")
    common = atari_presets("rainbow")[ATARI_ENVS]
    der = {
        # FIRE after each reset and lost life (not in DER; Tianshou's pipeline has it): games
        # like Breakout wait for it, and a greedy test policy that never fires would stall
        "env": atari_env_config(sticky=0.0, episodic_life=True, fire_reset=True),
        "algo": {"lr": 1e-4, "adam_eps": 1.5e-4, "n_step": 20, "hidden_sizes": [256],
                 "noisy_sigma0": 0.1, "max_grad_norm": 10.0},
        "buffer": {"size": 100_000, "beta_anneal_steps": 100_000},
        "trainer": {"max_env_steps": 100_000, "step_per_collect": 1, "update_per_step": 1.0,
                    "warmup_steps": 1_600, "test_interval": 100_000, "test_episodes": 10,
                    "checkpoint_interval": 25_000},
    }  # fmt: skip
    return _merge(common, der)
