"""Trajectory views in multi-agent runs: each agent's own history, and other agents' data in the
same env episode (ViewRequirement.agents), while acting and in learn batches."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo import AECEnv, ParallelEnv  # noqa: E402
from pettingzoo.utils import AgentSelector  # noqa: E402

from rlblocks.algo import BasePolicy  # noqa: E402
from rlblocks.collect import Collector  # noqa: E402
from rlblocks.contracts import Batch, ConfigError, ViewRequirement, presence_key  # noqa: E402
from rlblocks.run import make_buffer  # noqa: E402
from rlblocks.testing.env_checks import ProbeEnv, probe_env_fns  # noqa: E402
from rlblocks_env_dummy.dummy import DummyVectorEnv  # noqa: E402
from rlblocks_family_pettingzoo import MultiAgentCollector, MultiAgentVectorEnv  # noqa: E402

AGENTS = ("a0", "a1", "a2")
HORIZON = 5
#: env steps at which each agent acts: a1 enters at step 1, a2 leaves (terminates) after step 1
PRESENT = {0: range(0, HORIZON), 1: range(1, HORIZON), 2: range(0, 2)}


def action(i: int, t: int) -> int:
    """What the scripted policy does as agent ``i`` at env step ``t`` (never 0, the padding)."""
    return 3 * i + t % 3 + 1


def reward(i: int, t: int) -> float:
    return 100.0 * i + t + 1


def present(i: int, t: int) -> bool:
    return t in PRESENT[i]


class Script(ParallelEnv):
    """Three agents on a fixed script (:data:`PRESENT`); observation ``[episode, t, agent]``
    (episodes of env ``k`` count from ``10 * k``), reward :func:`reward`; everyone left
    truncates after :data:`HORIZON` steps."""

    metadata: ClassVar[dict[str, Any]] = {"name": "script_v0", "render_modes": []}
    render_mode = None

    def __init__(self, k: int = 0, strict: bool = True) -> None:
        self.possible_agents = list(AGENTS)
        self.strict = strict  # check that each agent was sent the scripted action
        self._space = gym.spaces.Box(-1e3, 1e3, (3,), np.float32)
        self._act = gym.spaces.Discrete(10)
        self.episode = 10 * k - 1

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return self._act

    def _obs(self, a: str) -> np.ndarray:
        return np.array([self.episode, self.t, AGENTS.index(a)], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.episode += 1
        self.t = 0
        self.agents = [a for i, a in enumerate(AGENTS) if present(i, 0)]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(self.agents), (actions, self.agents)
        t0, self.t = self.t, self.t + 1
        rew, term, trunc = {}, {}, {}
        for a, act in actions.items():
            i = AGENTS.index(a)
            assert not self.strict or int(act) == action(i, t0), f"{a} at {t0} was sent {act}"
            rew[a] = reward(i, t0)
            term[a] = not present(i, self.t) and self.t < HORIZON
            trunc[a] = self.t >= HORIZON
        self.agents = [a for i, a in enumerate(AGENTS) if present(i, self.t)]
        obs = {a: self._obs(a) for a in set(actions) | set(self.agents)}
        return obs, rew, term, trunc, {a: {} for a in obs}


OWN = {
    "prev_act": ViewRequirement("act", shift=-1),
    "prev_rew": ViewRequirement("rew", shift=-1),
    "obs_hist": ViewRequirement("obs", shift="-2:0"),
}
OTHERS = {
    "others_obs": ViewRequirement("obs", agents="others"),
    "others_prev_act": ViewRequirement("act", shift=-1, agents="others"),
    "all_obs_pair": ViewRequirement("obs", shift=[-1, 0], agents="all"),
    "a1_prev_rew": ViewRequirement("rew", shift="-2:-1", agents=["a1"]),
    # for training only: the others' actions at the same step, their next observations
    "others_act": ViewRequirement("act", agents="others", used_for_acting=False),
    "others_next_obs": ViewRequirement("obs", shift=1, agents="others", used_for_acting=False),
}


class Recorder(BasePolicy):
    """Acts :func:`action` from its observation; records, by (episode, t, agent), the views it
    acted on and those each learn batch gives it."""

    def __init__(self, requirements: dict[str, ViewRequirement]) -> None:
        env = Script()
        super().__init__(env.observation_space("a0"), env.action_space("a0"))
        self.view_requirements = dict(requirements)
        self.acting: dict[tuple[int, int, int], dict[str, np.ndarray]] = {}
        self.trained: dict[tuple[int, int, int], dict[str, np.ndarray]] = {}

    def _names(self, acting: bool) -> list[str]:
        out = []
        for name, req in self.view_requirements.items():
            if req.used_for_acting if acting else req.used_for_training:
                out.append(name)
                if req.agents is not None:
                    out.append(presence_key(name))
        return out

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        obs = np.asarray(batch.obs)
        for row, (ep, t, i) in enumerate(obs.astype(int).tolist()):
            key = (ep, t, i)
            assert key not in self.acting, f"{key} acted twice"
            self.acting[key] = {n: np.asarray(batch[n][row]).copy() for n in self._names(True)}
        act = np.array([action(i, t) for _, t, i in obs.astype(int).tolist()], dtype=np.int64)
        return Batch(act=act, state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        for row, (ep, t, i) in enumerate(np.asarray(batch.obs).astype(int).tolist()):
            self.trained[(ep, t, i)] = {
                n: np.asarray(batch[n][row]).copy() for n in self._names(False)
            }
        return {}


def obs_of(ep: int, t: int, i: int) -> list[float]:
    return [ep, t, i] if present(i, t) else [0, 0, 0]


def expected(ep: int, t: int, i: int) -> dict[str, Any]:
    """What agent ``i`` must see at env step ``t`` of episode ``ep``, from the script alone."""
    others = [j for j in range(3) if j != i]
    mine = lambda s: t + s >= PRESENT[i][0]  # noqa: E731 - inside the agent's own episode
    return {
        "prev_act": action(i, t - 1) if mine(-1) else 0,
        "prev_rew": reward(i, t - 1) if mine(-1) else 0.0,
        "obs_hist": [[ep, t + s, i] if mine(s) else [0, 0, 0] for s in (-2, -1, 0)],
        "others_obs": [obs_of(ep, t, j) for j in others],
        "others_obs_present": [present(j, t) for j in others],
        "others_prev_act": [action(j, t - 1) if present(j, t - 1) else 0 for j in others],
        "others_prev_act_present": [present(j, t - 1) for j in others],
        "all_obs_pair": [[obs_of(ep, t + s, j) for s in (-1, 0)] for j in range(3)],
        "all_obs_pair_present": [[present(j, t + s) for s in (-1, 0)] for j in range(3)],
        "a1_prev_rew": [[reward(1, t + s) if present(1, t + s) else 0.0 for s in (-2, -1)]],
        "a1_prev_rew_present": [[present(1, t + s) for s in (-2, -1)]],
        "others_act": [action(j, t) if present(j, t) else 0 for j in others],
        "others_act_present": [present(j, t) for j in others],
        "others_next_obs": [obs_of(ep, t + 1, j) for j in others],
        "others_next_obs_present": [present(j, t + 1) for j in others],
    }


def check(seen: dict[tuple[int, int, int], dict[str, np.ndarray]], names: list[str]) -> None:
    assert seen
    for (ep, t, i), views in seen.items():
        want = expected(ep, t, i)
        for name in names:
            got = views[name]
            assert np.array_equal(got, np.asarray(want[name])), (
                f"{name} of a{i} at episode {ep} step {t}: got {got.tolist()}, want {want[name]}"
            )


def run(requirements: dict[str, ViewRequirement], num_envs: int, n_step: int) -> Recorder:
    policy = Recorder(requirements)
    envs = MultiAgentVectorEnv([lambda k=k: Script(k) for k in range(num_envs)])
    buffer = make_buffer("replay", size=1000, num_envs=envs.num_slots)
    collector = MultiAgentCollector(policy, envs, buffer, seed=0)
    collector.collect(n_step=n_step)
    collector.collect(n_step=n_step)  # episodes go on into the next collect
    policy.update(0, buffer)
    return policy


def test_own_and_other_agents_views_while_acting_and_in_learn_batches() -> None:
    policy = run({**OWN, **OTHERS}, num_envs=2, n_step=12)
    # three episodes per env: starts (padding), a1 entering late, a2 leaving early, resets
    assert {ep for ep, _, _ in policy.acting} == {0, 1, 2, 10, 11, 12}
    assert (0, 0, 1) not in policy.acting and (0, 2, 2) not in policy.acting
    check(policy.acting, policy._names(True))
    check(policy.trained, policy._names(False))
    # every transition stored was trained on, with what it acted on
    assert set(policy.trained) == set(policy.acting)
    for key, views in policy.trained.items():
        for name, value in policy.acting[key].items():
            assert views[name].dtype == value.dtype, name
    views = policy.acting[(1, 3, 0)]
    assert views["others_obs"].shape == (2, 3) and views["others_obs_present"].dtype == bool
    assert views["all_obs_pair"].shape == (3, 2, 3)  # agents, then time


class Crowd(Script):
    """Up to three agents, each in the episode for one random stretch of env steps (so agents
    enter late, leave early, and an episode ends when nobody is left); observations and
    rewards as :class:`Script`'s, episodes of env ``k`` counted from ``100 * k``."""

    def __init__(self, k: int, agents: int, horizon: int) -> None:
        super().__init__(strict=False)
        self.possible_agents = list(AGENTS[:agents])
        self.episode = 100 * k - 1
        self.horizon = horizon
        self.rng = np.random.default_rng(k)

    def _obs(self, a: str) -> np.ndarray:
        return np.array([self.episode, self.t, AGENTS.index(a)], np.float32)

    def _present(self, i: int, t: int) -> bool:
        return bool(self.enter[i] <= t < min(self.leave[i], self.horizon))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        k = len(self.possible_agents)
        self.episode += 1
        self.t = 0
        self.enter = self.rng.integers(0, self.horizon, size=k)
        self.enter[self.rng.integers(k)] = 0
        self.leave = self.enter + self.rng.integers(1, self.horizon + 1, size=k)
        self.agents = [a for i, a in enumerate(self.possible_agents) if self._present(i, 0)]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        t0, self.t = self.t, self.t + 1
        rew, term, trunc = {}, {}, {}
        for a in actions:
            i = AGENTS.index(a)
            rew[a] = reward(i, t0)
            trunc[a] = self.t >= self.horizon
            term[a] = not trunc[a] and not self._present(i, self.t)
        self.agents = [a for i, a in enumerate(self.possible_agents) if self._present(i, self.t)]
        obs = {a: self._obs(a) for a in set(actions) | set(self.agents)}
        return obs, rew, term, trunc, {a: {} for a in obs}


