"""BDQ: the bin mapping, per-branch heads, the mean-operator n-step target, exploration,
checkpoints, and training Pendulum to -250."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks_algo_bdq.bdq import BDQPolicy
from rlblocks_algo_bdq.config import BDQConfig

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def small(**cfg) -> BDQConfig:
    """A small network, so the unit tests stay fast."""
    return BDQConfig(**{"hidden_sizes": [16], "head_hidden_sizes": [8], **cfg})


def bin_act(t: int) -> np.ndarray:
    """The action ``episode_buffer`` stores at step ``t``: the bin-index vector [t % 3, t % 3]."""
    return np.full(2, t % 3, dtype=np.int64)


def set_branch_values(net: torch.nn.Module, values: list[list[float]]) -> None:
    """Make ``net`` (non-dueling) ignore observations: branch d's Q-values are ``values[d]``."""
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        for branch, vals in zip(net.branches, values, strict=True):
            branch[-1].bias.copy_(torch.tensor(vals))


# -- actions ----------------------------------------------------------------------------------
def test_bins_are_evenly_spaced_from_low_to_high_inclusive() -> None:
    policy = BDQPolicy(OBS, ACT, small(bins=5))
    idx = np.array([[0, 0], [4, 4], [2, 1]])
    env_act = policy.map_action(idx)
    assert env_act.dtype == ACT.dtype and env_act.shape == (3, 2)
    np.testing.assert_array_equal(env_act[0], ACT.low)
    np.testing.assert_array_equal(env_act[1], ACT.high)
    np.testing.assert_allclose(env_act[2], [0.0, 0.25])


def test_map_action_and_its_inverse_round_trip_inside_the_bounds() -> None:
    bins = 7
    policy = BDQPolicy(OBS, ACT, small(bins=bins))
    idx = np.array(list(itertools.product(range(bins), repeat=2)), dtype=np.int64)
    env_act = policy.map_action(idx)
    assert all(ACT.contains(a) for a in env_act)
    back = policy.map_action_inverse(env_act)
    assert back.dtype == np.int64
    np.testing.assert_array_equal(back, idx)


def test_inverse_picks_the_nearest_bin_and_clips_outside_values() -> None:
    bins = 9
    policy = BDQPolicy(OBS, ACT, small(bins=bins))
    rng = np.random.default_rng(0)
    cont = rng.uniform(ACT.low, ACT.high, size=(500, 2)).astype(np.float32)
    idx = policy.map_action_inverse(cont)
    grid = np.linspace(ACT.low, ACT.high, bins)  # [bins, D]
    nearest = np.abs(cont[:, None, :] - grid[None]).argmin(axis=1)
    np.testing.assert_array_equal(idx, nearest)
    outside = np.array([[-10.0, 5.0], [10.0, -5.0]], np.float32)
    top = bins - 1
    np.testing.assert_array_equal(policy.map_action_inverse(outside), [[0, top], [top, 0]])
    # indices out of range map to the bounds instead of indexing past the table
    np.testing.assert_array_equal(policy.map_action(np.array([[-3, 99]])), [[-2.0, 1.0]])


def test_matrix_shaped_action_boxes_flatten_into_branches() -> None:
    act_space = gym.spaces.Box(-1.0, 1.0, (2, 3), dtype=np.float32)
    policy = BDQPolicy(OBS, act_space, small(bins=3))
    out = policy(Batch(obs=np.zeros((4, 3), np.float32)))
    assert out.act.shape == (4, 6)
    env_act = policy.map_action(out.act)
    assert env_act.shape == (4, 2, 3) and all(act_space.contains(a) for a in env_act)
    np.testing.assert_array_equal(policy.map_action_inverse(env_act), out.act)


