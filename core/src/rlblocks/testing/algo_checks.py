"""Conformance checks for algorithm plugins: the contract between an algorithm and rlblocks' core.

A plugin's test suite calls::

    from rlblocks.testing import check_algorithm

    def test_conforms():
        check_algorithm("myalgo")

The checks build the algorithm by its registry name for every action-space kind its spec
declares, then exercise what the collector, the trainers and checkpoints rely on: the spec and its
config, ``forward`` shapes and action bounds, a collect into a replay buffer, one ``update`` with
finite statistics (an algorithm whose spec says ``uses_dataset`` first gets random-action
transitions of the probe env as its dataset), and a checkpoint round trip (``weights_only``) that
reproduces the same deterministic actions. ``device="cuda"`` runs the same checks with the policy
on a GPU (and checks that its parameters are there). Each failed rule is a plain assert naming it.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

#: A small env per action-space kind (observations are Box in each).
PROBE_ENVS = {"Discrete": "CartPole-v1", "Box": "Pendulum-v1"}


def check_algorithm(
    name: str, *, collect_steps: int = 256, batch_size: int = 32, device: str = "cpu"
) -> None:
    """Assert that the algorithm registered as ``name`` follows the algorithm contract, with
    the policy on ``device``."""
    from rlblocks.plugins import AlgoSpec, get_registry

    spec = get_registry("algo").spec(name)
    assert isinstance(spec, AlgoSpec), f"{name}: the entry point must name an AlgoSpec"
    assert spec.training in {"on-policy", "off-policy", "offline"}, spec.training
    if spec.config is not None:
        assert attrs.has(spec.config), f"{name}: the config class must be an attrs class"
        spec.config()  # every field needs a default
    _check_config_resolves(name)
    kinds = [k for k in PROBE_ENVS if k in spec.action_spaces]
    assert kinds, f"{name}: declares action spaces {spec.action_spaces}, none of {list(PROBE_ENVS)}"
    for kind in kinds:
        _check_on_env(name, spec, PROBE_ENVS[kind], collect_steps, batch_size, device)


def _check_config_resolves(name: str) -> None:
    from rlblocks.run import build_config, spec_lookup, to_dict

    config = build_config(name, spec_lookup=spec_lookup)
    again = build_config(name, file_data=to_dict(config), spec_lookup=spec_lookup)
    assert to_dict(again) == to_dict(config), f"{name}: the resolved config does not round-trip"


def _check_on_env(
    name: str, spec: Any, env_id: str, collect_steps: int, batch_size: int, device: str
) -> None:
    import rlblocks
    from rlblocks.contracts import Batch

    torch.manual_seed(0)
    if spec.needs_global_state:
        # a centralised critic learns from a multi-agent env's global state: the probe is the
        # same env as a one-agent env of an installed env family that has one
        _check_multiagent(name, spec, env_id, collect_steps, batch_size, device)
        return
    envs = rlblocks.make_vector_env("dummy", env_id, num_envs=4, seed=0)
    try:

        def make() -> Any:
            return rlblocks.make_policy(
                name, envs.observation_space, envs.action_space, device=device
            )

        policy = make()
        where = f"{name} on {env_id}"
        _check_device(policy, device, where)
        obs, _ = envs.reset(seed=0)

        # acting: one action per row, inside the env's action space after map_action
        policy.eval()
        _check_acting(policy, policy(Batch(obs=obs)).act, envs.action_space, where)

        # collecting and learning as the trainers do
        policy.train()
        buffer = rlblocks.make_buffer("replay", size=4 * collect_steps, num_envs=4)
        stats = rlblocks.Collector(policy, envs, buffer, seed=0).collect(n_step=collect_steps)
        if spec.uses_dataset:
            # an online algorithm that also learns from a dataset (GAIL's demonstrations):
            # transitions of the same env, as a run hands it ``buffer.dataset``
            policy.set_dataset(_probe_dataset(envs, collect_steps))
        _check_update(policy, spec, buffer, stats.n_step, batch_size, where)
        _check_round_trip(policy, make, obs, where)
    finally:
        envs.close()


def _probe_dataset(envs: Any, steps: int) -> Any:
    """A dataset of ``steps`` random-action transitions of ``envs``' env (seeded)."""
    import rlblocks

    data = rlblocks.make_buffer("replay", size=steps, num_envs=envs.num_envs, seed=0)
    rlblocks.Collector(None, envs, data, seed=1).collect(n_step=steps, random=True)
    return data


