"""A multi-agent run back from its directory: ``rlblocks.load(RUN)`` on a PettingZoo run.

::

    agent = rlblocks.load("runs/ippo-simple_spread_v3-...")
    env = mpe2.simple_spread_v3.parallel_env()
    obs, _ = env.reset(seed=0)
    actions = agent.act(obs)                       # {agent_id: action}, straight into env.step
    result = agent.evaluate(episodes=20, seed=0)   # the run's env; returns per agent and total

Each agent acts through the policy of its group (``env.policy_mapping``; one shared policy
without it), with the agent's index in ``possible_agents`` passed as the collector passes it.
A run of an algorithm that learns from the joint view (QMIX, VDN, MADDPG/MATD3, MASAC:
``AlgoSpec.joint_agents``) loads as a :class:`JointAgent`: the same ``act`` and ``evaluate``,
its one policy acting for every agent at once. ``evaluate`` plays whole episodes with the
run's own test collector, so its returns are the run's test returns for the same seeds;
``record`` writes a video of episodes in the env's ``rgb_array`` render mode, as single-agent
agents do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.collect import to_numpy
from rlblocks.contracts import Batch, ConfigError, NonFiniteError, acting_requirements
from rlblocks.run import Agent, EvalResult, make_vector_env

#: the backends a multi-agent evaluation takes: its envs step in this process
_IN_PROCESS = ("dummy", "auto")


class MultiAgentAgent(Agent):
    """The :class:`rlblocks.run.Agent` of a multi-agent run: ``act`` maps ``{agent_id: obs}``
    to ``{agent_id: action}``; ``evaluate`` plays the run's PettingZoo env.

    Attributes:
        agents: the env's agent ids (``possible_agents``), in its order.
        mapping: agent id -> policy name of a run with several policies (``env.policy_mapping``);
            None when every agent shares ``policy``.
    """

    def __init__(
        self,
        policy: Any,
        config: Any,
        spaces: Mapping[str, tuple[gym.Space, gym.Space]],
        mapping: Mapping[str, str] | None,
        env_factory: Callable[[], Any],
        checkpoint: Any = None,
    ) -> None:
        super().__init__(policy, config, checkpoint=checkpoint)
        self.agents = list(spaces)
        self.spaces = dict(spaces)
        self.mapping = dict(mapping) if mapping is not None else None
        #: the run's own env in its ``env.wrappers`` (its test envs)
        self.make_env = env_factory

    # -- what it is ---------------------------------------------------------------------------
    @property
    def observation_space(self) -> gym.spaces.Dict:
        """Each agent's observation space, by agent id."""
        return gym.spaces.Dict({a: s[0] for a, s in self.spaces.items()})

    @property
    def action_space(self) -> gym.spaces.Dict:
        """Each agent's action space, by agent id."""
        return gym.spaces.Dict({a: s[1] for a, s in self.spaces.items()})

    def policy_of(self, agent: str) -> Any:
        """The policy that acts for ``agent``."""
        if self.mapping is None:
            return self.policy
        return self.policy[self.mapping[agent]]

    def __repr__(self) -> str:
        where = f" from {self.checkpoint}" if self.checkpoint else ""
        return f"Agent({self.algo} on {self.env_id}, agents {', '.join(self.agents)}{where})"

    # -- acting -------------------------------------------------------------------------------
    def act(
        self,
        obs: Any,
        state: Any = None,
        deterministic: bool = True,
        return_state: bool = False,
    ) -> dict[str, Any]:
        """The env action of each agent in ``obs`` (``{agent_id: observation}``, what a
        PettingZoo parallel env's ``reset`` and ``step`` give), as ``{agent_id: action}``.

        The agents of one policy go through it in one forward pass. ``deterministic`` acts as
        the run's tests do; False samples as in training. Recurrent state and trajectory views
        are not carried here: ``evaluate`` plays policies with either."""
        self._check_obs_dict(obs, state, return_state)
        groups: dict[int, list[str]] = {}
        for agent in obs:
            groups.setdefault(id(self.policy_of(agent)), []).append(agent)
        actions: dict[str, Any] = {}
        for agents in groups.values():
            policy = self.policy_of(agents[0])
            if acting_requirements(getattr(policy, "view_requirements", None) or {}):
                raise ConfigError(
                    f"{self.algo}'s policy reads trajectory views (histories of past steps, "
                    "other agents' data), which one observation per agent does not carry; play "
                    "whole episodes with agent.evaluate(...)"
                )
            batch = Batch(
                obs=_stack([obs[a] for a in agents]),
                agent=np.array([self.agents.index(a) for a in agents], dtype=np.int64),
            )
            env_act, _ = self._forward(policy, batch, deterministic)
            for j, agent in enumerate(agents):
                actions[agent] = env_act[j]
        return {a: actions[a] for a in obs}

    __call__ = act

    def _forward(
        self,
        policy: Any,
        batch: Batch,
        deterministic: bool,
        state: Any = None,
        stateful: bool = False,
    ) -> tuple[np.ndarray, Any]:
        """``policy``'s env actions for ``batch``, as the collector makes them: its forward
        pass (test mode when ``deterministic``) from recurrent ``state``, exploration noise
        otherwise, ``map_action``; and the state after it (a recurrent policy is refused
        unless ``stateful``)."""
        was_training = policy.training
        policy.train(not deterministic)
        try:
            with torch.inference_mode():
                out = policy(batch, state)
                new_state = out.get("state", None)
                if new_state is not None and not stateful:
                    what = (
                        "a recording of it" if getattr(self, "_played", None) is not None
                        else "act()"
                    )
                    raise ConfigError(
                        f"{self.algo}'s policy is recurrent, and {what} carries no state for "
                        "the agents of a multi-agent run yet; play whole episodes with "
                        "agent.evaluate(...)"
                    )
                act = to_numpy(out.act)
                if not deterministic:
                    act = policy.exploration_noise(act, out)
                return np.asarray(policy.map_action(act)), new_state
        finally:
            policy.train(was_training)

    def _check_obs_dict(
        self, obs: Any, state: Any, return_state: bool, stateful: bool = False
    ) -> None:
        """What ``act`` takes: ``{agent_id: observation}`` of the run's agents (and no state,
        unless ``stateful``)."""
        if (state is not None or return_state) and not stateful:
            raise ConfigError(
                "act() of a multi-agent agent carries no recurrent state; play whole episodes "
                "with agent.evaluate(...)"
            )
        if isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], Mapping):
            raise ConfigError(
                "act() got a pair (observations, infos), what env.reset() returns; pass the "
                "observations alone: obs, infos = env.reset(); actions = agent.act(obs)"
            )
        if not isinstance(obs, Mapping):
            raise ConfigError(
                f"a multi-agent agent acts on {{agent_id: observation}} (agents "
                f"{', '.join(self.agents)}), got a {type(obs).__name__}"
            )
        unknown = [a for a in obs if a not in self.spaces]
        if unknown:
            raise ConfigError(
                f"act() got observations of {unknown}, which are not agents of the run's env "
                f"{self.env_id!r} ({', '.join(self.agents)})"
            )
        for agent, o in obs.items():
            self._check_obs(agent, o)

    def _check_obs(self, agent: str, obs: Any) -> None:
        """One observation of ``agent``: the shape of its space, finite."""
        space = self.spaces[agent][0]
        leaves = list(obs.values()) if isinstance(obs, Mapping) else [obs]
        for leaf in leaves:
            arr = np.asarray(leaf)
            if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
                raise NonFiniteError(
                    f"act() got an observation of {agent!r} with NaN or infinite values, on "
                    "which the policy's action means nothing; check what produced it"
                )
        shape = getattr(space, "shape", None)
        if not isinstance(obs, Mapping) and shape is not None and np.shape(obs) != shape:
            raise ConfigError(
                f"the observation of {agent!r} has shape {np.shape(obs)}, and its space is "
                f"{space}: pass one observation per agent"
            )

    # -- evaluating ---------------------------------------------------------------------------
    def evaluate(
        self,
        env: Any = None,
        episodes: int = 10,
        seed: int | None = None,
        num_envs: int | None = None,
        backend: str = "dummy",
        deterministic: bool = True,
        render: bool = False,
        make_kwargs: Mapping[str, Any] | None = None,
    ) -> EvalResult:
        """Play ``episodes`` whole episodes of the run's PettingZoo env (or ``env``: a
        PettingZoo id ``module:parallel_env``, or a factory of a PettingZoo env) and return
        their returns: ``returns`` as the run's tests count them (the mean over the agents),
        ``agent_returns`` each agent's and ``total_returns`` their sum. ``num_envs`` envs
        run side by side (default: the run's number of test envs, at most ``episodes``);
        ``make_kwargs`` go to the env's constructor over the run's own."""
        from rlblocks_family_pettingzoo.multiagent import MultiAgentCollector, MultiAgentVectorEnv

        self._check_evaluate(episodes, seed, num_envs, backend, render)
        factory = self._pettingzoo_factory(env, make_kwargs)
        n = num_envs or min(episodes, max(1, int(self.config.env.num_test_envs)))
        envs = MultiAgentVectorEnv([factory] * n)
        try:
            self._check_env(envs, env)
            collector = MultiAgentCollector(
                self.policy, envs, None, mapping=self.mapping, exploration=not deterministic,
                seed=seed,
            )  # fmt: skip
            self.policy.train(not deterministic)
            try:
                stats = collector.collect(n_episode=episodes)
            finally:
                self.policy.eval()
            per_episode = collector.last_agent_returns
        finally:
            envs.close()
        return EvalResult(
            returns=np.asarray(stats.returns, dtype=np.float64),
            lengths=np.asarray(stats.lengths, dtype=np.int64),
            agent_returns=_by_agent(per_episode, self.agents),
        )

    def _check_evaluate(
        self, episodes: int, seed: Any, num_envs: int | None, backend: str, render: bool
    ) -> None:
        """``evaluate``'s arguments, each refused in one line."""
        if episodes <= 0:
            raise ConfigError(f"episodes must be positive, got {episodes}")
        _check_seed(seed)
        if num_envs is not None and num_envs < 1:
            raise ConfigError(f"num_envs must be at least 1, got {num_envs} (None: the run's own)")
        if backend not in _IN_PROCESS:
            raise ConfigError(
                f"backend {backend!r} cannot step multi-agent (PettingZoo) envs yet; they step "
                "in this process: leave the backend out (dummy)"
            )
        if render:
            raise ConfigError(
                "showing a multi-agent env in a window is not supported yet; evaluate without "
                "render (or record a video: agent.record, rlblocks eval --video)"
            )

    def _pettingzoo_factory(
        self, env: Any, make_kwargs: Mapping[str, Any] | None
    ) -> Callable[[], Any]:
        """A factory of the PettingZoo env to play: the run's own (its make kwargs, with
        ``make_kwargs`` over them, in its ``env.wrappers``), an env id, or the user's factory."""
        from rlblocks_family_pettingzoo.multiagent import multiagent_factory, multiagent_wrappers

        c = self.config
        if env is None:
            if not make_kwargs:
                return self.make_env
            # the run's env with other constructor arguments, in its wrappers
            made = multiagent_factory(c.env.id, {**dict(c.env.make_kwargs or {}),
                                                 **dict(make_kwargs)})  # fmt: skip
            wrappers = multiagent_wrappers(list(c.env.wrappers))

            def factory() -> Any:
                out = made()
                for w in wrappers:
                    out = w(out)
                return out

            return factory
        if isinstance(env, str):
            return multiagent_factory(env, make_kwargs)
        if callable(env):
            if make_kwargs:
                raise ConfigError(
                    "make_kwargs go to the env's constructor, so they need an env id (the "
                    "run's own, or env='module:parallel_env'), not an env factory"
                )
            return env
        raise ConfigError(
            f"env must be a PettingZoo env id (module:parallel_env) or a factory of a "
            f"PettingZoo env, got {type(env).__name__}"
        )

    def _check_env(self, envs: Any, env: Any) -> None:  # type: ignore[override]
        """The env to play (anything with PettingZoo's ``possible_agents`` or the vector
        env's ``agents``, and per-agent spaces) must have the run's agents, with the spaces
        they were trained on."""
        name = env if isinstance(env, str) else self.env_id
        agents = getattr(envs, "possible_agents", None) or envs.agents
        for agent in agents:
            if agent not in self.spaces:
                raise ConfigError(
                    f"the env {name!r} has the agent {agent!r}, which this {self.algo} agent "
                    f"(trained on {self.env_id}, agents {', '.join(self.agents)}) has no "
                    "policy for"
                )
            got = (envs.observation_space(agent), envs.action_space(agent))
            if tuple(map(repr, got)) != tuple(map(repr, self.spaces[agent])):
                raise ConfigError(
                    f"the env {name!r} gives agent {agent!r} the spaces {got[0]} / {got[1]}, "
                    f"but this {self.algo} agent acts on {self.spaces[agent][0]} / "
                    f"{self.spaces[agent][1]}; evaluate it on an env with its spaces"
                )

    def _episode_return(self, agent_returns: Mapping[str, float]) -> float:
        """An episode's return as the run's tests count it: the mean over its agents."""
        return float(sum(agent_returns.values())) / max(len(agent_returns), 1)

    # -- recording ----------------------------------------------------------------------------
    def record(
        self,
        path: Any,
        env: Any = None,
        episodes: int = 1,
        seed: int | None = None,
        fps: int | None = None,
        max_frames: int = 10_000,
        deterministic: bool = True,
    ) -> EvalResult:
        """Play ``episodes`` episodes in one env made with ``render_mode="rgb_array"`` (the
        run's own, or ``env``: a PettingZoo id ``module:parallel_env``) and write the frames
        to ``path`` (``.mp4`` or ``.gif``), as single-agent agents record. Returns the
        episodes' returns as :meth:`evaluate` counts them, each agent's in ``agent_returns``."""
        if self.frame_stack > 1:
            raise ConfigError(
                f"this run stacked {self.frame_stack} frames (buffer.stack_num), which a "
                "recording of a multi-agent run does not; evaluate it (agent.evaluate)"
            )
        self._played: list[dict[str, float]] = []
        try:
            result = super().record(
                path, env=env, episodes=episodes, seed=seed, fps=fps, max_frames=max_frames,
                deterministic=deterministic,
            )  # fmt: skip
            played = self._played
        finally:
            del self._played
        return EvalResult(
            returns=np.array([self._episode_return(ep) for ep in played], dtype=np.float64),
            lengths=result.lengths,
            agent_returns=_by_agent(played, self.agents),
        )

    def _factory(self, env: Any, render_mode: str) -> Callable[[], Any]:
        """One factory of the PettingZoo env (the run's own or the id ``env``) made with
        ``render_mode``, seen as one env that takes and gives dicts by agent
        (:class:`_PlayedEnv`), what :meth:`rlblocks.run.Agent.record` plays."""
        from rlblocks_family_pettingzoo.multiagent import multiagent_factory, multiagent_wrappers

        c = self.config
        if env is None:
            made = multiagent_factory(c.env.id, {**dict(c.env.make_kwargs or {}),
                                                 "render_mode": render_mode})  # fmt: skip
            wrappers = multiagent_wrappers(list(c.env.wrappers))
        elif isinstance(env, str):
            made, wrappers = multiagent_factory(env, {"render_mode": render_mode}), []
        else:
            raise ConfigError(
                "recording needs a PettingZoo env id (it makes the env with render_mode); "
                f"got a {type(env).__name__}: leave env out for the run's own, or pass "
                "env='module:parallel_env'"
            )

        def factory() -> _PlayedEnv:
            out = made()
            try:
                for w in wrappers:
                    out = w(out)
                self._check_env(out, env)
            except BaseException:
                out.close()
                raise
            return _PlayedEnv(out, self._played)

        return factory


    def _record_act(self, obs: Any, state: Any, deterministic: bool) -> tuple[Any, Any]:
        """One step of a recording: the agents' actions (their policies carry no state here)."""
        return self.act(obs, deterministic=deterministic), None