def reference(acted: set[tuple[int, int, int]], key: tuple[int, int, int], k: int) -> dict:
    """What the views of ``key`` = (episode, t, agent) must be, given every (episode, t, agent)
    that acted: an agent is present at a step when it acted then."""
    ep, t, i = key
    here = lambda j, u: (ep, u, j) in acted  # noqa: E731
    obs = lambda j, u: [ep, u, j] if here(j, u) else [0, 0, 0]  # noqa: E731
    others = [j for j in range(k) if j != i]
    out = {
        "prev_act": action(i, t - 1) if here(i, t - 1) else 0,
        "prev_rew": reward(i, t - 1) if here(i, t - 1) else 0.0,
        "obs_hist": [obs(i, t + s) for s in (-2, -1, 0)],
        "all_obs_pair": [[obs(j, t + s) for s in (-1, 0)] for j in range(k)],
        "all_obs_pair_present": [[here(j, t + s) for s in (-1, 0)] for j in range(k)],
        "all_prev_act": [action(j, t - 1) if here(j, t - 1) else 0 for j in range(k)],
        "all_prev_act_present": [here(j, t - 1) for j in range(k)],
        "all_act": [action(j, t) if here(j, t) else 0 for j in range(k)],
        "all_act_present": [here(j, t) for j in range(k)],
        "others_next_obs": [obs(j, t + 1) for j in others],
        "others_next_obs_present": [here(j, t + 1) for j in others],
    }
    return out


