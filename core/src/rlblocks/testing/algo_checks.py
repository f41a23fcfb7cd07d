"""Conformance checks for algorithm plugins: the contract between an algorithm and rlblocks' core.

A plugin's test suite calls::

    from rlblocks.testing import check_algorithm

    def test_conforms():
        check_algorithm("myalgo")

The checks build the algorithm by its registry name for every action-space kind its spec
declares, then exercise what the collector, the trainers and checkpoints rely on: the spec and its
config, ``forward`` shapes and action bounds, a collect into a replay buffer, one ``update`` with
finite statistics (an algorithm whose spec says ``uses_dataset`` first gets random-action
transitions of the probe env as its dataset), and a checkpoint round trip (``weights_only``)
that reproduces the same deterministic actions. An algorithm for Discrete or MultiDiscrete
actions also acts on spaces whose values start below and above 0 (:data:`START_SPACES`):
greedy in test mode, sampled and explored in training mode and at random (warm-up), every
action the env gets must be inside its space and be what the stored action maps to, and an
update from those steps must run. ``device="cuda"`` runs the same checks with the policy on a
GPU (and checks that its parameters are there). An algorithm whose spec says ``action_masks``
acts on a toy env whose observations carry a fresh random action mask every step
(:class:`_MaskedEchoEnv`): in test mode, at random (warm-up) and collecting for training (with
its exploration), the env never gets a masked action, and an update (masked targets and losses)
runs; one without ``action_masks`` must be refused on that env with a ConfigError. Each failed
rule is a plain assert naming it.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import torch

#: A small env per action-space kind (observations are Box in each).
PROBE_ENVS = {"Discrete": "CartPole-v1", "Box": "Pendulum-v1"}

#: the probe env of an algorithm that takes no Box observations, only Discrete ones (a tabular
#: one, PSRL's), per action kind
TABULAR_PROBE_ENVS = {"Discrete": "FrozenLake-v1"}


#: Discrete action spaces whose values start elsewhere than 0 (below and above), per kind: a
#: policy must send actions inside them however it acts, and learn from what it stored.
START_SPACES: dict[str, tuple[gym.Space, ...]] = {
    "Discrete": (gym.spaces.Discrete(3, start=-1), gym.spaces.Discrete(3, start=2)),
    "MultiDiscrete": (gym.spaces.MultiDiscrete([3, 2], start=[-2, 1]),),
}


class JointProbeEnv(gym.Env):
    """The probe of algorithms that learn from joint transitions (``AlgoSpec.joint_agents``):
    shaped as an env family's joint view of 3 agents (a Dict of ``obs`` ``[3, 4]``, ``state``
    and ``action_mask`` ``[3, 4]``, a ``MultiDiscrete([4, 4, 4])`` action, the team's reward).
    Each agent's legal actions change every step, and a masked action sent is an
    AssertionError naming it; episodes last 8 steps."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's attribute
    N, D, A, T = 3, 4, 4, 8

    def __init__(self) -> None:
        n, d, a = self.N, self.D, self.A
        self.observation_space = gym.spaces.Dict({
            "obs": gym.spaces.Box(-1.0, 1.0, (n, d), np.float32),
            "state": gym.spaces.Box(-1.0, 1.0, (n * d,), np.float32),
            "action_mask": gym.spaces.MultiBinary((n, a)),
        })  # fmt: skip
        self.action_space = gym.spaces.MultiDiscrete([a] * n)
        self._t = 0
        self._rng = np.random.default_rng(0)
        self._mask = np.ones((n, a), dtype=np.int8)

    def _obs(self) -> dict[str, np.ndarray]:
        obs = self._rng.uniform(-1, 1, (self.N, self.D)).astype(np.float32)
        mask = (self._rng.random((self.N, self.A)) < 0.5).astype(np.int8)
        mask[np.arange(self.N), self._rng.integers(self.A, size=self.N)] = 1  # one legal at least
        self._mask = mask
        return {"obs": obs, "state": obs.reshape(-1).copy(), "action_mask": mask.copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        act = np.asarray(action).reshape(self.N)
        legal = self._mask[np.arange(self.N), act]
        assert legal.all(), (
            f"joint probe: agent(s) {np.flatnonzero(~legal.astype(bool)).tolist()} were sent "
            f"masked action(s) {act.tolist()} (legal: {self._mask.tolist()})"
        )
        self._t += 1
        agreed = (act == act[0]).astype(np.float32)  # the team is paid for agreeing
        info = {"agent_rewards": agreed}  # as the joint view reports them
        return self._obs(), float(agreed.sum()), False, self._t >= self.T, info


class JointBoxProbeEnv(gym.Env):
    """:class:`JointProbeEnv` for agents with Box actions (``Box(-1, 1, [3, 2])``, no masks):
    the team is paid for each agent's action near its own observation's first two values (each
    agent's share in ``info["agent_rewards"]``); an action outside the box is an AssertionError
    naming the agent."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's attribute
    N, D, T = 3, 4, 8

    def __init__(self) -> None:
        n, d = self.N, self.D
        self.observation_space = gym.spaces.Dict({
            "obs": gym.spaces.Box(-1.0, 1.0, (n, d), np.float32),
            "state": gym.spaces.Box(-1.0, 1.0, (n * d,), np.float32),
        })  # fmt: skip
        self.action_space = gym.spaces.Box(-1.0, 1.0, (n, 2), np.float32)
        self._t = 0
        self._rng = np.random.default_rng(0)
        self._obs_now = np.zeros((n, d), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        self._obs_now = self._rng.uniform(-1, 1, (self.N, self.D)).astype(np.float32)
        return {"obs": self._obs_now.copy(), "state": self._obs_now.reshape(-1).copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        act = np.asarray(action, dtype=np.float32).reshape(self.N, 2)
        outside = np.flatnonzero(~np.all(np.abs(act) <= 1.0 + 1e-6, axis=1))
        assert not len(outside), f"joint probe: agent(s) {outside.tolist()} acted outside the box"
        self._t += 1
        agent_rewards = -np.square(act - self._obs_now[:, :2]).sum(axis=1).astype(np.float32)
        info = {"agent_rewards": agent_rewards}  # as the joint view reports them
        return self._obs(), float(agent_rewards.sum()), False, self._t >= self.T, info


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
    if getattr(spec, "joint_agents", False):
        # joint transitions of cooperative agents: a small joint view (with masks for discrete
        # agents, failing any step that sends a masked action)
        probes = [JointProbeEnv] if "MultiDiscrete" in spec.action_spaces else []
        if "Box" in spec.action_spaces:
            probes.append(JointBoxProbeEnv)
        assert probes, f"{name}: a joint_agents algorithm declares {spec.action_spaces}"
        for probe in probes:
            _check_on_env(name, spec, probe, collect_steps, batch_size, device)
        return
    kinds = [k for k in PROBE_ENVS if k in spec.action_spaces]
    assert kinds, f"{name}: declares action spaces {spec.action_spaces}, none of {list(PROBE_ENVS)}"
    tabular = "Box" not in spec.observation_spaces and "Discrete" in spec.observation_spaces
    if tabular:
        kinds = [k for k in TABULAR_PROBE_ENVS if k in spec.action_spaces]
        assert kinds, f"{name}: no tabular probe env for action spaces {spec.action_spaces}"
    for kind in kinds:
        env_id = (TABULAR_PROBE_ENVS if tabular else PROBE_ENVS)[kind]
        _check_on_env(name, spec, env_id, collect_steps, batch_size, device)
    for kind, spaces in START_SPACES.items():
        # the start-space probe echoes actions in Box observations: a tabular algorithm takes
        # none, and maps its actions with the shared BasePolicy.map_action
        if kind in spec.action_spaces and not tabular:
            for space in spaces:
                _check_action_start(name, spec, space, batch_size, device)
    for kind, spaces in START_SPACES.items():
        if kind not in spec.action_spaces:
            continue
        if not spec.action_masks:
            _check_masks_refused(name, spaces[0])
        elif not spec.needs_global_state:  # a centralised critic's masks: its family's kit
            _check_masks(name, spec, spaces[0], batch_size, device)


def _check_config_resolves(name: str) -> None:
    from rlblocks.run import build_config, spec_lookup, to_dict

    config = build_config(name, spec_lookup=spec_lookup)
    again = build_config(name, file_data=to_dict(config), spec_lookup=spec_lookup)
    assert to_dict(again) == to_dict(config), f"{name}: the resolved config does not round-trip"


def _check_on_env(
    name: str, spec: Any, env_id: Any, collect_steps: int, batch_size: int, device: str
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
        where = f"{name} on {getattr(env_id, '__name__', env_id)}"
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
            policy.set_dataset(_probe_dataset(policy, envs, collect_steps))
        _check_update(policy, spec, buffer, stats.n_step, batch_size, where)
        _check_round_trip(policy, make, obs, where)
    finally:
        envs.close()


def _probe_dataset(policy: Any, envs: Any, steps: int) -> Any:
    """A dataset of ``steps`` random-action transitions of ``envs``' env (seeded), its actions
    stored as ``policy`` stores its own (indices from 0, network units), as a run's dataset."""
    import rlblocks

    data = rlblocks.make_buffer("replay", size=steps, num_envs=envs.num_envs, seed=0)
    rlblocks.Collector(policy, envs, data, seed=1).collect(n_step=steps, random=True)
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
            f"{where}: map_action gave {np.asarray(a).tolist()!r}, outside {space}"
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


class _EchoEnv(gym.Env):
    """A probe env for :func:`_check_action_start`: Box observations of a few random numbers and
    then the action the env got at the last step (zeros after a reset), episodes of 6 steps.
    It takes any action, so what a policy sent is read back from the stored ``obs_next``; an
    action of the wrong size is echoed as ``_WRONG_SIZE``."""

    def __init__(self, action_space: gym.Space) -> None:
        self.action_space = action_space
        self.width = int(np.prod(action_space.shape)) if action_space.shape else 1
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3 + self.width,), np.float32)
        self._t = 0

    def _obs(self, echo: np.ndarray) -> np.ndarray:
        return np.concatenate([self.np_random.normal(size=3), echo]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(np.zeros(self.width)), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        got = np.asarray(action, dtype=np.float64).reshape(-1)
        if got.size != self.width:
            got = np.full(self.width, _WRONG_SIZE)
        self._t += 1
        start = np.asarray(self.action_space.start).reshape(-1)  # type: ignore[attr-defined]
        rew = float(np.array_equal(got, start))  # something to learn: the space's first action
        return self._obs(got), rew, self._t >= 6, False, {}


#: what :class:`_EchoEnv` echoes for an action of the wrong size (outside every probe space)
_WRONG_SIZE = -1.0e6


def _check_action_start(name: str, spec: Any, space: Any, batch_size: int, device: str) -> None:
    """On a discrete space whose values do not start at 0, every action the policy sends is in
    the space (greedy in test mode, sampled and explored in training mode, random warm-up), a
    stored action maps to the one the env got, and an update from those steps runs."""
    import rlblocks
    from rlblocks.contracts import Batch

    torch.manual_seed(0)
    factories = [lambda: _EchoEnv(space)] * 4
    kwargs: dict[str, Any] = {}
    if spec.needs_global_state:
        family = _global_state_family(name)
        envs = family.probe_envs(factories)
        obs_space = envs.observation_space("agent_0")
        kwargs["state_space"] = envs.state_space
        collector, num_rows = family.collector, envs.num_slots
        obs = np.stack(envs.reset(seed=0).ready_obs)
    else:
        envs = rlblocks.make_vector_env("dummy", factories)
        obs_space, collector, num_rows = envs.observation_space, rlblocks.Collector, 4
        obs, _ = envs.reset(seed=0)
    where = f"{name} on {space}"
    try:
        policy = rlblocks.make_policy(name, obs_space, space, device=device, **kwargs)
        if spec.uses_dataset:  # demonstrations of the same env (GAIL's)
            policy.set_dataset(_probe_dataset(policy, envs, 48))
        policy.eval()
        _check_acting(policy, policy(Batch(obs=obs)).act, space, f"{where}, greedy")
        # (phase, training mode, random actions, learn from its steps): random warm-up steps
        # are learned from where the algorithm's defaults take some (R2D2 needs stored states)
        phases = (("acting in test mode", False, False, False),
                  ("random warm-up", True, True, _default_warmup(name) > 0),
                  ("collecting for training", True, False, True))  # fmt: skip
        for phase, training, random, learn in phases:
            policy.train(training)
            buffer = rlblocks.make_buffer("replay", size=256, num_envs=num_rows)
            stats = collector(policy, envs, buffer, seed=0).collect(n_step=48, random=random)
            _check_sent(policy, buffer, space, f"{where}, {phase}")
            policy.train()
            if learn:
                _check_update(policy, spec, buffer, stats.n_step, batch_size, f"{where}, {phase}")
    finally:
        envs.close()


def _default_warmup(name: str) -> int:
    """The random warm-up steps of the algorithm's resolved default config."""
    from rlblocks.run import build_config, spec_lookup

    return int(build_config(name, spec_lookup=spec_lookup).trainer.warmup_steps)


def _check_sent(policy: Any, buffer: Any, space: Any, where: str) -> None:
    """What the env got (echoed in ``obs_next``) is inside ``space`` and is what each stored
    action maps to with ``policy.map_action``."""
    batch, _ = buffer.sample(0)
    width = int(np.prod(space.shape)) if space.shape else 1
    got = np.asarray(batch.obs_next, dtype=np.float64)[:, -width:]
    for row in got:
        assert row[0] != _WRONG_SIZE, (
            f"{where}: the env got an action of another size than {space}'s {space.shape}"
        )
        sent = row.astype(space.dtype).reshape(space.shape)
        assert space.contains(sent), (
            f"{where}: the env got the action {sent.tolist()}, outside {space} (a discrete "
            "space's action is start + the network's index: BasePolicy.map_action adds it)"
        )
    stored = np.asarray(batch.act)
    mapped = np.asarray(policy.map_action(stored), dtype=np.float64).reshape(len(stored), -1)
    bad = np.flatnonzero((mapped != got).any(axis=1))
    if len(bad):
        i = bad[0]
        shown = [np.asarray(x).astype(space.dtype).reshape(space.shape).tolist()
                 for x in (mapped[i], got[i])]  # fmt: skip
        raise AssertionError(
            f"{where}: the stored action {np.asarray(stored[i]).tolist()} maps to {shown[0]} "
            f"but the env got {shown[1]}; store what the network chose (indices from 0) and "
            "let map_action (and map_action_inverse, for random actions) make the env's action"
        )


def _global_state_family(name: str) -> Any:
    """An installed env family that gives a multi-agent env's global state, built."""
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
    return registry.load(names[0])()


class _MaskedEchoEnv(_EchoEnv):
    """:class:`_EchoEnv` with PettingZoo's Dict observation ``{"observation": Box,
    "action_mask": MultiBinary}``: every step draws a fresh mask (each action legal with
    probability one half, at least one per sub-space), so what the env got (echoed in the
    next ``"observation"``) can be checked against the mask the policy acted on."""

    def __init__(self, action_space: gym.Space) -> None:
        super().__init__(action_space)
        self.nvec = (
            [int(action_space.n)]  # type: ignore[attr-defined]
            if isinstance(action_space, gym.spaces.Discrete)
            else [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]  # type: ignore[attr-defined]
        )
        self.observation_space = gym.spaces.Dict(
            {"observation": self.observation_space,
             "action_mask": gym.spaces.MultiBinary(sum(self.nvec))}
        )  # fmt: skip

    def _masked(self, box: np.ndarray) -> dict[str, np.ndarray]:
        parts = []
        for n in self.nvec:
            part = (self.np_random.random(n) < 0.5).astype(np.int8)
            if not part.any():
                part[self.np_random.integers(n)] = 1
            parts.append(part)
        return {"observation": box, "action_mask": np.concatenate(parts)}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        box, info = super().reset(seed=seed, options=options)
        return self._masked(box), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        box, *rest = super().step(action)
        return (self._masked(box), *rest)  # type: ignore[return-value]


def _check_masks_refused(name: str, space: gym.Space) -> None:
    """An algorithm without ``action_masks`` is refused, with a ConfigError, on an env whose
    observations carry a mask (it would send masked actions)."""
    import rlblocks
    from rlblocks.contracts import ConfigError

    env = _MaskedEchoEnv(space)
    try:
        rlblocks.make_policy(name, env.observation_space, space)
    except ConfigError:
        return
    raise AssertionError(
        f"{name}: its spec does not say action_masks, yet make_policy accepted an env with "
        "action masks (it must be refused with a ConfigError before it sends masked actions)"
    )


def _check_masks(name: str, spec: Any, space: Any, batch_size: int, device: str) -> None:
    """On :class:`_MaskedEchoEnv`, no masked action is ever sent: greedy in test mode, at
    random (warm-up) and while collecting for training; then an update from those steps."""
    import rlblocks
    from rlblocks.contracts import Batch

    torch.manual_seed(0)
    envs = rlblocks.make_vector_env("dummy", [lambda: _MaskedEchoEnv(space)] * 4)
    where = f"{name} on {space} with action masks"
    try:
        policy = rlblocks.make_policy(name, envs.observation_space, space, device=device)
        if spec.uses_dataset:
            policy.set_dataset(_probe_dataset(policy, envs, 48))
        obs, _ = envs.reset(seed=0)
        policy.eval()
        _check_acting(policy, policy(Batch(obs=obs)).act, space, f"{where}, greedy")
        phases = (("acting in test mode", False, False, False),
                  ("random warm-up", True, True, _default_warmup(name) > 0),
                  ("collecting for training", True, False, True))  # fmt: skip
        for phase, training, random, learn in phases:
            policy.train(training)
            buffer = rlblocks.make_buffer("replay", size=256, num_envs=4)
            stats = rlblocks.Collector(policy, envs, buffer, seed=0).collect(
                n_step=96, random=random
            )
            _check_legal(buffer, space, f"{where}, {phase}")
            policy.train()
            if learn:
                _check_update(policy, spec, buffer, stats.n_step, batch_size, f"{where}, {phase}")
    finally:
        envs.close()


def _check_legal(buffer: Any, space: Any, where: str) -> None:
    """Every action the env got (echoed in ``obs_next``) is legal under the mask of the
    observation it was chosen for."""
    batch, _ = buffer.sample(0)
    width = int(np.prod(space.shape)) if space.shape else 1
    got = np.asarray(batch.obs_next["observation"], dtype=np.float64)[:, -width:]
    mask = np.asarray(batch.obs["action_mask"])
    if isinstance(space, gym.spaces.Discrete):
        nvec, start = np.array([int(space.n)]), np.array([int(space.start)])
    else:
        nvec = np.asarray(space.nvec).reshape(-1)
        start = np.asarray(space.start).reshape(-1)
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    index = got.astype(np.int64) - start + offsets  # each sub-action's entry in the mask
    assert ((index >= offsets) & (index < offsets + nvec)).all(), (
        f"{where}: the env got an action outside {space}"
    )
    legal = np.take_along_axis(mask, index, axis=1).astype(bool).all(axis=1)
    if not legal.all():
        row = int(np.flatnonzero(~legal)[0])
        raise AssertionError(
            f"{where}: the env got the masked action {got[row].astype(np.int64).tolist()} "
            f"(mask {mask[row].tolist()}); greedy, sampled, exploring and random actions must "
            "all be legal ones (see rlblocks.algo.masked_argmax, mask_distribution, "
            "masked_epsilon_greedy)"
        )