class _RecordActions(gym.Wrapper):
    """Keeps every action the env ran."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.ran: list[np.ndarray] = []

    def step(self, action: Any) -> Any:
        self.ran.append(np.array(action, copy=True))
        return self.env.step(action)


def test_random_warm_up_is_stored_as_bin_indices_and_runs_exactly_those() -> None:
    from rlblocks_env_dummy.dummy import DummyVectorEnv

    envs = DummyVectorEnv([lambda: _RecordActions(gym.make("Pendulum-v1"))])
    try:
        policy = BDQPolicy(envs.observation_space, envs.action_space, small(bins=5))
        buf = rlblocks.make_buffer("replay", size=64, num_envs=1)
        rlblocks.Collector(policy, envs, buf, seed=0).collect(n_step=40, random=True)
        act = np.asarray(buf[np.arange(len(buf))].act)
        ran = np.stack(envs.envs[0].ran)
    finally:
        envs.close()
    assert act.shape == (40, 1) and act.dtype.kind == "i"
    assert act.min() >= 0 and act.max() <= 4 and len(np.unique(act)) > 1
    # the env ran the grid action the buffer stores, not the continuous sample
    np.testing.assert_array_equal(ran, policy.map_action(act))


def test_non_box_and_unbounded_action_spaces_are_rejected() -> None:
    with pytest.raises(TypeError, match="Box action space"):
        BDQPolicy(OBS, gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="finite"):
        BDQPolicy(OBS, gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32))


# -- network ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dueling", [True, False])
def test_one_q_vector_per_branch_and_greedy_indices(dueling: bool) -> None:
    act_space = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    policy = BDQPolicy(OBS, act_space, small(bins=6, dueling=dueling))
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    out = policy(Batch(obs=obs))
    assert out.logits.shape == (5, 3, 6)
    assert out.act.shape == (5, 3) and out.act.dtype == np.int64
    np.testing.assert_array_equal(out.act, out.logits.argmax(dim=2).numpy())


def test_dueling_branches_share_the_state_value_as_their_mean_q() -> None:
    act_space = gym.spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
    policy = BDQPolicy(OBS, act_space, small(bins=5, dueling=True))
    net = policy.model
    x = torch.as_tensor(np.random.default_rng(1).uniform(-1, 1, (8, 3)), dtype=torch.float32)
    with torch.no_grad():
        q = net(x)
        value = net.value(net.trunk(net.encoder(x)))  # [B, 1]
    # the advantages of each branch average to zero, so each branch's mean Q is V(s)
    torch.testing.assert_close(q.mean(dim=2), value.expand(8, 4))
    assert not torch.allclose(q[:, 0], q[:, 1])  # the branches still differ


# -- targets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n_step", [1, 2, 3])
def test_nstep_target_averages_branches_and_stops_at_terminal(n_step: int, episode_buffer) -> None:
    gamma = 0.5
    buf = episode_buffer(
        [(1.0, False, False), (2.0, False, False), (4.0, True, False)], act=bin_act
    )
    policy = BDQPolicy(OBS, ACT, small(bins=3, dueling=False, gamma=gamma, n_step=n_step))
    values = [[1.0, 8.0, 3.0], [2.0, 0.0, 12.0]]  # greedy values 8 and 12: mean operator 10
    for net in (policy.model, policy.target_model):
        set_branch_values(net, values)
    idx = np.array([0, 1, 2])
    batch = policy.process_fn(buf[idx], buf, idx)
    rews = [1.0, 2.0, 4.0]

    def expected(t: int) -> float:
        g, k = 0.0, 0
        while k < n_step and t + k < 3:
            g += gamma**k * rews[t + k]
            k += 1
        return g + (0.0 if t + k == 3 else gamma**k * 10.0)

    np.testing.assert_allclose(batch.returns, [expected(t) for t in range(3)], rtol=1e-6)


def test_truncated_episode_bootstraps_from_its_last_obs_next(episode_buffer) -> None:
    buf = episode_buffer([(1.0, False, False), (1.0, False, True)], act=bin_act)
    policy = BDQPolicy(OBS, ACT, small(bins=2, dueling=False, gamma=0.9, n_step=5))
    for net in (policy.model, policy.target_model):
        set_branch_values(net, [[0.0, 4.0], [6.0, 2.0]])
    idx = np.array([0])
    batch = policy.process_fn(buf[idx], buf, idx)
    np.testing.assert_allclose(batch.returns, [1.0 + 0.9 + 0.81 * 5.0], rtol=1e-6)


def test_double_picks_with_the_online_net_and_values_with_the_target() -> None:
    policy = BDQPolicy(OBS, ACT, small(bins=2, dueling=False, double=True))
    set_branch_values(policy.model, [[0.0, 1.0], [1.0, 0.0]])  # online picks 1, 0
    set_branch_values(policy.target_model, [[5.0, 2.0], [4.0, 8.0]])
    obs = torch.zeros(1, 3)
    assert float(policy.target_value(obs)[0]) == pytest.approx((2.0 + 4.0) / 2)
    policy.config.double = False  # the target net's own argmax: 5 and 8
    assert float(policy.target_value(obs)[0]) == pytest.approx((5.0 + 8.0) / 2)


# -- learning ---------------------------------------------------------------------------------
@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_learning_reduces_the_loss_on_a_fixed_batch(loss: str, episode_buffer) -> None:
    # gamma=0 makes the target the reward itself, so the fit must converge
    policy = BDQPolicy(
        OBS,
        ACT,
        small(lr=1e-2, gamma=0.0, n_step=1, tau=None, target_update_interval=0, loss=loss),
    )
    buf = episode_buffer(
        [(1.0, False, False), (-1.0, False, False), (2.0, True, False)], act=bin_act
    )
    losses = [float(policy.update(0, buf)["loss"]) for _ in range(200)]
    assert losses[-1] < 0.05 * losses[0]
    assert policy.gradient_steps == 200


def test_td_error_is_the_mean_absolute_branch_error_and_weights_scale_the_loss(
    episode_buffer,
) -> None:
    policy = BDQPolicy(OBS, ACT, small(bins=3, lr=1e-12, loss="mse"))
    buf = episode_buffer(
        [(1.0, False, False), (0.0, False, False), (2.0, True, False)], act=bin_act
    )
    idx = np.arange(3)
    batch = policy.process_fn(buf[idx], buf, idx)
    with torch.no_grad():
        q = policy.model(torch.as_tensor(np.asarray(batch.obs)))
    act = torch.as_tensor(np.asarray(batch.act))
    q_taken = q.gather(2, act.unsqueeze(2)).squeeze(2)
    expected = (q_taken - batch.returns.unsqueeze(1)).abs().mean(dim=1)
    sq = (q_taken - batch.returns.unsqueeze(1)).pow(2).mean(dim=1)
    batch.weight = np.array([0.0, 2.0, 0.5], np.float32)
    stats = policy.learn(batch)
    torch.testing.assert_close(batch.td_error, expected)
    assert float(stats["loss"]) == pytest.approx(float((sq * torch.tensor([0.0, 2.0, 0.5])).mean()))


def test_noisy_layers_draw_new_noise_each_gradient_step(episode_buffer) -> None:
    policy = BDQPolicy(OBS, ACT, small(noisy=True, eps_start=0.0, eps_end=0.0))
    layer = policy.model.branches[0][0]
    before = layer.eps_out.clone()
    buf = episode_buffer([(1.0, False, False)] * 6, act=bin_act)
    stats = policy.update(4, buf)
    assert np.isfinite(float(stats["loss"]))
    assert not torch.equal(before, layer.eps_out)


# -- exploration ------------------------------------------------------------------------------
def test_epsilon_explores_each_dimension_independently_within_its_bins() -> None:
    bins = 4
    act_space = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    policy = BDQPolicy(OBS, act_space, small(bins=bins, eps_start=0.5, eps_end=0.5))
    policy.seed(0)
    policy.train()
    act = np.zeros((20_000, 3), dtype=np.int64)
    noisy = policy.exploration_noise(act, Batch())
    assert noisy.shape == act.shape and noisy.dtype == np.int64
    assert noisy.min() >= 0 and noisy.max() == bins - 1
    changed = noisy != 0
    # half the entries explore; 3 of 4 random bins differ from the greedy 0
    np.testing.assert_allclose(changed.mean(axis=0), 0.5 * 3 / 4, atol=0.02)
    # independent per dimension: both changed about as often as the product of the rates
    both = (changed[:, 0] & changed[:, 1]).mean()
    assert abs(both - (0.5 * 3 / 4) ** 2) < 0.02
    policy.eval()  # eps_test = 0: tests act greedily
    np.testing.assert_array_equal(policy.exploration_noise(act, Batch()), act)


def test_epsilon_schedule_is_reported() -> None:
    policy = BDQPolicy(OBS, ACT, small(eps_start=1.0, eps_end=0.1, eps_decay_steps=100))
    policy.train()
    policy.set_env_step(50)
    assert policy.epsilon == pytest.approx(0.55)
    assert policy.schedule_stats()["epsilon"] == pytest.approx(0.55)


# -- checkpoints ------------------------------------------------------------------------------
def test_checkpoint_round_trip_gives_identical_actions_and_exploration(episode_buffer) -> None:
    cfg = {"bins": 5, "eps_start": 0.5, "eps_end": 0.3, "eps_decay_steps": 1000}
    policy = BDQPolicy(OBS, ACT, small(**cfg))
    policy.seed(3)
    buf = episode_buffer(
        [(1.0, False, False), (0.5, False, False), (2.0, True, False)], act=bin_act
    )
    for _ in range(5):
        policy.update(3, buf)
    policy.set_env_step(400)
    obs = np.random.default_rng(2).uniform(-1, 1, (16, 3)).astype(np.float32)
    policy.exploration_noise(np.zeros((16, 2), np.int64), Batch())  # move the generator on

    fresh = BDQPolicy(OBS, ACT, small(**cfg))
    fresh.load_state_dict(policy.state_dict())
    fresh.load_extra_state(policy.extra_state())
    for p in (policy, fresh):
        p.eval()
    np.testing.assert_array_equal(fresh(Batch(obs=obs)).act, policy(Batch(obs=obs)).act)
    for p in (policy, fresh):
        p.train()
    assert fresh.epsilon == pytest.approx(policy.epsilon)
    greedy = policy(Batch(obs=obs)).act
    np.testing.assert_array_equal(
        fresh.exploration_noise(greedy, Batch()), policy.exploration_noise(greedy, Batch())
    )


# -- training ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_bdq_swings_up_pendulum_with_default_settings(tmp_path) -> None:
    """`rlblocks train bdq` (spec defaults, Pendulum-v1) to a mean of -250 over 100 tests."""
    result = rlblocks.train(
        "bdq",
        env="Pendulum-v1",
        seed=0,
        stop_reward=-250,
        loggers=[],
        progress=False,
        run_dir=tmp_path / "run",
    )
    assert result.solved, result
    assert result.best_test_return >= -250.0