@settings(max_examples=20, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    k=st.integers(2, 3),
    horizon=st.integers(1, 6),
    n_step=st.integers(1, 20),
)
def test_views_match_who_acted_when_agents_come_and_go(
    num_envs: int, k: int, horizon: int, n_step: int
) -> None:
    views = {
        **OWN,
        "all_obs_pair": OTHERS["all_obs_pair"],
        "all_prev_act": ViewRequirement("act", shift=-1, agents="all"),
        "all_act": ViewRequirement("act", agents="all", used_for_acting=False),
        "others_next_obs": OTHERS["others_next_obs"],
    }
    policy = Recorder(views)
    envs = MultiAgentVectorEnv([lambda e=e: Crowd(e, k, horizon) for e in range(num_envs)])
    buffer = make_buffer("replay", size=2000, num_envs=envs.num_slots)
    collector = MultiAgentCollector(policy, envs, buffer, seed=0)
    collector.collect(n_step=n_step)
    collector.collect(n_step=n_step)
    policy.update(0, buffer)
    collector.collect(n_step=1)  # who acts next: the trained steps' next observations
    acted = set(policy.acting)
    for seen, names in (
        (policy.acting, policy._names(True)),
        (policy.trained, policy._names(False)),
    ):
        assert seen
        for key, got in seen.items():
            want = reference(acted, key, k)
            for name in names:
                assert np.array_equal(got[name], np.asarray(want[name])), (key, name, got[name])


