"""Fixtures the algorithm tests share."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlblocks.algo import BasePolicy
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer


@pytest.fixture
def random_buffer() -> Callable[..., ReplayBuffer]:
    """``make(act_space, n=64)``: a one-env buffer of ``n`` random, unfinished transitions with
    3-float observations and actions from ``act_space`` (seeded, so every call is the same)."""

    def make(act_space: gym.Space, n: int = 64) -> ReplayBuffer:
        rng = np.random.default_rng(0)
        act_space.seed(0)
        buf = ReplayBuffer(n)
        for _ in range(n):
            buf.add(
                Batch(
                    obs=rng.uniform(-1, 1, 3).astype(np.float32),
                    act=np.asarray(act_space.sample()),
                    rew=float(rng.normal()),
                    terminated=False,
                    truncated=False,
                    obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
                )
            )
        return buf

    return make


@pytest.fixture
def episode_buffer() -> Callable[..., ReplayBuffer]:
    """``make(episode, act=lambda t: t % 2)``: a one-env buffer of one episode whose step ``t``
    has obs ``[t, 0, 0]``, obs_next ``[t + 1, 0, 0]`` (float32) and action ``act(t)``;
    ``episode`` lists (rew, terminated, truncated) per step."""

    def make(
        episode: list[tuple[float, bool, bool]], act: Callable[[int], Any] = lambda t: t % 2
    ) -> ReplayBuffer:
        buf = ReplayBuffer(32)
        for t, (rew, term, trunc) in enumerate(episode):
            buf.add(
                Batch(
                    obs=np.array([t, 0, 0], np.float32),
                    act=act(t),
                    rew=rew,
                    terminated=term,
                    truncated=trunc,
                    obs_next=np.array([t + 1, 0, 0], np.float32),
                )
            )
        return buf

    return make


@pytest.fixture
def quantile_huber_reference() -> Callable[..., float]:
    """``loss(pred, target, taus, kappa, probs=None)``: the quantile Huber loss of one sample,
    written out loop by loop. Quantile ``i`` at fraction ``taus[i]`` predicts ``pred[i]``; target
    sample ``j`` weighs ``probs[j]`` (default: all equal); ``kappa == 0`` is the plain quantile
    loss. The Huber term is divided by ``kappa``, as QR-DQN, IQN and FQF define it."""

    def loss(
        pred: np.ndarray,
        target: np.ndarray,
        taus: np.ndarray,
        kappa: float,
        probs: np.ndarray | None = None,
    ) -> float:
        probs = np.full(len(target), 1 / len(target)) if probs is None else probs
        total = 0.0
        for i, tau in enumerate(taus):
            for z, prob in zip(target, probs):
                u = z - pred[i]
                if kappa == 0:  # the plain quantile loss
                    huber = abs(u)
                elif abs(u) <= kappa:
                    huber = 0.5 * u * u / kappa
                else:
                    huber = abs(u) - 0.5 * kappa
                total += prob * abs(tau - (1.0 if u < 0 else 0.0)) * huber
        return total

    return loss


@pytest.fixture(scope="session")
def _pendulum_td3_once() -> tuple[ReplayBuffer, Any]:
    """The dataset of :func:`pendulum_td3_replay` and the TD3 policy that wrote it, built once
    per session."""
    pytest.importorskip("rlblocks_algo_td3")
    import rlblocks
    from rlblocks.collect import Collector
    from rlblocks.trainers import OffPolicyTrainer

    torch.manual_seed(0)
    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=4, seed=0)
    try:
        # TD3's settings of its Pendulum preset, exploring within the bounds
        td3 = rlblocks.make_policy(
            "td3", envs.observation_space, envs.action_space, n_step=3, clip_exploration=True,
            hidden_sizes=[64, 64], actor_lr=1e-3, critic_lr=1e-3,
        )  # fmt: skip
        td3.seed(0)
        data = rlblocks.make_buffer("replay", size=10_000, num_envs=4, seed=0)
        OffPolicyTrainer(
            td3, Collector(td3, envs, data, seed=0), None, data,
            max_env_steps=10_000, step_per_collect=4, batch_size=128, warmup_steps=1_000,
        ).run()  # fmt: skip
    finally:
        envs.close()
    assert len(data) == 10_000
    return data, td3


@pytest.fixture(scope="session")
def _pendulum_td3_play_once(_pendulum_td3_once: tuple[ReplayBuffer, Any]) -> ReplayBuffer:
    """The dataset of :func:`pendulum_td3_expert_play`, built once per session."""
    import rlblocks
    from rlblocks.collect import Collector

    td3 = copy.deepcopy(_pendulum_td3_once[1])
    td3.train()  # acting with TD3's exploration noise (0.1 of the action range)
    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=4, seed=5)
    try:
        data = rlblocks.make_buffer("replay", size=10_000, num_envs=4, seed=0)
        stats = Collector(td3, envs, data, seed=5).collect(n_step=10_000)
    finally:
        envs.close()
    assert len(data) == 10_000 and stats.mean_return > -250  # the trained agent, noise and all
    return data


@pytest.fixture
def pendulum_td3_expert_play(_pendulum_td3_play_once: ReplayBuffer) -> ReplayBuffer:
    """A narrow "expert" dataset (D4RL's kind): 10,000 env steps (4 envs) of the trained TD3
    policy of :func:`pendulum_td3_replay`'s run playing with its exploration noise (episodes
    average about -155). It covers few actions per state, so an offline learner that trusts Q
    on the actions the data never took goes wrong. Each test gets its own copy."""
    return copy.deepcopy(_pendulum_td3_play_once)


@pytest.fixture
def pendulum_td3_replay(_pendulum_td3_once: tuple[ReplayBuffer, Any]) -> ReplayBuffer:
    """A "replay" dataset (D4RL's kind) for the offline algorithms: the whole buffer of an
    online TD3 run on Pendulum-v1 (10,000 env steps over 4 envs: 1,000 random, then a learner
    going from about -1,300 to about -150), seeded. Each test gets its own copy, the sampler's
    random state included, so what one test samples does not change another's batches; the
    TD3 run itself happens once per session (about 40 s of CPU)."""
    return copy.deepcopy(_pendulum_td3_once[0])


# -- scripted experts: datasets for imitation and offline learning, in a second -------------------
class ScriptedExpert(BasePolicy):
    """A hand-written controller played as a policy, so a Collector records it like any agent:
    ``control(obs)`` gives actions in the policy's units ([-1, 1] for Box actions), with
    Gaussian noise of std ``noise`` (Box) or ``eps`` of the actions uniformly random (Discrete),
    drawn from its own generator seeded with ``seed``."""

    def __init__(
        self, envs: Any, control: Callable[[np.ndarray], np.ndarray], noise: float = 0.0,
        eps: float = 0.0, seed: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(envs.observation_space, envs.action_space)
        self.control, self.noise, self.eps = control, noise, eps
        self.seed(seed)

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        act = self.control(np.asarray(batch.obs))
        box = isinstance(self.action_space, gym.spaces.Box)
        if box and self.noise:
            act = np.clip(act + self._rng.normal(0.0, self.noise, act.shape), -1.0, 1.0)
        if not box and self.eps:
            n = int(self.action_space.n)  # type: ignore[attr-defined]
            random = self._rng.random(len(act)) < self.eps
            act = np.where(random, self._rng.integers(0, n, len(act)), act)
        return Batch(act=act.astype(np.float32 if box else np.int64), state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        raise NotImplementedError("a scripted expert does not learn")


def pendulum_expert(obs: np.ndarray) -> np.ndarray:
    """Pendulum-v1: swing up by energy pumping, then a PD controller near the top. The dynamics
    are ``theta'' = 15 sin(theta) + 3 u`` (theta = 0 upright), so ``H = theta'^2 / 2 + 15 (cos
    theta - 1)`` is 0 at rest upright and ``dH/dt = 3 u theta'``: full torque along the motion
    while H < 0 adds energy. About -140 per 200-step episode (a trained SAC agent: about -150)."""
    cos, sin, speed = obs[:, 0], obs[:, 1], obs[:, 2]
    theta = np.arctan2(sin, cos)
    energy = 0.5 * speed**2 + 15.0 * (cos - 1.0)
    pump = np.where(energy < 0, 2.0, -2.0) * np.sign(speed + 1e-6)
    torque = np.where(cos > 0.9, -(10.0 * theta + 2.0 * speed), pump)
    return (np.clip(torque, -2.0, 2.0) / 2.0)[:, None]  # [-1, 1]: the policy's units


def cartpole_expert(obs: np.ndarray) -> np.ndarray:
    """CartPole-v1: push towards where the pole falls, with a little of the cart's position and
    speed: 500 (the most) in every episode."""
    x, speed, angle, spin = obs.T
    return (angle + 0.5 * spin + 0.05 * x + 0.1 * speed > 0).astype(np.int64)


EXPERTS = {"Pendulum-v1": pendulum_expert, "CartPole-v1": cartpole_expert}


@pytest.fixture(scope="session")
def _scripted_plays() -> dict[tuple[Any, ...], tuple[ReplayBuffer, float]]:
    return {}


@pytest.fixture
def scripted_play(
    _scripted_plays: dict[tuple[Any, ...], tuple[ReplayBuffer, float]],
) -> Callable[..., tuple[ReplayBuffer, float]]:
    """``play(env_id, steps, noise=0.0, eps=0.0)``: ``steps`` transitions (10 envs, seeded) of
    the scripted expert of ``env_id`` (Pendulum-v1 or CartPole-v1, see :data:`EXPERTS`) and its
    mean episode return. Each play is recorded once per session (a second or two); every call
    gets its own copy of the buffer."""

    def play(
        env_id: str, steps: int, noise: float = 0.0, eps: float = 0.0
    ) -> tuple[ReplayBuffer, float]:
        key = (env_id, steps, noise, eps)
        if key not in _scripted_plays:
            import rlblocks
            from rlblocks.collect import Collector

            envs = rlblocks.make_vector_env("dummy", env_id, num_envs=10, seed=1)
            try:
                data = rlblocks.make_buffer("replay", size=steps, num_envs=10, seed=0)
                expert = ScriptedExpert(envs, EXPERTS[env_id], noise=noise, eps=eps, seed=0)
                stats = Collector(expert, envs, data, exploration=False, seed=1).collect(
                    n_step=steps
                )
            finally:
                envs.close()
            _scripted_plays[key] = (data, float(np.mean(stats.returns)))
        data, mean = _scripted_plays[key]
        return copy.deepcopy(data), mean

    return play


# -- mixtures of a scripted expert and poor actions: datasets behaviour cloning cannot learn from --
def mixture_dataset(
    env_id: str,
    poor: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    poor_share: float,
    steps: int,
    seed: int = 0,
) -> tuple[ReplayBuffer, float]:
    """``steps`` transitions of one ``env_id`` env played by its scripted expert
    (:data:`EXPERTS`) with each action replaced by one of ``poor`` (given the observation
    batch ``[1, ...]`` and a generator) with probability ``poor_share``; actions in the
    policy's units ([-1, 1] for Box, indices for Discrete). Returns the buffer and the mean
    return of the episodes finished meanwhile."""
    rng = np.random.default_rng(seed)
    env = gym.make(env_id)
    box = isinstance(env.action_space, gym.spaces.Box)
    low, high = (env.action_space.low, env.action_space.high) if box else (0, 0)
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "rew", "terminated", "truncated")}
    rows["obs_next"] = []
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    episode_return = 0.0
    for _ in range(steps):
        row = obs[None]
        act = poor(row, rng)[0] if rng.random() < poor_share else EXPERTS[env_id](row)[0]
        env_act = low + (high - low) * (act + 1.0) / 2.0 if box else int(act)
        obs_next, rew, terminated, truncated, _ = env.step(env_act)
        for key, value in (("obs", obs), ("act", act), ("rew", rew), ("terminated", terminated),
                           ("truncated", truncated), ("obs_next", obs_next)):  # fmt: skip
            rows[key].append(value)
        episode_return += float(rew)
        obs = obs_next
        if terminated or truncated:
            returns.append(episode_return)
            episode_return = 0.0
            obs, _ = env.reset()
    env.close()
    buf = ReplayBuffer(steps, seed=seed)
    columns = {key: np.asarray(values) for key, values in rows.items()}
    columns["rew"] = columns["rew"].astype(np.float32)
    if box:
        columns["act"] = columns["act"].astype(np.float32)
    buf.extend(Batch(**columns), np.zeros(steps, np.int64))
    return buf, float(np.mean(returns)) if returns else float("nan")


#: the poor actions of each env's mixture
POOR_ACTIONS: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    # uniformly random torques
    "Pendulum-v1": lambda o, rng: rng.uniform(-1.0, 1.0, (len(o), 1)).astype(np.float32),
    # "push left": a biased poor policy, so greedy behaviour cloning pushes left too
    "CartPole-v1": lambda o, rng: np.zeros(len(o), np.int64),
}


@pytest.fixture(scope="session")
def _mixtures() -> dict[tuple[Any, ...], tuple[ReplayBuffer, float]]:
    return {}


@pytest.fixture(scope="session")
def controller_mixture(
    _mixtures: dict[tuple[Any, ...], tuple[ReplayBuffer, float]],
) -> Callable[..., tuple[ReplayBuffer, float]]:
    """``make(env_id, poor_share, steps=10_000, seed=0) -> (buffer, mean episode return)``:
    Pendulum-v1 or CartPole-v1 played by its scripted expert (:data:`EXPERTS`) with a share
    of its actions replaced by poor ones (:data:`POOR_ACTIONS`: random torques; "push left").
    Behaviour cloning of such a mixture copies the poor actions along with the good ones; an
    algorithm that weighs the dataset's actions by a critic can pick the good ones out. Each
    dataset is made once per session (a second); every call gets its own copy."""

    def make(
        env_id: str, poor_share: float, steps: int = 10_000, seed: int = 0
    ) -> tuple[ReplayBuffer, float]:
        key = (env_id, poor_share, steps, seed)
        if key not in _mixtures:
            _mixtures[key] = mixture_dataset(env_id, POOR_ACTIONS[env_id], poor_share, steps, seed)
        data, mean_return = _mixtures[key]
        return copy.deepcopy(data), mean_return

    return make


def train_offline(
    algo: str,
    env_id: str,
    data: ReplayBuffer,
    max_gradient_steps: int,
    stop_reward: float | None = None,
    seed: int = 1,
    **algo_options: Any,
) -> tuple[Any, Any]:
    """Train ``algo`` (made with ``algo_options``) on ``data`` with the OfflineTrainer: batches
    of 128 (the sampler seeded with ``seed``), a test of 10 episodes on 10 envs of ``env_id``
    every 1,000 gradient steps, until a test reaches ``stop_reward`` or the budget is spent.
    Returns the result and the policy."""
    import rlblocks
    from rlblocks.collect import Collector
    from rlblocks.trainers import OfflineTrainer

    test_envs = rlblocks.make_vector_env("dummy", env_id, num_envs=10, seed=100)
    try:
        torch.manual_seed(seed)
        data.seed(seed)
        policy = rlblocks.make_policy(
            algo, test_envs.observation_space, test_envs.action_space, **algo_options
        )
        result = OfflineTrainer(
            policy,
            Collector(policy, test_envs, None, exploration=False, seed=100),
            data,
            max_gradient_steps=max_gradient_steps,
            batch_size=128,
            test_interval=1_000,
            test_episodes=10,
            stop_reward=stop_reward,
        ).run()
        return result, policy
    finally:
        test_envs.close()


@pytest.fixture
def offline_run() -> Callable[..., tuple[Any, Any]]:
    """:func:`train_offline`: ``run(algo, env_id, data, max_gradient_steps, stop_reward=None,
    seed=1, **algo_options) -> (result, policy)``."""
    return train_offline