class JointAgent(MultiAgentAgent):
    """The agent of a run that learned from the joint view (QMIX, VDN, MADDPG/MATD3, MASAC):
    one policy acts for every agent at once, on the joint observation
    (:class:`~rlblocks_family_pettingzoo.joint.JointAgentEnv`). ``act`` takes and gives dicts
    by agent as :class:`MultiAgentAgent` does; ``evaluate`` plays the run's env through the
    joint view with the run's own test collector, so ``returns`` are its test returns (the
    team's: the sum over the agents, as joint-view runs count them).

    Attributes:
        layout: the joint view of the run's env (its spaces and conversions; its env is
            closed): turns ``{agent_id: observation}`` into the joint observation and joint
            actions back into ``{agent_id: action}``.
    """

    def __init__(
        self,
        policy: Any,
        config: Any,
        spaces: Mapping[str, tuple[gym.Space, gym.Space]],
        env_factory: Callable[[], Any],
        layout: Any,
        checkpoint: Any = None,
    ) -> None:
        super().__init__(policy, config, spaces, None, env_factory, checkpoint=checkpoint)
        self.layout = layout

    def act(
        self,
        obs: Any,
        state: Any = None,
        deterministic: bool = True,
        return_state: bool = False,
    ) -> dict[str, Any]:
        """The env action of each agent in ``obs`` (``{agent_id: observation}``), as
        ``{agent_id: action}``: the joint policy's greedy actions (``deterministic``; False
        explores as in training). Agents missing from ``obs`` count as gone (zero rows);
        the joint observation's ``state``, which the agents do not act on, is the one
        :meth:`JointAgentEnv.joint_observation` gives. A recurrent policy (QMIX and VDN with
        ``algo.recurrent``) takes and gives ``state`` as single-agent agents do: pass
        ``return_state=True`` to get ``(actions, state)``, and the state back with the next
        observations (None at an episode's start)."""
        self._check_obs_dict(obs, state, return_state, stateful=True)
        if self.frame_stack > 1:
            raise ConfigError(
                f"this run stacked {self.frame_stack} frames (buffer.stack_num), which one "
                "observation per agent does not carry; play whole episodes with "
                "agent.evaluate(...)"
            )
        joint = self.layout.joint_observation(obs)
        batch = Batch(obs={k: v[None] for k, v in joint.items()})
        env_act, new_state = self._forward(
            self.policy, batch, deterministic, state=state, stateful=True
        )
        actions = self.layout.agent_actions(env_act[0], list(obs))
        return (actions, new_state) if return_state else actions

    __call__ = act

    # a recording carries the recurrent state as single-agent agents do
    _record_act = Agent._record_act

    def evaluate(
        self,
        env: Any = None,
        episodes: int = 10,
        seed: int | None = None,
        num_envs: int | None = None,
        backend: str = "dummy",
        deterministic: bool = True,
        render: bool = False,
        make_kwargs: Mapping[str, Any] | None = None,
    ) -> EvalResult:
        """Play ``episodes`` whole episodes of the run's PettingZoo env (or ``env``: an id
        ``module:parallel_env``, or a factory of a PettingZoo parallel env) through the
        joint view, with the collector the run tested with: ``returns`` are the team's
        (the run's test returns for the same seeds), ``agent_returns`` each agent's.
        Arguments as :meth:`MultiAgentAgent.evaluate`."""
        from rlblocks.collect import Collector
        from rlblocks_family_pettingzoo.joint import JointAgentEnv

        self._check_evaluate(episodes, seed, num_envs, backend, render)
        pettingzoo = self._pettingzoo_factory(env, make_kwargs)
        finished: list[dict[str, float]] = []

        def factory() -> gym.Env:
            inner = pettingzoo()
            try:
                self._check_env(inner, env)
                joint = JointAgentEnv(inner)
            except BaseException:
                inner.close()
                raise
            return _JointReturns(joint, finished)

        n = num_envs or min(episodes, max(1, int(self.config.env.num_test_envs)))
        envs = make_vector_env("dummy", factory, n)  # in this process: the returns come back
        try:
            collector = Collector(
                self.policy, envs, None, exploration=not deterministic, seed=seed,
                frame_stack=self.frame_stack,
            )  # fmt: skip
            self.policy.train(not deterministic)
            try:
                stats = collector.collect(n_episode=episodes)
            finally:
                self.policy.eval()
        finally:
            envs.close()
        returns = np.asarray(stats.returns, dtype=np.float64)
        team = np.array([sum(ep.values()) for ep in finished], dtype=np.float64)
        if team.shape != returns.shape or not np.allclose(team, returns, atol=1e-4):
            raise RuntimeError(  # the envs step in order in this process: a bug if they differ
                f"the agents' returns of {len(finished)} episodes do not add up to the "
                f"collector's {len(returns)} team returns"
            )
        return EvalResult(
            returns=returns,
            lengths=np.asarray(stats.lengths, dtype=np.int64),
            agent_returns=_by_agent(finished, self.agents),
        )

    def _episode_return(self, agent_returns: Mapping[str, float]) -> float:
        """An episode's return as joint-view runs count it: the team's, the agents' sum."""
        return float(sum(agent_returns.values()))


