"""The PettingZoo env family: how a run on a PettingZoo ``env.id`` gets its parts.

Core asks an installed family for the envs, policies, buffers and collectors of an ``env.id``
it claims (``rlblocks.run.EnvFamily``); this one builds ``N`` PettingZoo envs as agent slots
(:class:`MultiAgentVectorEnv`), one policy shared by every agent (IPPO/MAPPO's parameter
sharing) or one per agent group of ``env.policy_mapping`` (a :class:`PolicyGroup`, each with
its own buffer of a :class:`BufferGroup`), and :class:`MultiAgentCollector` s that batch each
policy's ready agents into one forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import gymnasium as gym

from rlblocks.collect import Collector
from rlblocks.contracts import ConfigError
from rlblocks.run import FamilyBuild, FamilyParts, make_vector_env, stacked_space
from rlblocks_family_pettingzoo.agent import JointAgent, MultiAgentAgent
from rlblocks_family_pettingzoo.joint import JointAgentEnv, JointEnvFactory
from rlblocks_family_pettingzoo.multiagent import (
    BufferGroup,
    MultiAgentCollector,
    MultiAgentVectorEnv,
    PolicyGroup,
    SingleAgentParallelEnv,
    group_agents,
    multiagent_factory,
    multiagent_wrappers,
)
from rlblocks_family_pettingzoo.remote import WORKER_BACKENDS, make_remote_multiagent_env

#: The backends that step a multi-agent run's envs in this process.
IN_PROCESS = ("dummy", "auto")


def _options(options: Any) -> dict[str, Any]:
    """``env.options`` (a backend's attrs config, a mapping or None) as keyword options."""
    if options is None:
        return {}
    if attrs.has(type(options)):
        return attrs.asdict(options, recurse=False)
    return dict(options)


def agent_spaces(envs: MultiAgentVectorEnv, agent: str) -> tuple[gym.Space, gym.Space]:
    """An agent's observation and action spaces."""
    return envs.observation_space(agent), envs.action_space(agent)


def env_factory(c: Any, train: bool = False) -> Callable[[], Any]:
    """A factory of the run's PettingZoo env (``c.env.id`` with its make kwargs) in its
    ``env.wrappers`` (and ``env.train_wrappers`` when ``train``), innermost first."""
    factory = multiagent_factory(c.env.id, c.env.make_kwargs)
    wrappers = multiagent_wrappers(
        [*c.env.wrappers, *c.env.train_wrappers] if train else list(c.env.wrappers)
    )

    def make() -> Any:
        env = factory()
        for w in wrappers:
            env = w(env)
        return env

    return make


class PettingZooFamily:
    """The :class:`rlblocks.run.EnvFamily` of PettingZoo's parallel and AEC envs."""

    def check_env_id(self, env_id: str, trusted: bool = True) -> None:
        multiagent_factory(env_id, trusted=trusted)

    def probe_envs(self, env_fns: Sequence[Callable[[], gym.Env]]) -> MultiAgentVectorEnv:
        return MultiAgentVectorEnv(
            [lambda fn=fn: SingleAgentParallelEnv(fn()) for fn in env_fns]
        )

    def collector(
        self, policy: Any, envs: MultiAgentVectorEnv, buffer: Any, seed: int = 0
    ) -> MultiAgentCollector:
        return MultiAgentCollector(policy, envs, buffer, seed=seed)

    def build(self, run: FamilyBuild) -> FamilyParts:
        c = run.config
        if getattr(run.algo_spec, "joint_agents", False):
            return self._joint_parts(run)
        if c.env.info_keys:
            raise ConfigError(
                "env.info_keys: storing step infos is not supported for multi-agent envs "
                "yet; remove it (or put the values in the agents' observations)"
            )
        if c.env.backend not in IN_PROCESS + WORKER_BACKENDS:
            raise ConfigError(
                f"$.env.backend: {c.env.backend!r} cannot step multi-agent (PettingZoo) envs; "
                f"use --backend {' or '.join(WORKER_BACKENDS)} for worker processes, or dummy "
                "to step them in this process"
            )
        train_envs, test_envs = self._envs(c)
        try:
            return self._parts(run, train_envs, test_envs)
        except BaseException:  # the run never gets the envs: close them here
            train_envs.close()
            test_envs.close()
            raise

    def _joint_parts(self, run: FamilyBuild) -> FamilyParts:
        """The run of an algorithm that learns from joint transitions: each PettingZoo env
        becomes one single-agent gymnasium env (:class:`JointAgentEnv`), and core's vector-env
        backends, buffer and collectors run it as any other."""
        c, t = run.config, run.config.trainer
        if c.env.policy_mapping and len(set(c.env.policy_mapping.values())) > 1:
            raise ConfigError(
                f"$.env.policy_mapping: {run.algo_spec.name!r} learns one joint policy over "
                "all agents (the joint view); remove env.policy_mapping"
            )
        if t.count_steps_by != "env_steps":
            raise ConfigError(
                f"$.trainer.count_steps_by: {run.algo_spec.name!r} learns from the joint view, "
                "one transition per env step for all agents; leave count_steps_by at env_steps"
            )
        multiagent_factory(c.env.id, c.env.make_kwargs)  # a bad id is named before envs start
        options = _options(c.env.options)

        def envs(n: int, wrappers: list[Any]) -> Any:
            factory = JointEnvFactory(c.env.id, c.env.make_kwargs, wrappers)
            return make_vector_env(c.env.backend, factory, n, **options)

        train_envs = envs(c.env.num_envs, [*c.env.wrappers, *c.env.train_wrappers])
        try:
            test_envs = envs(c.env.num_test_envs, list(c.env.wrappers))
        except BaseException:
            train_envs.close()
            raise
        try:
            frames = c.buffer.stack_num
            policy = run.make_policy(
                stacked_space(train_envs.observation_space, frames), train_envs.action_space
            )
            policy.seed(run.seed)
            buffer = run.make_buffer(c.env.num_envs)
            # train and test envs get disjoint seed ranges, as in single-agent runs
            train_collector = Collector(
                policy, train_envs, buffer, seed=run.seed, frame_stack=frames,
                info_keys=c.env.info_keys,
            )  # fmt: skip
            test_collector = Collector(
                policy, test_envs, None, exploration=False, seed=run.seed + 100_000,
                frame_stack=frames,
            )  # fmt: skip
        except BaseException:  # the run never gets the envs: close them here
            train_envs.close()
            test_envs.close()
            raise
        return FamilyParts(
            train_envs=train_envs,
            test_envs=test_envs,
            policy=policy,
            buffer=buffer,
            train_collector=train_collector,
            test_collector=test_collector,
        )

    def _parts(
        self, run: FamilyBuild, train_envs: MultiAgentVectorEnv, test_envs: MultiAgentVectorEnv
    ) -> FamilyParts:
        t = run.config.trainer
        policy, mapping = self._policies(run, train_envs)
        policy.seed(run.seed)
        # one chain of steps per agent slot (env x agent)
        lanes = train_envs.num_slots
        if isinstance(policy, PolicyGroup):  # a buffer per policy
            buffer: Any = BufferGroup({name: run.make_buffer(lanes, name) for name in policy})
        else:
            buffer = run.make_buffer(lanes)
        # train and test envs get disjoint seed ranges (a resumed run continues both streams)
        train_collector = MultiAgentCollector(
            policy, train_envs, buffer, mapping=mapping, seed=run.seed,
            count_steps_by=t.count_steps_by,
        )  # fmt: skip
        test_collector = MultiAgentCollector(
            policy, test_envs, None, mapping=mapping, exploration=False,
            seed=run.seed + 100_000, count_steps_by=t.count_steps_by,
        )  # fmt: skip
        self._check_buffer_size(run, train_envs)
        return FamilyParts(
            train_envs=train_envs,
            test_envs=test_envs,
            policy=policy,
            buffer=buffer,
            train_collector=train_collector,
            test_collector=test_collector,
        )

    def _policies(
        self, run: FamilyBuild, envs: MultiAgentVectorEnv
    ) -> tuple[Any, dict[str, str] | None]:
        """The run's policy (shared by every agent) or :class:`PolicyGroup` (one per agent
        group of ``env.policy_mapping``), and the mapping agent -> policy name (None: one)."""
        c = run.config
        state_space = envs.state_space
        if len(set(c.env.policy_mapping.values())) > 1:
            mapping = group_agents(envs.agents, c.env.policy_mapping)
            group = PolicyGroup({
                name: run.make_policy(
                    *self._group_spaces(envs, mapping, name), state_space=state_space
                )
                for name in dict.fromkeys(mapping.values())
            })  # fmt: skip
            return group, mapping
        return run.make_policy(*self._shared_spaces(c, envs), state_space=state_space), None

    def agent(self, run: FamilyBuild) -> MultiAgentAgent:
        """A run's agent without its weights (``rlblocks.load`` loads them): its policy or
        policies built for the spaces of the run's env (with ``env.wrappers``, as its tests);
        a :class:`JointAgent` for an algorithm that learned from the joint view."""
        c = run.config
        factory = env_factory(c)
        if getattr(run.algo_spec, "joint_agents", False):
            return self._joint_agent(run, factory)
        envs = MultiAgentVectorEnv([factory])
        try:
            policy, mapping = self._policies(run, envs)
            spaces = {a: agent_spaces(envs, a) for a in envs.agents}
        finally:
            envs.close()
        return MultiAgentAgent(policy, c, spaces=spaces, mapping=mapping, env_factory=factory)

    @staticmethod
    def _joint_agent(run: FamilyBuild, factory: Callable[[], Any]) -> JointAgent:
        """The agent of a joint-view run: its one policy built for the joint view of the run's
        env (as :meth:`_joint_parts` builds it), which also turns the agents' observations
        into joint ones and joint actions back into the agents'."""
        c = run.config
        layout = JointAgentEnv(factory())
        try:
            spaces = {a: (layout.env.observation_space(a), layout.env.action_space(a))
                      for a in layout.agents}  # fmt: skip
            policy = run.make_policy(
                stacked_space(layout.observation_space, c.buffer.stack_num), layout.action_space
            )
        finally:
            layout.close()  # only its spaces and conversions are kept
        return JointAgent(policy, c, spaces=spaces, env_factory=factory, layout=layout)

    @staticmethod
    def _envs(c: Any) -> tuple[MultiAgentVectorEnv, MultiAgentVectorEnv]:
        """Train and test envs of ``c.env.id`` (train wrappers on the training envs only)."""
        if c.buffer.stack_num > 1:
            raise ConfigError(
                "$.buffer.stack_num: multi-agent runs do not stack frames from the buffer; "
                "stack them with a PettingZoo wrapper (env.wrappers) instead"
            )
        backend = c.env.backend

        def envs(n: int, make: Callable[[], Any]) -> Any:
            if backend in WORKER_BACKENDS:  # each env in a worker process of the backend
                return make_remote_multiagent_env(backend, make, n, **_options(c.env.options))
            return MultiAgentVectorEnv([make] * n)

        train = envs(c.env.num_envs, env_factory(c, train=True))
        try:
            test = envs(c.env.num_test_envs, env_factory(c))
        except BaseException:
            train.close()
            raise
        return train, test

    @staticmethod
    def _shared_spaces(c: Any, envs: MultiAgentVectorEnv) -> tuple[gym.Space, gym.Space]:
        """The spaces of the one policy every agent shares, which must agree."""
        agents = envs.agents
        obs = {repr(envs.observation_space(a)) for a in agents}
        act = {repr(envs.action_space(a)) for a in agents}
        if len(obs) > 1 or len(act) > 1:
            raise ConfigError(
                f"env {c.env.id!r}: the agents {agents} have different observation or action "
                "spaces, and a run shares one policy among all agents unless env.policy_mapping "
                "gives them policies of their own, e.g. --set 'env.policy_mapping="
                f'{{"{agents[0]}": "first", "*": "others"}}\''
            )
        return agent_spaces(envs, agents[0])

    @staticmethod
    def _group_spaces(
        envs: MultiAgentVectorEnv, mapping: dict[str, str], name: str
    ) -> tuple[gym.Space, gym.Space]:
        """The spaces of policy ``name``'s agents, which must agree."""
        agents = [a for a in envs.agents if mapping[a] == name]
        spaces = {(repr(envs.observation_space(a)), repr(envs.action_space(a))) for a in agents}
        if len(spaces) > 1:
            raise ConfigError(
                f"$.env.policy_mapping: policy {name!r} acts for {agents}, whose observation or "
                "action spaces differ; give them policies of their own"
            )
        return agent_spaces(envs, agents[0])

    @staticmethod
    def _check_buffer_size(run: FamilyBuild, envs: MultiAgentVectorEnv) -> None:
        """An on-policy buffer must hold a whole collect of agent transitions."""
        c, t = run.config, run.config.trainer
        if run.algo_spec.training != "on-policy" or t.step_per_collect is None:
            return
        per_step = envs.num_agents if t.count_steps_by == "env_steps" else 1
        lanes = envs.num_slots
        need = (t.step_per_collect + c.env.num_envs) * per_step + lanes
        if c.buffer.size < need:
            raise ConfigError(
                f"$.buffer.size: one collect of step_per_collect={t.step_per_collect} "
                f"{t.count_steps_by} stores up to {need} agent transitions over "
                f"{envs.num_agents} agents x {c.env.num_envs} envs; set buffer.size "
                f">= {need}"
            )