def test_random_warm_up_steps_store_views_too() -> None:
    policy = Recorder({**OWN, **OTHERS})
    envs = MultiAgentVectorEnv([lambda: Script(0, strict=False)])
    buffer = make_buffer("replay", size=1000, num_envs=envs.num_slots)
    collector = MultiAgentCollector(policy, envs, buffer, seed=0)
    collector.collect(n_step=7, random=True)
    assert not policy.acting
    collector.collect(n_step=3)
    policy.update(0, buffer)
    assert len(policy.trained) == len(buffer)
    # the random actions are unknown here: the views of observations and every presence mask
    names = [n for n in policy._names(False) if "obs" in n or n.endswith("_present")]
    check(policy.trained, names)


def test_each_policy_of_a_mapping_gets_its_own_views() -> None:
    """a0 has its own policy, a1 and a2 share one: each builds and stores its own views."""
    policies = {"lead": Recorder({**OWN, **OTHERS}), "rest": Recorder({**OTHERS, **OWN})}
    envs = MultiAgentVectorEnv([lambda k=k: Script(k) for k in range(2)])
    buffers = {n: make_buffer("replay", size=1000, num_envs=envs.num_slots) for n in policies}
    mapping = {"a0": "lead", "a1": "rest", "a2": "rest"}
    collector = MultiAgentCollector(policies, envs, buffers, mapping=mapping, seed=0)
    collector.collect(n_step=16)
    for name, policy in policies.items():
        policy.update(0, buffers[name])
        assert {i for _, _, i in policy.acting} == ({0} if name == "lead" else {1, 2})
        check(policy.acting, policy._names(True))
        check(policy.trained, policy._names(False))