def _check_device(policy: Any, device: str, where: str) -> None:
    want = torch.device(device).type
    for pname, param in policy.named_parameters():
        assert param.device.type == want, f"{where}: parameter {pname} is on {param.device}"


def _check_acting(policy: Any, act: Any, space: Any, where: str) -> None:
    act = np.asarray(act)
    assert len(act) == 4, f"{where}: forward gave {len(act)} actions for 4 observations"
    for a in policy.map_action(act):
        assert space.contains(np.asarray(a, dtype=space.dtype)), (
            f"{where}: map_action gave {a!r}, outside {space}"
        )


def _check_update(
    policy: Any, spec: Any, buffer: Any, collected: int, batch_size: int, where: str
) -> None:
    """Every collected step is in the buffer; one update returns finite statistics."""
    assert len(buffer) == collected, f"{where}: the buffer misses collected steps"
    if spec.training == "on-policy":
        result = policy.update(0, buffer, batch_size=batch_size, repeat=1)
    else:
        result = policy.update(batch_size, buffer)
    assert isinstance(result, dict) and result, f"{where}: update must return statistics"
    for key, value in result.items():
        assert math.isfinite(float(value)), f"{where}: update stat {key}={value} not finite"


def _check_round_trip(policy: Any, make: Any, obs: Any, where: str) -> None:
    """Weights and extra state survive a weights_only checkpoint round trip into ``make()``."""
    from rlblocks.contracts import Batch
    from rlblocks.run import load_checkpoint, save_checkpoint

    policy.eval()
    expected = np.asarray(policy(Batch(obs=obs)).act)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt.pt"
        save_checkpoint(path, {"policy": policy.state_dict(), "extra": policy.extra_state()})
        loaded = load_checkpoint(path)
    fresh = make()
    fresh.load_state_dict(loaded["policy"])
    fresh.load_extra_state(loaded["extra"])
    fresh.eval()
    again = np.asarray(fresh(Batch(obs=obs)).act)
    assert np.allclose(again, expected), (
        f"{where}: a policy restored from a checkpoint acts differently in eval mode"
    )


def _check_multiagent(
    name: str, spec: Any, env_id: str, collect_steps: int, batch_size: int, device: str
) -> None:
    """:func:`_check_on_env` for algorithms that need a multi-agent env's global state."""
    import gymnasium as gym

    import rlblocks
    from rlblocks.contracts import Batch
    from rlblocks.plugins import EnvFamilySpec, get_registry

    registry = get_registry("family")
    names = [
        n for n, s in registry.loadable_specs().items()
        if isinstance(s, EnvFamilySpec) and s.provides_global_state
    ]  # fmt: skip
    assert names, (
        f"{name} needs a multi-agent env's global state: install an env family that gives one "
        "(rlblocks-family-pettingzoo) to check it"
    )
    family = registry.load(names[0])()
    envs = family.probe_envs([lambda: gym.make(env_id)] * 4)
    try:
        space_o, space_a = envs.observation_space("agent_0"), envs.action_space("agent_0")

        def make() -> Any:
            return rlblocks.make_policy(
                name, space_o, space_a, state_space=envs.state_space, device=device
            )

        policy = make()
        where = f"{name} on {env_id} (one agent)"
        _check_device(policy, device, where)
        obs = np.stack(envs.reset(seed=0).ready_obs)
        policy.eval()
        _check_acting(policy, policy(Batch(obs=obs)).act, space_a, where)
        policy.train()
        buffer = rlblocks.make_buffer("replay", size=4 * collect_steps, num_envs=envs.num_slots)
        stats = family.collector(policy, envs, buffer, seed=0).collect(n_step=collect_steps)
        _check_update(policy, spec, buffer, stats.n_step, batch_size, where)
        _check_round_trip(policy, make, obs, where)
    finally:
        envs.close()
