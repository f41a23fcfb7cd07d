"""Discrete BCQ: the threshold filter on the behaviour-cloning model, the target (the online
network's best allowed action valued by the target network), the loss, acting among the allowed
actions, config checks, an exact continuation from saved state, a run from the command line, and
CartPole learned offline from an epsilon-noisy scripted controller, where the same learner with
every action allowed (threshold 0: offline double DQN) fails."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlblocks
from rlblocks.algo import BasePolicy
from rlblocks.collect import Collector
from rlblocks.contracts import Batch
from rlblocks.plugins import FIRST_PARTY, get_registry
from rlblocks.replay import ReplayBuffer
from rlblocks.trainers import OfflineTrainer

OBS = gym.spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
ACT = gym.spaces.Discrete(3)
SMALL = dict(hidden_sizes=[16])


def data_buffer(n: int = 64, action: Any = None, rew: float = 0.0) -> ReplayBuffer:
    """``n`` unfinished transitions with 4-float observations, reward ``rew`` and the action
    ``action`` (an int, or None: uniformly random), seeded."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    for _ in range(n):
        buf.add(
            Batch(
                obs=rng.uniform(-1, 1, 4).astype(np.float32),
                act=int(rng.integers(0, 3)) if action is None else action,
                rew=rew,
                terminated=False,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 4).astype(np.float32),
            )
        )
    return buf


def fixed_samples(buf: ReplayBuffer, idx: np.ndarray) -> None:
    """Make ``buf`` draw rows ``idx`` at every sample."""
    buf.sampler.sample_index = lambda n: idx


# -- the spec and the config ----------------------------------------------------------------------
def test_spec_is_an_offline_first_party_algorithm() -> None:
    spec = get_registry("algo").spec("discrete-bcq")
    assert spec.training == "offline" and spec.action_spaces == ("Discrete",)
    assert spec.networks == ("encoder", "actor", "critic")
    assert spec.defaults["trainer"]["max_gradient_steps"] == 1_000_000
    assert "discrete-bcq" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries()
            if e.name == "discrete-bcq"] == ["rlblocks-algo-discrete-bcq"]  # fmt: skip


def test_defaults_are_the_papers_and_the_preset_the_authors_vector_settings() -> None:
    c = rlblocks.make_policy("discrete-bcq", OBS, ACT).config
    assert (c.threshold, c.lr, c.adam_eps, c.gamma, c.n_step) == (0.3, 6.25e-5, 1.5e-4, 0.99, 1)
    assert (c.tau, c.target_update_interval, c.loss) == (None, 8_000, "huber")
    assert (c.hidden_sizes, c.imitation_logit_penalty, c.eps_test) == ([256, 256], 0.01, 0.0)
    from rlblocks.run import build_config, spec_lookup

    preset = build_config("discrete-bcq", spec_lookup=spec_lookup)
    assert (preset.algo.lr, preset.algo.adam_eps, preset.algo.tau) == (3e-4, 1e-8, 0.005)
    assert preset.algo.threshold == 0.3 and preset.trainer.batch_size == 64


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"threshold": 1.0}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"lr": 0.0}, "lr"),
        ({"target_update_interval": 0}, "target_update_interval"),
        ({"loss": "l1"}, "loss"),
        ({"imitation_logit_penalty": -1.0}, "imitation_logit_penalty"),
        ({"tau": 0.0}, "tau"),
    ],
)
def test_bad_settings_are_refused_by_field(options: dict, field: str) -> None:
    with pytest.raises(rlblocks.ConfigError, match=field):
        rlblocks.make_policy("discrete-bcq", OBS, ACT, **options)


def test_box_actions_are_refused() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    with pytest.raises(rlblocks.ConfigError, match="action spaces"):
        rlblocks.make_policy("discrete-bcq", OBS, box)
    from rlblocks_algo_discrete_bcq.discrete_bcq import DiscreteBCQPolicy

    with pytest.raises(TypeError, match="use bcq"):
        DiscreteBCQPolicy(OBS, box)


# -- 2. the threshold filter ----------------------------------------------------------------------
def test_an_action_is_allowed_when_its_probability_over_the_best_passes_the_threshold() -> None:
    from rlblocks_algo_discrete_bcq.discrete_bcq import allowed_actions

    probs = torch.tensor([[0.5, 0.25, 0.125, 0.1, 0.025], [0.025, 0.1, 0.125, 0.25, 0.5]])
    logits = probs.log() + torch.tensor([[3.0], [-7.0]])  # any shift: the same distribution
    # ratios to the most likely action: 1, 0.5, 0.25, 0.2, 0.05
    want = torch.tensor([[True, True, False, False, False], [False, False, False, True, True]])
    assert torch.equal(allowed_actions(logits, 0.3), want)
    assert allowed_actions(logits, 0.0).all()  # threshold 0: every action (DQN)
    third = torch.tensor([False, False, True, False, False])  # ratio 0.25 passes 0.22
    assert torch.equal(allowed_actions(logits, 0.22), want | third)
    only_best = allowed_actions(logits, 0.99)
    assert torch.equal(only_best, probs == probs.max(dim=1, keepdim=True).values)