class _JointReturns(gym.Wrapper):
    """A joint-view env that adds each finished episode's return per agent (from
    ``info["agent_rewards"]``, the agents that took part) to ``finished``, in the order the
    episodes end."""

    def __init__(self, env: Any, finished: list[dict[str, float]]) -> None:
        super().__init__(env)
        self.finished = finished
        self._sums = np.zeros(env.n_agents, dtype=np.float64)
        self._seen = np.zeros(env.n_agents, dtype=bool)

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._sums[:] = 0.0
        self._seen = np.asarray(info.get("agents_alive"), dtype=bool).copy()
        return obs, info

    def step(self, action: Any) -> Any:
        obs, rew, terminated, truncated, info = self.env.step(action)
        self._sums += np.asarray(info["agent_rewards"], dtype=np.float64)
        self._seen |= np.asarray(info["agents_alive"], dtype=bool)
        if terminated or truncated:
            agents = self.env.unwrapped.agents
            self.finished.append(
                {a: float(self._sums[i]) for i, a in enumerate(agents) if self._seen[i]}
            )
        return obs, rew, terminated, truncated, info


class _PlayedEnv:
    """A PettingZoo env (parallel or AEC) as the one env :meth:`rlblocks.run.Agent.record`
    plays: ``reset`` and ``step`` give ``{agent_id: observation}`` of the agents that act next
    and ``step`` takes ``{agent_id: action}`` for them; the reward is the step's sum over the
    agents, and the episode ends when no agent is left. Each finished episode's return per
    agent (of the agents that took part) goes to ``played``. It never resets by itself, so the
    last frame shows how the episode ended."""

    def __init__(
        self,
        env: Any,
        played: list[dict[str, float]],
    ) -> None:
        from rlblocks_family_pettingzoo.multiagent import is_aec

        self.env = env
        self.aec = is_aec(env)
        self.played = played
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self._returns: dict[str, float] = {}

    def reset(self, *, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self._returns = {}
        if self.aec:
            self.env.reset(seed=seed)
            obs, _ = self._next_turn()
            return obs, {}
        obs, _ = self.env.reset(seed=seed)
        return self._live(obs), {}

    def _live(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        live = {a: obs[a] for a in self.env.agents if a in obs}
        for agent in live:
            self._returns.setdefault(agent, 0.0)
        return live

    def _next_turn(self) -> tuple[dict[str, Any], float]:
        """AEC: play ended agents out to the next agent that chooses (``{}`` once none is
        left), adding each agent's rewards since its last turn; and their sum."""
        total = 0.0
        while self.env.agents:
            agent = self.env.agent_selection
            obs, rew, term, trunc, _ = self.env.last()
            self._returns[agent] = self._returns.get(agent, 0.0) + float(rew)
            total += float(rew)
            if not (term or trunc):
                return {agent: obs}, total
            self.env.step(None)  # PettingZoo's way of removing an ended agent
        return {}, total

    def step(self, actions: Mapping[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict]:
        truncated = False
        if self.aec:
            self.env.step(actions[self.env.agent_selection])
            obs, reward = self._next_turn()
        else:
            out, rew, term, trunc, _ = self.env.step(dict(actions))
            reward = 0.0
            for agent, r in rew.items():
                self._returns[agent] = self._returns.get(agent, 0.0) + float(r)
                reward += float(r)
            truncated = any(bool(trunc.get(a, False)) for a in actions)
            obs = {
                a: o for a, o in self._live(out).items()
                if not (term.get(a, False) or trunc.get(a, False))
            }  # fmt: skip
        over = not obs
        if over:
            self.played.append(dict(self._returns))
        return obs, reward, over and not truncated, over and truncated, {}

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _by_agent(episodes: list[dict[str, float]], agents: list[str]) -> dict[str, np.ndarray]:
    """Each agent's return per episode (nan where it took no part), for the agents that took
    part in any."""
    return {
        a: np.array([ep.get(a, np.nan) for ep in episodes], dtype=np.float64)
        for a in agents
        if any(a in ep for ep in episodes)
    }


def _check_seed(seed: Any) -> None:
    """An env seed is None or a whole number >= 0."""
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
    ):
        raise ConfigError(f"seed must be a whole number >= 0 (or None), got {seed!r}")


def _stack(rows: list[Any]) -> Any:
    """Observations (arrays or dicts of arrays) -> one batch (a leading axis)."""
    first = rows[0]
    if isinstance(first, Mapping):
        return {k: _stack([r[k] for r in rows]) for k in first}
    return np.stack([np.asarray(r) for r in rows])