def test_views_reach_an_on_policy_learn_batch_with_their_masks() -> None:
    from rlblocks.algo import OnPolicyConfig, OnPolicyPolicy

    class OnPolicyRecorder(OnPolicyPolicy):
        def learn(self, batch: Any, **kwargs: Any) -> dict[str, float]:
            self.got = {k: v.cpu().numpy() for k, v in batch.items() if "others" in k}
            self.obs = batch["obs"].cpu().numpy()
            return {}

    env = Script()
    policy = OnPolicyRecorder(
        env.observation_space("a0"), env.action_space("a0"), OnPolicyConfig(), device="cpu"
    )
    policy.view_requirements = {"others_act": OTHERS["others_act"]}
    envs = MultiAgentVectorEnv([lambda: Script(strict=False)])
    buffer = make_buffer("replay", size=100, num_envs=envs.num_slots)
    MultiAgentCollector(policy, envs, buffer, seed=0).collect(n_step=HORIZON)
    policy.update(0, buffer)
    assert set(policy.got) == {"others_act", "others_act_present"}
    # the random policy's actions are unknown here; the presence mask follows the script
    for row, (_, t, i) in enumerate(policy.obs.astype(int).tolist()):
        others = [j for j in range(3) if j != i]
        assert policy.got["others_act_present"][row].tolist() == [present(j, t) for j in others]
        absent = ~policy.got["others_act_present"][row]
        assert (policy.got["others_act"][row][absent] == 0).all()


def test_bad_agent_views_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="use 'others', 'all'"):
        ViewRequirement("obs", agents="other")
    with pytest.raises(ConfigError, match="non-empty list"):
        ViewRequirement("obs", agents=[])
    with pytest.raises(ConfigError, match="drop pad"):
        ViewRequirement("obs", shift=-1, agents="others", pad="edge")
    envs = MultiAgentVectorEnv([Script])
    cases = {
        # the others choose their actions in the same forward pass
        "same step": (ViewRequirement("act", agents="others"), "used_for_acting=False"),
        "future obs": (ViewRequirement("obs", shift=1, agents="all"), "used_for_acting=False"),
        "too far": (
            ViewRequirement("act", shift=1, agents="others", used_for_acting=False),
            "known up to shift 0",
        ),
        "column": (ViewRequirement("info.x", agents="others"), "read obs"),
        "unknown agent": (ViewRequirement("obs", agents=["b*"]), "match no agent"),
    }
    for case, (req, words) in cases.items():
        with pytest.raises(ConfigError, match=words) as err:
            MultiAgentCollector(Recorder({"v": req}), envs)
        assert "\n" not in str(err.value), case
    with pytest.raises(ConfigError, match="presence mask"):
        MultiAgentCollector(
            Recorder({"v": OTHERS["others_obs"], "v_present": OWN["prev_act"]}), envs
        )


def test_other_agents_views_in_a_single_agent_run_are_refused_in_one_line() -> None:
    class Probe(BasePolicy):
        def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
            return Batch(act=np.zeros(len(batch.obs), dtype=np.int64))

        def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
            return {}

    probe = ProbeEnv(0)
    policy = Probe(probe.observation_space, probe.action_space)
    policy.view_requirements = {"x": ViewRequirement("obs", agents="others", used_for_acting=False)}
    with pytest.raises(ConfigError, match="only a multi-agent") as err:
        Collector(policy, DummyVectorEnv(probe_env_fns(1)))
    assert "\n" not in str(err.value)


def test_changed_acting_views_are_refused_at_the_next_collect() -> None:
    policy = Recorder(OWN)
    collector = MultiAgentCollector(policy, MultiAgentVectorEnv([Script]), seed=0)
    collector.collect(n_step=2)
    policy.view_requirements["more"] = ViewRequirement("obs", agents="others")
    with pytest.raises(ConfigError, match="changed after the collector was built"):
        collector.collect(n_step=2)