def test_the_filter_is_the_ratio_of_softmax_probabilities() -> None:
    from rlblocks_algo_discrete_bcq.discrete_bcq import allowed_actions

    logits = torch.randn(256, 6, generator=torch.Generator().manual_seed(0)) * 2.0
    probs = torch.softmax(logits, dim=1)
    for threshold in (0.05, 0.3, 0.7):
        ratio = probs / probs.max(dim=1, keepdim=True).values
        away = (ratio - threshold).abs() > 1e-5  # not on the edge, where rounding decides
        got = allowed_actions(logits, threshold)
        assert torch.equal(got[away], (ratio > threshold)[away])
        assert got.any(dim=1).all()  # the most likely action always is


def test_the_best_allowed_action_skips_a_higher_q_that_is_not_allowed() -> None:
    from rlblocks_algo_discrete_bcq.discrete_bcq import best_allowed

    q = torch.tensor([[5.0, 1.0, 2.0], [0.0, -1.0, -3.0]])
    allowed = torch.tensor([[False, True, True], [False, True, True]])
    assert best_allowed(q, allowed).tolist() == [2, 1]
    assert best_allowed(q, torch.ones_like(allowed)).tolist() == [0, 0]


# -- 3. the target --------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.9])
def test_the_target_values_the_online_networks_best_allowed_action_with_the_target_network(
    threshold: float,
) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("discrete-bcq", OBS, ACT, threshold=threshold, **SMALL)
    with torch.no_grad():  # a target network that differs from the online one
        for p in policy.target.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    obs_next = torch.randn(64, 4) * 3
    value = policy.target_value(obs_next)
    with torch.no_grad():
        q, logits = policy.model(obs_next)
        probs = torch.softmax(logits, dim=1)
        allowed = probs / probs.max(dim=1, keepdim=True).values > threshold
        best = torch.where(allowed, q, torch.full_like(q, -1e9)).argmax(dim=1)
        q_target, _ = policy.target.net(obs_next)
    torch.testing.assert_close(value, q_target[torch.arange(64), best])
    if threshold == 0.0:  # double DQN
        torch.testing.assert_close(value, q_target[torch.arange(64), q.argmax(dim=1)])


def test_the_n_step_target_is_processed_with_the_discount() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("discrete-bcq", OBS, ACT, gamma=0.9, **SMALL)
    buf = data_buffer(rew=1.0)
    idx = np.arange(16)
    batch = policy.process_fn(buf[idx], buf, idx)
    with torch.no_grad():
        value = policy.target_value(torch.as_tensor(buf.obs_next[:16]))
    torch.testing.assert_close(batch.returns, 1.0 + 0.9 * value)


# -- 4. the loss -----------------------------------------------------------------------------------
def test_the_loss_is_huber_plus_cross_entropy_plus_the_logit_penalty() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("discrete-bcq", OBS, ACT, imitation_logit_penalty=0.5, **SMALL)
    before = copy.deepcopy(policy)
    buf = data_buffer()
    idx = np.arange(32)
    batch = policy.process_fn(buf[idx], buf, idx)
    returns = batch.returns.clone()
    stats = policy.learn(batch)
    with torch.no_grad():
        q, logits = before.model(torch.as_tensor(buf.obs[:32]))
        act = torch.as_tensor(buf.act[:32]).long()
        huber = F.smooth_l1_loss(q[torch.arange(32), act], returns)
        ce = -torch.log_softmax(logits, dim=1)[torch.arange(32), act].mean()
        expected = huber + ce + 0.5 * logits.pow(2).mean()
    torch.testing.assert_close(stats["loss/td"], huber)
    torch.testing.assert_close(stats["loss/imitation"], ce)
    torch.testing.assert_close(stats["loss"], expected)


