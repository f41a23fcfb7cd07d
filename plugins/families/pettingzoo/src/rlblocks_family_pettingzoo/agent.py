"""A multi-agent run back from its directory: ``rlblocks.load(RUN)`` on a PettingZoo run.

::

    agent = rlblocks.load("runs/ippo-simple_spread_v3-...")
    env = mpe2.simple_spread_v3.parallel_env()
    obs, _ = env.reset(seed=0)
    actions = agent.act(obs)                       # {agent_id: action}, straight into env.step
    result = agent.evaluate(episodes=20, seed=0)   # the run's env; returns per agent and total

Each agent acts through the policy of its group (``env.policy_mapping``; one shared policy
without it), with the agent's index in ``possible_agents`` passed as the collector passes it.
``evaluate`` plays whole episodes with the run's own test collector, so its returns are the
run's test returns for the same seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.collect import to_numpy
from rlblocks.contracts import Batch, ConfigError, NonFiniteError
from rlblocks.run import Agent, EvalResult

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
        the run's tests do; False samples as in training. Recurrent state is not carried here:
        ``evaluate`` plays recurrent policies."""
        if state is not None or return_state:
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
        groups: dict[int, list[str]] = {}
        for agent in obs:
            groups.setdefault(id(self.policy_of(agent)), []).append(agent)
        actions: dict[str, Any] = {}
        for agents in groups.values():
            policy = self.policy_of(agents[0])
            batch = Batch(
                obs=_stack([obs[a] for a in agents]),
                agent=np.array([self.agents.index(a) for a in agents], dtype=np.int64),
            )
            was_training = policy.training
            policy.train(not deterministic)
            try:
                with torch.inference_mode():
                    out = policy(batch, None)
                    if out.get("state", None) is not None:
                        raise ConfigError(
                            f"{self.algo}'s policy is recurrent, and act() of a multi-agent "
                            "agent carries no state; play whole episodes with "
                            "agent.evaluate(...)"
                        )
                    act = to_numpy(out.act)
                    if not deterministic:
                        act = policy.exploration_noise(act, out)
                    env_act = policy.map_action(act)
            finally:
                policy.train(was_training)
            for j, agent in enumerate(agents):
                actions[agent] = env_act[j]
        return {a: actions[a] for a in obs}

    __call__ = act

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
        from rlblocks_family_pettingzoo.multiagent import (
            MultiAgentCollector,
            MultiAgentVectorEnv,
            multiagent_factory,
            multiagent_wrappers,
        )

        if episodes <= 0:
            raise ConfigError(f"episodes must be positive, got {episodes}")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ConfigError(f"seed must be a whole number >= 0 (or None), got {seed!r}")
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
                "render"
            )
        c = self.config
        if env is None:
            factory = self.make_env
            if make_kwargs:  # the run's env with other constructor arguments, in its wrappers
                made = multiagent_factory(c.env.id, {**dict(c.env.make_kwargs or {}),
                                                     **dict(make_kwargs)})  # fmt: skip
                wrappers = multiagent_wrappers(list(c.env.wrappers))

                def factory() -> Any:
                    out = made()
                    for w in wrappers:
                        out = w(out)
                    return out
        elif isinstance(env, str):
            factory = multiagent_factory(env, make_kwargs)
        elif callable(env):
            if make_kwargs:
                raise ConfigError(
                    "make_kwargs go to the env's constructor, so they need an env id (the "
                    "run's own, or env='module:parallel_env'), not an env factory"
                )
            factory = env
        else:
            raise ConfigError(
                f"env must be a PettingZoo env id (module:parallel_env) or a factory of a "
                f"PettingZoo env, got {type(env).__name__}"
            )
        n = num_envs or min(episodes, max(1, int(c.env.num_test_envs)))
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
            agent_returns = {
                a: np.array([ep.get(a, np.nan) for ep in per_episode], dtype=np.float64)
                for a in envs.agents
                if any(a in ep for ep in per_episode)
            }
        finally:
            envs.close()
        return EvalResult(
            returns=np.asarray(stats.returns, dtype=np.float64),
            lengths=np.asarray(stats.lengths, dtype=np.int64),
            agent_returns=agent_returns,
        )

    def _check_env(self, envs: Any, env: Any) -> None:  # type: ignore[override]
        """The env to play must have the run's agents, with the spaces they were trained on."""
        name = env if isinstance(env, str) else self.env_id
        for agent in envs.agents:
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

    def record(self, path: Any, *args: Any, **kwargs: Any) -> EvalResult:
        """Not for multi-agent runs yet: refused in one line."""
        raise ConfigError(
            "recording a video of a multi-agent run is not supported yet; evaluate it "
            "(agent.evaluate, rlblocks eval without --video)"
        )


def _stack(rows: list[Any]) -> Any:
    """Observations (arrays or dicts of arrays) -> one batch (a leading axis)."""
    first = rows[0]
    if isinstance(first, Mapping):
        return {k: _stack([r[k] for r in rows]) for k in first}
    return np.stack([np.asarray(r) for r in rows])
