"""The joint view: a PettingZoo parallel env as one single-agent gymnasium env (JointAgentEnv),
and the family building it for an algorithm whose spec says ``joint_agents``."""

from __future__ import annotations

import pickle
from typing import Any, ClassVar

import attrs
import gymnasium as gym
import numpy as np
import pytest
import torch

pettingzoo = pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")
from pettingzoo import ParallelEnv  # noqa: E402

from rlblocks.algo import BasePolicy  # noqa: E402
from rlblocks.contracts import Batch, ConfigError  # noqa: E402
from rlblocks.run import FamilyBuild, build_config, make_buffer, spec_lookup  # noqa: E402
from rlblocks_family_pettingzoo import (  # noqa: E402
    JointAgentEnv,
    JointEnvFactory,
    PettingZooFamily,
)

SPREAD = "mpe2.simple_spread_v3:parallel_env"


class Leavers(ParallelEnv):
    """Agents with observations of different sizes (agent i sees ``i + 2`` numbers, all
    ``10 * i + t``) and action masks (agent i may take actions ``<= i``); agent i terminates
    after ``stay[i]`` steps, or all are truncated at ``horizon``. Reward ``i + action``."""

    metadata: ClassVar[dict[str, Any]] = {"name": "leavers_v0", "render_modes": []}
    render_mode = None

    def __init__(self, stay: tuple[int, ...] = (1, 3, 5), horizon: int = 10) -> None:
        self.possible_agents = [f"a{i}" for i in range(len(stay))]
        self.stay, self.horizon = stay, horizon
        self._act = gym.spaces.Discrete(4)

    def observation_space(self, agent: str) -> gym.Space:
        i = self.possible_agents.index(agent)
        return gym.spaces.Dict({
            "observation": gym.spaces.Box(-100, 100, (i + 2,), np.float32),
            "action_mask": gym.spaces.MultiBinary(4),
        })  # fmt: skip

    def action_space(self, agent: str) -> gym.Space:
        return self._act

    def _obs(self, agent: str) -> dict[str, np.ndarray]:
        i = self.possible_agents.index(agent)
        mask = (np.arange(4) <= i).astype(np.int8)
        return {"observation": np.full(i + 2, 10 * i + self.t, np.float32), "action_mask": mask}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        rew, term, trunc, obs = {}, {}, {}, {}
        for a in self.agents:
            i = self.possible_agents.index(a)
            assert actions[a] <= i, "a masked action was sent"
            rew[a] = float(i + actions[a])
            term[a] = self.t >= self.stay[i]
            trunc[a] = self.t >= self.horizon and not term[a]
            obs[a] = self._obs(a)
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, {a: {} for a in obs}


def test_mpe_spaces_team_reward_and_state() -> None:
    env = JointEnvFactory(SPREAD, {"N": 3, "max_cycles": 4})()
    inner = env.env
    assert env.action_space == gym.spaces.MultiDiscrete([5, 5, 5])
    assert set(env.observation_space.spaces) == {"obs", "state"}  # MPE has no masks
    assert env.observation_space["obs"].shape == (3, 18)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    np.testing.assert_allclose(obs["state"], inner.state())
    steps = 0
    while True:
        obs, rew, term, trunc, info = env.step(np.array([1, 2, 3]))
        steps += 1
        agent_rew = info["agent_rewards"]
        assert agent_rew.dtype == np.float32 and agent_rew.shape == (3,)
        assert rew == pytest.approx(float(agent_rew.sum()))
        np.testing.assert_allclose(obs["state"], inner.state())
        if term or trunc:
            break
    # max_cycles truncates every agent at once: a truncation, the last observations kept
    assert (steps, term, trunc) == (4, False, True)
    assert np.abs(obs["obs"]).sum() > 0