def test_the_target_network_is_a_hard_copy_every_interval_or_moves_tau() -> None:
    torch.manual_seed(0)
    hard = rlblocks.make_policy("discrete-bcq", OBS, ACT, target_update_interval=3, **SMALL)
    first = [p.clone() for p in hard.target.parameters()]
    buf = data_buffer()
    for _ in range(2):
        hard.update(16, buf)
    assert all(torch.equal(a, b) for a, b in zip(first, hard.target.parameters()))
    hard.update(16, buf)
    assert all(torch.equal(a, b) for a, b in zip(hard.model.parameters(),
                                                 hard.target.parameters()))  # fmt: skip
    soft = rlblocks.make_policy("discrete-bcq", OBS, ACT, tau=0.5, **SMALL)
    old = [p.clone() for p in soft.target.parameters()]
    soft.update(16, buf)
    for o, new, online in zip(old, soft.target.parameters(), soft.model.parameters()):
        torch.testing.assert_close(new, 0.5 * o + 0.5 * online)


# -- 5. acting -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("threshold", "acts"), [(0.3, 0), (0.0, 2)])
def test_acting_keeps_to_the_datasets_actions_unless_the_threshold_is_zero(
    threshold: float, acts: int
) -> None:
    # the dataset takes action 0 everywhere, for reward 0 (and gamma 0: Q(s, 0) learns 0); Q's
    # head is biased to rate action 2 highest, an action the data never shows and the TD loss
    # never corrects
    torch.manual_seed(0)
    policy = rlblocks.make_policy(
        "discrete-bcq", OBS, ACT, threshold=threshold, gamma=0.0, lr=1e-2, **SMALL
    )
    with torch.no_grad():
        policy.model.q_head[-1].bias.copy_(torch.tensor([0.0, 0.0, 50.0]))
    buf = data_buffer(action=0)
    for _ in range(150):
        policy.update(32, buf)
    policy.eval()
    act = policy(Batch(obs=buf.obs[:64])).act
    assert (act == acts).all(), act
    with torch.no_grad():
        q, logits = policy.model(torch.as_tensor(buf.obs[:64]))
    assert (q.argmax(dim=1) == 2).all()  # the unseen action still looks best to Q
    assert (torch.softmax(logits, 1)[:, 0] > 0.9).all()  # the clone knows the data's action


def test_tests_play_eps_test_of_their_actions_at_random() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("discrete-bcq", OBS, ACT, eps_test=0.5, **SMALL)
    policy.seed(0)
    obs = np.zeros((2_000, 4), np.float32)
    policy.eval()
    act = policy(Batch(obs=obs)).act
    greedy = int(np.bincount(act, minlength=3).argmax())
    assert 0.6 < np.mean(act == greedy) < 0.75  # 1/2 + 1/2 * 1/3
    policy.train()  # collecting offline never happens; a training-mode call is greedy
    assert (policy(Batch(obs=obs)).act == greedy).all()


def test_actions_keep_the_spaces_start() -> None:
    policy = rlblocks.make_policy("discrete-bcq", OBS, gym.spaces.Discrete(3, start=5), **SMALL)
    policy.eval()
    act = policy(Batch(obs=np.zeros((8, 4), np.float32))).act
    assert set(act) <= {0, 1, 2}  # indices; the env gets them plus the start
    assert set(policy.map_action(act)) <= {5, 6, 7}
    assert math.isfinite(float(policy.update(16, data_buffer())["loss"]))


# -- saved state -----------------------------------------------------------------------------------
def test_a_restored_policy_continues_bit_identically() -> None:
    torch.manual_seed(0)
    options = dict(target_update_interval=4, **SMALL)
    policy = rlblocks.make_policy("discrete-bcq", OBS, ACT, **options)
    buf = data_buffer()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 64, 32) for _ in range(7)]

    def step(p: Any, i: int) -> None:
        fixed_samples(buf, batches[i])
        p.update(32, buf)

    for i in range(3):
        step(policy, i)
    torch.manual_seed(42)
    restored = rlblocks.make_policy("discrete-bcq", OBS, ACT, **options)
    restored.load_state_dict(copy.deepcopy(policy.state_dict()))
    restored.load_extra_state(copy.deepcopy(policy.extra_state()))
    for i in range(3, 7):  # across the hard copy at step 4
        step(policy, i)
        step(restored, i)
    for (name, a), b in zip(policy.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


# -- a whole run -----------------------------------------------------------------------------------
def test_cli_trains_discrete_bcq_from_a_dataset_and_resumes(tmp_path: Path) -> None:
    from rlblocks.cli import main as cli

    envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=2, seed=0)
    data = rlblocks.make_buffer("replay", size=2_000, num_envs=2, seed=0)
    Collector(None, envs, data, seed=0).collect(n_step=2_000, random=True)
    envs.close()
    data.save_hdf5(tmp_path / "cartpole.h5")
    run = tmp_path / "run"
    small = ["--set", "algo.hidden_sizes=[16]", "--set", "trainer.test_interval=100",
             "--set", "trainer.test_episodes=2", "--set", "trainer.checkpoint_interval=100",
             "--set", "env.num_test_envs=2", "--set", "trainer.step_per_round=50"]  # fmt: skip
    argv = ["train", "discrete-bcq", "--dataset", str(tmp_path / "cartpole.h5"), "--run-dir",
            str(run), "--max-gradient-steps", "200", "--no-progress", *small]  # fmt: skip
    assert cli(argv) == 0
    agent = rlblocks.load(run)
    assert agent.algo == "discrete-bcq" and agent.act(np.zeros(4, np.float32)) in (0, 1)
    assert cli(["resume", str(run), "--max-gradient-steps", "300", "--no-progress"]) == 0
    saved = json.loads((run / "result.json").read_text())
    assert saved["gradient_steps"] == 300 and saved["env_steps"] == 0


