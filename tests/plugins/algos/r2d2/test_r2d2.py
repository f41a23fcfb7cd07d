"""R2D2: the prioritized sequence sampler (draws by priority, complete windows enter with the
largest priority, importance weights, files), the recurrent policy (replayed Q-values equal the
acting ones, burn-in without gradient, n-step targets inside windows, value rescaling,
checkpoints, exact resume), and training on the masked CartPole, where a feed-forward DQN with
the same budget stays below the threshold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
import rlblocks.run._envs  # registers rlblocks/MaskedCartPole-v1
from rlblocks.contracts import Batch, BufferAbilities
from rlblocks.plugins import hookimpl
from rlblocks.replay import ReplayBuffer, SequenceSampler
from rlblocks.run import MASKED_CARTPOLE_ID, load_checkpoint, save_checkpoint
from rlblocks_algo_r2d2.config import R2D2Config
from rlblocks_algo_r2d2.r2d2 import R2D2Policy, nstep_window_targets, rescale, unrescale
from rlblocks_algo_r2d2.sampler import PrioritizedSequenceSampler, window_priority

OBS = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


def scripted_buffer(
    lengths: list[int],
    burn_in: int = 2,
    length: int = 3,
    size: int = 64,
    last_done: bool = True,
    **sampler_kw: Any,
) -> ReplayBuffer:
    """One env, episodes of the given lengths one after another (the last one unfinished
    unless ``last_done``); obs = [step, episode]."""
    sampler = PrioritizedSequenceSampler(length=length, burn_in=burn_in, **sampler_kw)
    buf = ReplayBuffer(size, seed=0, sampler=sampler)
    for ep, n in enumerate(lengths):
        for t in range(n):
            end = t == n - 1 and (last_done or ep < len(lengths) - 1)
            buf.add(Batch(obs=np.array([t, ep], np.float32), act=t % 2, rew=1.0,
                          terminated=end, truncated=False,
                          obs_next=np.array([t + 1, ep], np.float32)))  # fmt: skip
    return buf


# -- the sampler ---------------------------------------------------------------------------------
def test_sampler_is_a_sequence_sampler_that_takes_priorities_by_name() -> None:
    buf = rlblocks.make_buffer("replay", size=32, num_envs=2, sampler="prioritized-sequence",
                               length=5, burn_in=3, alpha=0.7)  # fmt: skip
    assert isinstance(buf.sampler, PrioritizedSequenceSampler)
    assert isinstance(buf.sampler, SequenceSampler)
    abilities = BufferAbilities.of(buf)
    assert abilities.sequences and abilities.prioritized and abilities.annealed
    assert buf.sampler.options()["alpha"] == 0.7


def test_windows_are_keyed_by_their_first_slot_with_masks() -> None:
    buf = scripted_buffer([4, 6], burn_in=2, length=3)
    idx = buf.sampler.windows(np.array([0, 1, 4, 8]))
    np.testing.assert_array_equal(
        idx, [[0, 1, 2, 3, 3], [1, 2, 3, 3, 3], [4, 5, 6, 7, 8], [8, 9, 9, 9, 9]]
    )
    batch = buf[idx]
    np.testing.assert_array_equal(
        batch.mask, [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    )
    # windows starting at an episode's first step learn every step (their stored state is
    # the zero start state); the others only after the burn-in
    np.testing.assert_array_equal(
        batch.learn_mask, [[1, 1, 1, 1, 0], [0, 0, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    )
    assert batch.weight.shape == (4,)


def test_sampling_frequencies_follow_priorities() -> None:
    buf = scripted_buffer([10, 10, 10], burn_in=0, alpha=0.7)
    rng = np.random.default_rng(1)
    prio = rng.uniform(0.1, 3.0, 30)
    prio[[3, 17]] = 0.01  # rarely drawn
    buf.update_priority(np.arange(30), prio)
    expected = (prio + 1e-6) ** 0.7
    expected /= expected.sum()
    draws = 40_000
    counts = np.zeros(64)
    for _ in range(draws // 400):
        idx = buf.sample_index(400)
        counts += np.bincount(idx[:, 0], minlength=64)
    assert counts[30:].sum() == 0  # slots never written key no window
    counts = counts[:30]
    chi2 = ((counts - draws * expected) ** 2 / (draws * expected)).sum()
    assert chi2 < 58.3  # 29 degrees of freedom: the 0.999 quantile is about 58.3
    np.testing.assert_allclose(buf.sampler.probabilities()[:30], expected, rtol=1e-9)


def test_complete_windows_enter_with_the_largest_priority_so_far() -> None:
    sampler = PrioritizedSequenceSampler(length=3, burn_in=2, alpha=0.5)  # windows of 5
    buf = ReplayBuffer(32, seed=0, sampler=sampler)

    def add(t: int, done: bool = False) -> None:
        buf.add(Batch(obs=np.array([t, 0], np.float32), act=0, rew=1.0, terminated=done,
                      truncated=False, obs_next=np.array([t + 1, 0], np.float32)))  # fmt: skip

    for t in range(4):
        add(t)
    assert not sampler.powered.any()  # no window is complete yet
    # while none is, draws are uniform over the stored steps
    assert buf.sample_index(64)[:, 0].max() <= 3
    add(4)  # the window keyed by slot 0 now holds its 5 steps
    np.testing.assert_array_equal(sampler.powered[:5], [1.0, 0, 0, 0, 0])
    buf.update_priority(np.array([[0, 1, 2, 3, 4]]), np.array([4.0]))
    assert sampler.max_priority == pytest.approx(4.0 + 1e-6)
    add(5)
    assert sampler.powered[1] == pytest.approx((4.0 + 1e-6) ** 0.5)
    assert sampler.powered[0] == pytest.approx((4.0 + 1e-6) ** 0.5)  # its own, updated
    add(6, done=True)  # the episode ends: every remaining window is complete
    np.testing.assert_allclose(sampler.powered[2:5], (4.0 + 1e-6) ** 0.5)
    # windows whose real steps are all burn-in never enter, nor take priorities
    np.testing.assert_array_equal(sampler.powered[5:7], 0.0)
    buf.update_priority(np.array([5, 6]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(sampler.powered[5:7], 0.0)
    assert np.all(buf.sample_index(100)[:, 0] <= 4)
    # an episode's first step keys a window that learns from its first step: it enters
    add(0, done=True)
    assert sampler.powered[7] == pytest.approx((4.0 + 1e-6) ** 0.5)


def test_importance_weights_and_beta_annealing() -> None:
    buf = scripted_buffer(
        [8], burn_in=0, alpha=0.6, beta=0.4, beta_final=1.0, beta_anneal_steps=100
    )
    prio = np.linspace(0.5, 4.0, 8)
    buf.update_priority(np.arange(8), prio)
    powered = (prio + 1e-6) ** 0.6
    keys = np.array([0, 3, 7])
    np.testing.assert_allclose(
        buf.sampler.weight(keys), (powered[keys] / powered.min()) ** -0.4, rtol=1e-6
    )
    buf.set_env_step(50)
    assert buf.sampler.beta == pytest.approx(0.7)
    batch = buf[buf.sampler.windows(keys)]
    np.testing.assert_allclose(batch.weight, (powered[keys] / powered.min()) ** -0.7, rtol=1e-6)
    assert batch.weight[0] == pytest.approx(1.0)  # the least likely window weighs most


def test_window_priority_mixes_max_and_mean_over_learned_steps() -> None:
    td = np.array([[9.0, 1.0, 2.0, 3.0], [5.0, 5.0, 0.0, 0.0]])
    learn = np.array([[0, 1, 1, 1], [0, 0, 0, 0]], dtype=bool)
    got = window_priority(td, learn, eta=0.9)
    np.testing.assert_allclose(got, [0.9 * 3.0 + 0.1 * 2.0, 0.0])
    got_t = window_priority(torch.as_tensor(td), torch.as_tensor(learn).float(), eta=0.9)
    np.testing.assert_allclose(got_t.numpy(), got)


def test_priorities_survive_hdf5_and_draws_continue_identically(tmp_path: Path) -> None:
    buf = scripted_buffer([7, 9], alpha=0.8, beta=0.5, beta_final=0.9, beta_anneal_steps=10)
    buf.update_priority(np.arange(16), np.linspace(0.1, 2.0, 16))
    buf.set_env_step(5)
    buf.save_hdf5(tmp_path / "buf.h5")
    back = ReplayBuffer.load_hdf5(tmp_path / "buf.h5")
    assert isinstance(back.sampler, PrioritizedSequenceSampler)
    assert back.sampler.options() == buf.sampler.options()
    np.testing.assert_array_equal(back.sampler.powered, buf.sampler.powered)
    assert back.sampler.max_priority == buf.sampler.max_priority
    assert back.sampler.beta == buf.sampler.beta
    for _ in range(3):
        a, b = buf.sample(16), back.sample(16)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0].weight, b[0].weight)


# -- the policy ----------------------------------------------------------------------------------
def small_policy(seed: int = 0, **cfg: Any) -> R2D2Policy:
    torch.manual_seed(seed)
    cfg = {"rnn_hidden": 8, "torso_sizes": [8], "hidden_sizes": [8], **cfg}
    return R2D2Policy(OBS, ACT, R2D2Config(**cfg))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_replayed_q_values_equal_what_the_actor_saw(cell: str) -> None:
    torch.set_num_threads(1)
    envs = rlblocks.make_vector_env("dummy", MASKED_CARTPOLE_ID, num_envs=2, seed=0)
    policy = R2D2Policy(
        envs.observation_space,
        envs.action_space,
        R2D2Config(cell=cell, rnn_hidden=16, torso_sizes=[16], dueling=True),
    )
    seen: list[np.ndarray] = []
    acting = policy.forward

    def record(batch: Batch, state: Any = None, **kw: Any) -> Batch:
        out = acting(batch, state, **kw)
        seen.append(out.logits.detach().numpy().copy())
        return out

    policy.forward = record  # type: ignore[method-assign]
    buf = rlblocks.make_buffer("replay", size=1000, num_envs=2,
                               sampler="prioritized-sequence", length=6, burn_in=4)  # fmt: skip
    policy.train()
    rlblocks.Collector(policy, envs, buf, seed=0).collect(n_step=300)
    envs.close()
    q_acting = np.concatenate(seen)  # slot = round * 2 + env: both envs step every round
    assert len(q_acting) == len(buf) == 300

    batch, idx = buf.sample(64)
    obs = policy.obs_tensor(policy.window_observations(batch))
    with torch.no_grad():
        q = policy.unroll(policy.model, obs, policy.stored_start_state(batch))
    real = batch.mask
    assert real.sum() > 300 and (~real).any()
    np.testing.assert_allclose(q[:, :-1].numpy()[real], q_acting[idx][real], rtol=0, atol=2e-6)
    # burn-in does not change the numbers, only where gradients flow
    with torch.no_grad():
        q_burn = policy.unroll(policy.model, obs, policy.stored_start_state(batch), burn_in=4)
    np.testing.assert_allclose(q_burn.numpy(), q.numpy(), rtol=0, atol=1e-6)


def test_burn_in_steps_get_no_gradient() -> None:
    policy = small_policy()
    obs = torch.randn(3, 7, 2, requires_grad=True)
    state0 = {k: torch.randn(3, 1, 8, requires_grad=True) for k in ("h", "c")}
    full = torch.tensor([False, True, False])
    q = policy.unroll(policy.model, obs, state0, burn_in=3, full_rows=full)
    q[:, 3:].sum().backward()
    grad = obs.grad.abs().sum(dim=2)
    assert torch.all(grad[[0, 2], :3] == 0)  # burn-in: no gradient
    assert torch.all(grad[:, 3:] > 0)
    assert torch.all(grad[1, :3] > 0)  # a window that learns from its first step
    for value in state0.values():
        assert torch.all(value.grad[[0, 2]] == 0) and value.grad[1].abs().sum() > 0


def test_burn_in_length_is_read_from_the_learn_mask() -> None:
    learn = np.array([[0, 0, 0, 1, 1], [1, 1, 1, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0]], bool)
    burn_in, full = R2D2Policy.burn_in_of(learn)
    assert burn_in == 3
    np.testing.assert_array_equal(full, [False, True, False, False])
    assert R2D2Policy.burn_in_of(np.ones((2, 4), bool))[0] == 0  # no burn-in anywhere


def test_nstep_targets_stop_at_terminal_steps_and_bootstrap_otherwise() -> None:
    gamma, n = 0.5, 3
    rew = torch.tensor([[1.0, 2.0, 4.0, 8.0, 0.0], [1.0, 2.0, 4.0, 8.0, 16.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    terminated = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    boot = torch.arange(6, dtype=torch.float32).expand(2, 6) * 10 + 100  # value of column j
    y = nstep_window_targets(boot, rew, terminated, mask, gamma, n)
    # row 0: the episode terminates at step 3: targets reaching it do not bootstrap
    assert y[0, 0] == pytest.approx(1 + 0.5 * 2 + 0.25 * 4 + 0.125 * boot[0, 3])
    assert y[0, 1] == pytest.approx(2 + 0.5 * 4 + 0.25 * 8)
    assert y[0, 2] == pytest.approx(4 + 0.5 * 8)
    assert y[0, 3] == pytest.approx(8)
    # row 1: the window ends without an episode end: bootstrap from the state after it
    assert y[1, 2] == pytest.approx(4 + 0.5 * 8 + 0.25 * 16 + 0.125 * boot[1, 5])
    assert y[1, 3] == pytest.approx(8 + 0.5 * 16 + 0.25 * boot[1, 5])
    assert y[1, 4] == pytest.approx(16 + 0.5 * boot[1, 5])


def test_truncated_windows_bootstrap_from_the_next_observation_with_the_carried_state() -> None:
    # the last real step is truncated (time limit): its target bootstraps from column 3,
    # which the unroll computes from that step's obs_next after the window's state
    rew = torch.ones(1, 4)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    boot = torch.tensor([[0.0, 0.0, 0.0, 7.0, 99.0]])
    y = nstep_window_targets(boot, rew, torch.zeros(1, 4, dtype=torch.bool), mask, 0.9, 1)
    assert y[0, 2] == pytest.approx(1 + 0.9 * 7.0)


def test_value_rescaling_is_inverted_exactly() -> None:
    x = torch.linspace(-1000, 1000, 2001, dtype=torch.float64)
    np.testing.assert_allclose(unrescale(rescale(x)).numpy(), x.numpy(), rtol=1e-9, atol=1e-9)
    assert rescale(torch.tensor(0.0)) == 0.0
    assert float(rescale(torch.tensor(99.0))) == pytest.approx(9.0 + 0.099)


def test_learning_on_windows_lowers_their_td_error_and_reports_priorities() -> None:
    envs = rlblocks.make_vector_env("dummy", MASKED_CARTPOLE_ID, num_envs=2, seed=0)
    policy = R2D2Policy(
        envs.observation_space,
        envs.action_space,
        R2D2Config(rnn_hidden=16, lr=3e-3, tau=None, target_update_interval=10_000),
    )
    buf = rlblocks.make_buffer("replay", size=500, num_envs=2,
                               sampler="prioritized-sequence", length=5, burn_in=2)  # fmt: skip
    policy.train()
    rlblocks.Collector(policy, envs, buf, seed=0).collect(n_step=200)
    envs.close()
    batch, idx = buf.sample(16)
    first = policy.learn(policy.process_fn(batch, buf, idx))
    policy.post_process_fn(batch, buf, idx)
    np.testing.assert_allclose(
        buf.sampler.powered[idx[:, 0]],
        (batch.td_error.numpy().astype(np.float64) + 1e-6) ** buf.sampler.alpha,
        rtol=1e-5,
    )
    for _ in range(150):
        last = policy.learn(buf[idx])
    assert float(last["loss"]) < 0.2 * float(first["loss"])


def test_updates_run_on_the_per_env_layout_too() -> None:
    envs = rlblocks.make_vector_env("dummy", MASKED_CARTPOLE_ID, num_envs=3, seed=0)
    policy = small_policy()
    buf = rlblocks.make_buffer("vector", size=300, num_envs=3,
                               sampler="prioritized-sequence", length=4, burn_in=2)  # fmt: skip
    policy.train()
    rlblocks.Collector(policy, envs, buf, seed=0).collect(n_step=240)
    envs.close()
    assert buf.sampler.powered.any()
    idx = buf.sample_index(8)
    assert np.all(buf.env_id[idx] == buf.env_id[idx[:, :1]])  # a window stays in one env
    stats = policy.update(8, buf)
    assert float(stats["learned_steps"]) > 0


def test_single_step_buffers_give_windows_of_one_step() -> None:
    envs = rlblocks.make_vector_env("dummy", MASKED_CARTPOLE_ID, num_envs=2, seed=0)
    policy = small_policy()
    buf = rlblocks.make_buffer("replay", size=100, num_envs=2)
    policy.train()
    rlblocks.Collector(policy, envs, buf, seed=0).collect(n_step=50)
    envs.close()
    stats = policy.update(8, buf)
    assert float(stats["learned_steps"]) == 8


def test_checkpoint_round_trip_acts_and_learns_the_same(tmp_path: Path) -> None:
    policy = small_policy(dueling=True)
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 3, 2)).astype(np.float32)

    def act_sequence(p: R2D2Policy) -> np.ndarray:
        p.eval()
        state, out = None, []
        for t in range(obs.shape[0]):
            res = p(Batch(obs=obs[t]), state)
            state = res.state
            out.append(res.logits.detach().numpy())
        return np.stack(out)

    policy.gradient_steps = 7
    save_checkpoint(tmp_path / "c.pt",
                    {"policy": policy.state_dict(), "extra": policy.extra_state()})  # fmt: skip
    loaded = load_checkpoint(tmp_path / "c.pt")
    fresh = small_policy(seed=1, dueling=True)
    fresh.load_state_dict(loaded["policy"])
    fresh.load_extra_state(loaded["extra"])
    assert fresh.gradient_steps == 7
    np.testing.assert_array_equal(act_sequence(fresh), act_sequence(policy))
    for a, b in zip(fresh.target_model.parameters(), policy.target_model.parameters()):
        assert torch.equal(a, b)


def test_forward_stores_the_state_entering_each_step() -> None:
    policy = small_policy()
    obs = np.zeros((3, 2), np.float32)
    first = policy(Batch(obs=obs))
    assert np.all(first.policy.state.h.numpy() == 0)  # fresh episodes start from zeros
    second = policy(Batch(obs=obs), first.state)
    np.testing.assert_array_equal(second.policy.state.h, first.state.h)
    assert not torch.equal(second.state.h, first.state.h)


def test_learning_rate_decays_linearly_with_lr_decay_steps() -> None:
    policy = small_policy(lr=1e-3, lr_decay_steps=1000)
    policy.set_env_step(250)
    assert policy.optim_step.lr == pytest.approx(7.5e-4)
    assert small_policy(lr=1e-3).optim_step.lr_schedule is None


def test_noisy_and_continuous_actions_are_refused() -> None:
    with pytest.raises(ValueError, match="noisy"):
        R2D2Config(noisy=True)
    with pytest.raises(TypeError, match="Discrete"):
        R2D2Policy(OBS, gym.spaces.Box(-1, 1, (2,)))


# -- runs ----------------------------------------------------------------------------------------
class _Crash(Exception):
    pass


class _CrashAt:
    def __init__(self, env_step: int) -> None:
        self.env_step = env_step

    @hookimpl
    def rlblocks_rollout_end(self, stats: dict, env_step: int, trainer: Any) -> None:
        if env_step >= self.env_step:
            raise _Crash(env_step)


def test_a_crashed_run_resumes_bit_identical(tmp_path: Path) -> None:
    """The buffer with its priorities, the collector's recurrent states and every random
    stream come back from the checkpoint."""
    sets = ["trainer.max_env_steps=1200", "trainer.checkpoint_interval=200",
            "trainer.test_interval=600", "trainer.test_episodes=2", "env.num_test_envs=2",
            "env.num_envs=4", "buffer.length=4", "buffer.burn_in=2", "algo.rnn_hidden=8",
            "trainer.batch_size=8"]  # fmt: skip
    kw = {"seed": 3, "overrides": sets, "progress": False, "loggers": [], "quiet": True}
    whole = rlblocks.train("r2d2", run_dir=tmp_path / "whole", **kw)
    with pytest.raises(_Crash):
        rlblocks.train("r2d2", run_dir=tmp_path / "cut", hooks=[_CrashAt(700)], **kw)
    resumed = rlblocks.resume(tmp_path / "cut")
    assert resumed.env_steps == whole.env_steps
    assert resumed.gradient_steps == whole.gradient_steps > 0
    a, b = whole.agent.policy.state_dict(), resumed.agent.policy.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# -- training ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_r2d2_solves_masked_cartpole_with_its_defaults(tmp_path: Path) -> None:
    """`rlblocks train r2d2` (the masked CartPole by default) reaches 475 over 100 test
    episodes within its default budget."""
    torch.set_num_threads(1)
    result = rlblocks.train("r2d2", seed=0, loggers=[], progress=False, quiet=True,
                            run_dir=tmp_path / "r2d2")  # fmt: skip
    assert result.solved, result
    assert result.best_test_return >= 475.0


@pytest.mark.slow
def test_feed_forward_dqn_stays_below_on_masked_cartpole_with_the_same_budget(
    tmp_path: Path,
) -> None:
    """Without memory the velocities cannot be inferred: DQN with R2D2's env-step budget
    (and its own CartPole settings) stays clearly below the threshold."""
    torch.set_num_threads(1)
    from rlblocks.plugins import get_registry

    budget = get_registry("algo").spec("r2d2").defaults["trainer"]["max_env_steps"]
    result = rlblocks.train("dqn", env=MASKED_CARTPOLE_ID, seed=0, loggers=[], progress=False,
                            quiet=True, run_dir=tmp_path / "dqn",
                            overrides=[f"trainer.max_env_steps={budget}"])  # fmt: skip
    assert result.env_steps == budget
    assert not result.solved
    assert result.best_test_return < 150.0, result