class Alternate(AECEnv):
    """Two agents taking turns for :data:`HORIZON` + 1 turns; observation ``[episode, turn,
    agent]`` (episodes of env ``k`` count from ``10 * k``); the acting agent is paid its
    action."""

    metadata: ClassVar[dict[str, Any]] = {"name": "alternate_v0", "render_modes": []}
    render_mode = None

    def __init__(self, k: int = 0) -> None:
        super().__init__()
        self.possible_agents = ["a0", "a1"]
        self.episode = 10 * k - 1

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(-1e3, 1e3, (3,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(10)

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self.episode, self.turn, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.episode += 1
        self.turn = 0
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action: Any) -> None:
        a = self.agent_selection
        if self.terminations[a] or self.truncations[a]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[a] = 0.0
        for b in self.agents:
            self.rewards[b] = float(action) if b == a else 0.0
        self.turn += 1
        if self.turn > HORIZON:
            self.truncations = {b: True for b in self.agents}
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


def test_own_views_follow_each_agents_turns_in_an_aec_env() -> None:
    policy = Recorder({**OWN, "obs_pair": ViewRequirement("obs", shift=[-1, 0])})
    envs = MultiAgentVectorEnv([lambda: Alternate(0), lambda: Alternate(1)])
    buffer = make_buffer("replay", size=1000, num_envs=envs.num_slots)
    collector = MultiAgentCollector(policy, envs, buffer, seed=0, count_steps_by="agent_steps")
    collector.collect(n_step=17)
    collector.collect(n_step=17)
    policy.update(0, buffer)
    assert {ep for ep, _, _ in policy.acting} == {0, 1, 2, 10, 11, 12}
    for seen in (policy.acting, policy.trained):
        assert seen
        for (ep, t, i), views in seen.items():
            before = t - 2  # the agent's previous turn, a lap of two turns ago
            had = before >= 0
            assert views["prev_act"] == (action(i, before) if had else 0), (ep, t, i)
            assert views["prev_rew"] == (action(i, before) if had else 0), (ep, t, i)
            assert views["obs_pair"].tolist() == [[ep, before, i] if had else [0, 0, 0], [ep, t, i]]
            want = [[ep, t + s, i] if t + s >= 0 else [0, 0, 0] for s in (-4, -2, 0)]
            assert views["obs_hist"].tolist() == want, (ep, t, i)
    with pytest.raises(ConfigError, match="AEC env"):
        MultiAgentCollector(Recorder({"o": OTHERS["others_obs"]}), envs)


@pytest.mark.parametrize("backend", ["dummy", "subproc", "shmem"])
def test_view_histories_survive_a_checkpoint_of_snapshotted_envs(backend: str) -> None:
    """Resumed mid-episode in new envs (in process or in new worker processes), a collector
    hands the policy the views the original would have: the histories are saved with the
    episodes in progress."""
    import functools

    from rlblocks.run._checkpoint import from_plain, to_plain
    from rlblocks_family_pettingzoo.remote import make_remote_multiagent_env

    make = functools.partial(Script, 0)
    if backend == "dummy":  # envs stepped in this process
        pair = (MultiAgentVectorEnv([make]), MultiAgentVectorEnv([make]))
    else:
        pair = (
            make_remote_multiagent_env(backend, make, 1),
            make_remote_multiagent_env(backend, make, 1),
        )
    with pair[0] as first, pair[1] as second:
        original = MultiAgentCollector(Recorder({**OWN, **OTHERS}), first, seed=0)
        original.collect(n_step=7)  # into the second episode, step 2
        state = from_plain(to_plain(original.state_dict()))
        assert state["envs"] is not None, state["why"]
        resumed = MultiAgentCollector(Recorder({**OWN, **OTHERS}), second, seed=1)
        assert resumed.load_state_dict(state) == ""
        original.collect(n_step=5)
        resumed.collect(n_step=5)
    after = resumed.policy.acting
    # the episode in progress goes on (its step 2 onwards), then the next one starts
    rest = {(1, t, i) for t in range(2, HORIZON) for i in range(3) if present(i, t)}
    assert rest < set(after) and min(after)[0] == 1
    check(after, resumed.policy._names(True))
    for key, views in after.items():
        for name, value in views.items():
            assert np.array_equal(value, original.policy.acting[key][name]), (key, name)


class Guess(ParallelEnv):
    """Two agents each see a private coin; each is paid 1 for naming the other's coin. One
    step per episode: only a view of the other's observation can do better than chance."""

    metadata: ClassVar[dict[str, Any]] = {"name": "guess_v0", "render_modes": []}
    render_mode = None

    def __init__(self) -> None:
        self.possible_agents = ["a0", "a1"]
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0, 1, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.coins = self.rng.integers(2, size=2)
        obs = {a: np.eye(2, dtype=np.float32)[c] for a, c in zip(self.agents, self.coins)}
        return obs, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        other = {"a0": self.coins[1], "a1": self.coins[0]}
        rew = {a: float(int(actions[a]) == other[a]) for a in self.agents}
        obs = {a: np.zeros(2, np.float32) for a in self.agents}
        done = {a: True for a in self.agents}
        self.agents = []
        return obs, rew, done, {a: False for a in obs}, {a: {} for a in obs}


class Bandit(BasePolicy):
    """A softmax policy on ``[own obs, the other's obs]`` learned by REINFORCE with a 0.5
    baseline; ``blind`` zeroes the other's observation (the control)."""

    def __init__(self, blind: bool) -> None:
        import torch

        env = Guess()
        super().__init__(env.observation_space("a0"), env.action_space("a0"))
        self.blind = blind
        self.view_requirements = {"other": ViewRequirement("obs", agents="others")}
        self.net = torch.nn.Linear(4, 2)
        self.optim = torch.optim.Adam(self.net.parameters(), lr=0.05)

    def _logits(self, obs: Any, other: Any) -> Any:
        import torch

        other = torch.as_tensor(np.asarray(other), dtype=torch.float32).reshape(len(obs), -1)
        if self.blind:
            other = torch.zeros_like(other)
        x = torch.cat([torch.as_tensor(np.asarray(obs), dtype=torch.float32), other], 1)
        return self.net(x)

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        import torch

        logits = self._logits(batch.obs, batch.other)
        if self.training:
            act = torch.distributions.Categorical(logits=logits).sample()
        else:
            act = logits.argmax(1)
        return Batch(act=act.numpy(), state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        import torch

        assert np.asarray(batch.other_present).all()  # both agents act at every step
        logp = torch.log_softmax(self._logits(batch.obs, batch.other), 1)
        taken = logp.gather(1, torch.as_tensor(np.asarray(batch.act))[:, None])[:, 0]
        adv = torch.as_tensor(np.asarray(batch.rew), dtype=torch.float32) - 0.5
        loss = -(taken * adv).mean()
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return {"loss": float(loss.detach())}


@pytest.mark.parametrize("blind", [False, True])
def test_a_policy_learns_from_the_other_agents_observation(blind: bool) -> None:
    import torch

    torch.manual_seed(0)
    policy = Bandit(blind)
    envs = MultiAgentVectorEnv([Guess] * 8)
    buffer = make_buffer("replay", size=200, num_envs=envs.num_slots)
    collector = MultiAgentCollector(policy, envs, buffer, seed=0)
    for _ in range(60):
        collector.collect(n_step=8)
        policy.update(0, buffer)
        buffer.reset()
    policy.eval()
    tester = MultiAgentCollector(policy, MultiAgentVectorEnv([Guess] * 8), seed=1)
    stats = tester.collect(n_episode=200)
    rate = float(stats.returns.mean())  # each agent's return is 1 when it named the coin
    if blind:
        assert rate < 0.7, rate  # chance: the own coin says nothing of the other's
    else:
        assert rate >= 0.95, rate