# -- CartPole learned offline ----------------------------------------------------------------------
class Balancer(BasePolicy):
    """A scripted CartPole-v1 controller, push towards the side the pole falls to (``theta +
    0.5 theta_dot > 0``: right), playing ``eps`` of its actions at random. Noiseless it keeps
    the pole up for all 500 steps."""

    def __init__(self, envs: Any, eps: float, seed: int) -> None:
        super().__init__(envs.observation_space, envs.action_space)
        self.eps = eps
        self.rng = np.random.default_rng(seed)

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        obs = np.asarray(batch.obs)
        act = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        explore = self.rng.random(len(act)) < self.eps
        act[explore] = self.rng.integers(0, 2, int(explore.sum()))
        return Batch(act=act, state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        return {}


@pytest.fixture(scope="module")
def _balancer_play() -> ReplayBuffer:
    envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=4, seed=0)
    try:
        data = rlblocks.make_buffer("replay", size=10_000, num_envs=4, seed=0)
        stats = Collector(Balancer(envs, eps=0.2, seed=0), envs, data, seed=0).collect(
            n_step=10_000
        )
    finally:
        envs.close()
    assert len(data) == 10_000 and 300 < stats.mean_return < 500  # about 426
    return data


@pytest.fixture
def balancer_play(_balancer_play: ReplayBuffer) -> ReplayBuffer:
    """A narrow dataset: 10,000 env steps (4 envs, 20 episodes) of :class:`Balancer` with 20%
    random actions, so each state shows one action 90% of the time. Each test gets its own
    copy."""
    return copy.deepcopy(_balancer_play)


def _offline(data: ReplayBuffer, threshold: float, stop_reward: float | None = None) -> Any:
    """Discrete BCQ with CartPole-sized settings (the preset's batch 64 and soft target
    updates, one 64-64 network per head, Adam at 1e-3), ``threshold`` as given, on ``data``
    for at most 3,000 gradient steps, tested on 10 episodes every 500."""
    test_envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=10, seed=100)
    try:
        torch.manual_seed(1)
        policy = rlblocks.make_policy(
            "discrete-bcq", test_envs.observation_space, test_envs.action_space,
            hidden_sizes=[64, 64], lr=1e-3, adam_eps=1e-8, tau=0.005, threshold=threshold,
        )  # fmt: skip
        return OfflineTrainer(
            policy,
            Collector(policy, test_envs, None, exploration=False, seed=100),
            data,
            max_gradient_steps=3_000,
            batch_size=64,
            test_interval=500,
            test_episodes=10,
            stop_reward=stop_reward,
        ).run()
    finally:
        test_envs.close()


def test_discrete_bcq_learns_cartpole_from_a_noisy_controllers_play(
    balancer_play: ReplayBuffer,
) -> None:
    """From the dataset alone BCQ reaches a mean test return of 475 (of 500) within 3,000
    gradient steps (seeds 1, 2 and 3 pass it at 2,000, 1,000 and 500 steps), above its data's
    426: the threshold keeps it on the controller's own action, without the noise. About 6 s of
    CPU."""
    result = _offline(balancer_play, 0.3, stop_reward=475.0)
    assert result.solved and result.best_test_return >= 475.0, result
    assert result.env_steps == 0 and result.gradient_steps <= 3_000


def test_with_every_action_allowed_the_same_data_teaches_nothing(
    balancer_play: ReplayBuffer,
) -> None:
    """Threshold 0: every action allowed, offline double DQN with BCQ's network. Its greedy
    policy follows the overrated action the data rarely shows and the pole falls at once
    (seeds 1 and 2: 10 steps at best). About 15 s of CPU."""
    result = _offline(balancer_play, 0.0)
    assert result.gradient_steps == 3_000
    assert result.best_test_return < 50.0, result