def test_padding_masks_and_agents_that_leave() -> None:
    env = JointAgentEnv(Leavers(stay=(1, 3, 5)))
    space = env.observation_space
    assert space["obs"].shape == (3, 4)  # padded to the largest observation (agent 2's 4)
    assert space["action_mask"].shape == (3, 4)
    assert space["state"].shape == (2 + 3 + 4,)  # no state(): the observations side by side
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["obs"][0], [0, 0, 0, 0])  # agent 0: 2 numbers, padded
    np.testing.assert_array_equal(obs["obs"][1], [10, 10, 10, 0])
    np.testing.assert_array_equal(obs["action_mask"], np.tril(np.ones((3, 4)))[:, :4])
    # the step agent 0 leaves at: its final observation is still shown
    obs, rew, term, trunc, info = env.step(np.array([0, 1, 2]))
    assert rew == 0 + (1 + 1) + (2 + 2)
    np.testing.assert_array_equal(info["agent_rewards"], [0, 2, 4])
    np.testing.assert_array_equal(info["agents_alive"], [False, True, True])
    assert obs["obs"][0, 0] == 1 and not (term or trunc)
    # afterwards its row is zero and only the no-op is legal; its action is never sent
    obs, rew, term, trunc, info = env.step(np.array([3, 1, 2]))
    np.testing.assert_array_equal(obs["obs"][0], 0)
    np.testing.assert_array_equal(obs["action_mask"][0], [1, 0, 0, 0])
    assert rew == 2 + 4
    np.testing.assert_array_equal(obs["state"][:2], 0)
    for _ in range(2):
        _, _, term, trunc, _ = env.step(np.array([0, 0, 0]))
    assert not (term or trunc)
    _, _, term, trunc, info = env.step(np.array([0, 0, 0]))
    assert term and not trunc  # every agent terminated
    assert not info["agents_alive"].any()


def test_a_truncation_ends_the_episode_as_truncated() -> None:
    env = JointAgentEnv(Leavers(stay=(1, 9, 9), horizon=3))
    env.reset()
    flags = [env.step(np.zeros(3, dtype=np.int64))[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


class Mixed(Leavers):
    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(4 if agent == "a0" else 5)


def test_refusals_are_one_line() -> None:
    with pytest.raises(ConfigError, match="one action space shared by all agents"):
        JointAgentEnv(Mixed())
    aec = pytest.importorskip("pettingzoo.classic.tictactoe_v3").env()
    with pytest.raises(ConfigError, match=r"AEC env.*parallel_env"):
        JointAgentEnv(aec)


def test_the_factory_pickles_and_runs_on_a_subprocess_backend() -> None:
    from rlblocks.run import make_vector_env

    factory = pickle.loads(pickle.dumps(JointEnvFactory(SPREAD, {"N": 2, "max_cycles": 3})))
    envs = make_vector_env("subproc", factory, 2)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs["obs"].shape == (2, 2, 12)
        for _ in range(3):
            obs, rew, _, trunc, _ = envs.step(np.ones((2, 2), dtype=np.int64))
        assert trunc.all() and rew.shape == (2,)
    finally:
        envs.close()


class FirstAction(BasePolicy):
    """Acts 0 for every agent; learns nothing."""

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        n = len(batch.obs["obs"])
        return Batch(act=np.zeros((n, *self.action_space.shape), dtype=np.int64))

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        return {}


def test_a_joint_agents_spec_gets_single_agent_parts() -> None:
    config = build_config(
        "dqn",
        overrides=[
            (("env", "id"), SPREAD),
            (("env", "make_kwargs"), {"N": 2, "max_cycles": 5}),
            (("env", "num_envs"), 2),
            (("env", "num_test_envs"), 1),
        ],
        spec_lookup=spec_lookup,
    )
    spec = attrs.evolve(spec_lookup("algo", "dqn"), joint_agents=True)
    made: list[tuple[gym.Space, gym.Space]] = []

    def make_policy(obs_space: gym.Space, act_space: gym.Space, state_space: Any = None) -> Any:
        made.append((obs_space, act_space))
        return FirstAction(obs_space, act_space)

    run = FamilyBuild(
        config=config, algo_spec=spec, seed=0, device="cpu", make_policy=make_policy,
        make_buffer=lambda lanes, name=None: make_buffer("replay", 100, lanes),
    )  # fmt: skip
    parts = PettingZooFamily().build(run)
    try:
        ((obs_space, act_space),) = made
        assert act_space == gym.spaces.MultiDiscrete([5, 5])
        assert obs_space["obs"].shape == (2, 12)
        with torch.inference_mode():
            stats = parts.train_collector.collect(n_step=10)
        assert stats.n_episode == 2  # two envs, five steps each
        assert len(parts.buffer) == 10
        row = parts.buffer[0]
        assert row.obs["obs"].shape == (2, 12) and row.act.shape == (2,)
    finally:
        parts.train_envs.close()
        parts.test_envs.close()
    with pytest.raises(ConfigError, match="count_steps_by"):
        PettingZooFamily().build(
            attrs.evolve(
                run,
                config=attrs.evolve(
                    config, trainer=attrs.evolve(config.trainer, count_steps_by="agent_steps")
                ),
            )
        )
