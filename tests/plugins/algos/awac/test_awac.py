"""AWAC: the advantage weights (normalised over the batch or not, and their clipping), a
gradient step as the paper's losses, what the weights do on a toy dataset, acting, config
checks, an exact continuation from saved state, the captured step, a run from the command line,
and Pendulum learned offline from a controller's play mixed with random torques, where the same
learner with its weights flattened to 1 (behaviour cloning) stays far below."""

from __future__ import annotations

import copy
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.plugins import FIRST_PARTY, get_registry
from rlblocks.replay import ReplayBuffer

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def data_buffer(n: int = 64) -> ReplayBuffer:
    """``n`` transitions with 3-float observations, random 2-float actions, random rewards and
    some terminal steps (seeded)."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    for t in range(n):
        buf.add(
            Batch(
                obs=rng.uniform(-1, 1, 3).astype(np.float32),
                act=rng.uniform(-1, 1, 2).astype(np.float32),
                rew=float(rng.normal()),
                terminated=t % 16 == 15,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
            )
        )
    return buf


# -- the spec and the config ----------------------------------------------------------------------
def test_spec_is_an_offline_first_party_algorithm_for_box_actions() -> None:
    spec = get_registry("algo").spec("awac")
    assert spec.training == "offline"
    assert spec.action_spaces == ("Box",)
    assert spec.defaults["trainer"]["batch_size"] == 1_024
    assert spec.defaults["trainer"]["max_gradient_steps"] == 1_000_000
    assert "awac" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "awac"] == [
        "rlblocks-algo-awac"
    ]


def test_defaults_are_the_authors_mujoco_settings() -> None:
    policy = rlblocks.make_policy("awac", OBS, ACT)
    c = policy.config
    assert (c.lam, c.normalize_weights, c.max_weight) == (1.0, True, None)
    assert (c.actor_lr, c.critic_lr, c.actor_weight_decay) == (3e-4, 3e-4, 1e-4)
    assert (c.gamma, c.tau, c.n_step) == (0.99, 0.005, 1)
    assert c.hidden_sizes == [256, 256] and c.actor_hidden_sizes == [256] * 4
    assert (c.log_std_min, c.log_std_max) == (-6.0, 0.0)
    assert policy.critic.n == 2
    assert policy.actor_step.optim.param_groups[0]["weight_decay"] == 1e-4
    assert policy.critic_step.optim.param_groups[0]["weight_decay"] == 0
    linears = [m for m in policy.actor.net.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [256, 256, 256, 256, 2]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"lam": 0.0}, "lam"),
        ({"max_weight": 0.0}, "max_weight"),
        ({"actor_weight_decay": -1.0}, "actor_weight_decay"),
        ({"log_std_min": 1.0, "log_std_max": 0.0}, "log_std_max"),
        ({"action_bound_method": "tanh"}, "action_bound_method"),
    ],
)
def test_bad_settings_are_refused_by_field(options: dict, field: str) -> None:
    with pytest.raises(rlblocks.ConfigError, match=field):
        rlblocks.make_policy("awac", OBS, ACT, **options)


def test_the_unnormalised_weights_need_a_bound() -> None:
    with pytest.raises(rlblocks.ConfigError, match=r"max_weight.*overflows.*algo\.max_weight=20"):
        rlblocks.make_policy("awac", OBS, ACT, normalize_weights=False)
    policy = rlblocks.make_policy("awac", OBS, ACT, normalize_weights=False, max_weight=20.0)
    assert policy.config.max_weight == 20.0


def test_non_box_actions_are_refused() -> None:
    with pytest.raises(rlblocks.ConfigError, match="action spaces"):
        rlblocks.make_policy("awac", OBS, gym.spaces.Discrete(3))
    from rlblocks_algo_awac.awac import AWACPolicy

    with pytest.raises(TypeError, match="AWAC needs a Box action space"):
        AWACPolicy(OBS, gym.spaces.Discrete(3))


# -- the weights ----------------------------------------------------------------------------------
def test_normalised_weights_are_the_batch_softmax_times_its_size() -> None:
    from rlblocks_algo_awac.awac import advantage_weights

    adv = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    w = advantage_weights(adv, lam=0.5, normalize=True, max_weight=None)
    expected = torch.exp(adv / 0.5) / torch.exp(adv / 0.5).sum() * 4
    torch.testing.assert_close(w, expected)
    assert float(w.mean()) == pytest.approx(1.0)
    # a shift of every advantage changes nothing; a scale does
    torch.testing.assert_close(advantage_weights(adv + 100.0, 0.5, True, None), w)
    assert not torch.allclose(advantage_weights(adv * 2, 0.5, True, None), w)
    # lam large: every weight 1 (behaviour cloning)
    torch.testing.assert_close(advantage_weights(adv, 1e9, True, None), torch.ones(4))


def test_weights_are_clipped_at_max_weight() -> None:
    from rlblocks_algo_awac.awac import advantage_weights

    adv = torch.tensor([0.0, 1.0, 2.0, 3.5, 100.0])
    raw = advantage_weights(adv, 1.0, normalize=False, max_weight=20.0)
    torch.testing.assert_close(
        raw, torch.tensor([1.0, math.e, math.exp(2.0), 20.0, 20.0])
    )  # exp(3.5) = 33 and exp(100) are clipped
    normalised = advantage_weights(torch.tensor([0.0, 0.0, 0.0, 5.0]), 1.0, True, 2.0)
    assert float(normalised.max()) == 2.0  # the softmax gives the last about 3.9, clipped
    assert float(normalised[0]) < 0.1


# -- a gradient step ------------------------------------------------------------------------------
def test_a_step_takes_the_papers_losses_from_the_networks_before_it() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("awac", OBS, ACT, hidden_sizes=[16], actor_hidden_sizes=[16],
                                  gamma=0.9, lam=0.7)  # fmt: skip
    buf = data_buffer()
    idx = np.arange(0, 64, 2)
    torch.manual_seed(5)
    batch = policy.process_fn(copy.deepcopy(buf[idx]), buf, idx)
    before = copy.deepcopy(policy)
    seen: dict[str, float] = {}
    for name, step in policy.optim_steps.items():

        def recording(loss, retain_graph=False, name=name, original=step.step) -> None:
            seen[name] = float(loss.detach())
            original(loss, retain_graph=retain_graph)

        step.step = recording
    torch.manual_seed(11)
    policy.learn(batch)

    obs, act = torch.as_tensor(batch.obs), torch.as_tensor(batch.act)
    with torch.no_grad():
        # the target: min of the target critics at a' ~ pi(.|s')
        torch.manual_seed(5)
        obs_next = torch.as_tensor(batch.obs_next)
        act_next = before.actor(obs_next).sample().clamp(-1.0, 1.0)
        done = torch.as_tensor(batch.terminated, dtype=torch.float32)
        q_next = before.critic_target(obs_next, act_next).min(dim=0).values
        y = torch.as_tensor(batch.rew, dtype=torch.float32) + 0.9 * (1 - done) * q_next
        torch.testing.assert_close(batch.returns, y)
        q = before.critic(obs, act)
        critic_loss = (q - y).pow(2).mean(dim=1).sum()
        torch.manual_seed(11)
        dist = before.actor(obs)
        v = before.critic(obs, dist.sample().clamp(-1.0, 1.0)).min(dim=0).values
        adv = q.min(dim=0).values - v
        w = torch.softmax(adv / 0.7, dim=0) * len(adv)
        actor_loss = -(w * dist.log_prob(act)).mean()
    assert seen["critic"] == pytest.approx(float(critic_loss), rel=1e-5)
    assert seen["actor"] == pytest.approx(float(actor_loss), rel=1e-5)
    assert policy.gradient_steps == 1


def _continuous_bandit(n: int = 1_024) -> ReplayBuffer:
    """One-step episodes from random 3-float states with uniformly random 1-float actions and
    reward = the action: the larger the action, the better."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    for _ in range(n):
        act = rng.uniform(-1, 1, 1).astype(np.float32)
        buf.add(
            Batch(
                obs=rng.uniform(-1, 1, 3).astype(np.float32),
                act=act,
                rew=float(act[0]),
                terminated=True,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
            )
        )
    return buf


def test_the_weights_move_the_policy_towards_the_better_actions_of_the_data() -> None:
    # uniform actions in [-1, 1] and Q(s, a) = a: weighted by exp(A / lam), the dataset's
    # larger actions count more and the policy's mean moves up; with lam huge (every weight
    # 1) it clones the data's mean, 0
    torch.manual_seed(0)
    buf = _continuous_bandit()
    space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    means = {}
    for lam in (0.2, 1e9):
        policy = rlblocks.make_policy("awac", OBS, space, hidden_sizes=[32],
                                      actor_hidden_sizes=[32], lam=lam, actor_lr=3e-3,
                                      critic_lr=3e-3, tau=0.05)  # fmt: skip
        for _ in range(400):
            policy.update(256, buf)
        with torch.no_grad():
            means[lam] = policy.actor(torch.as_tensor(buf[buf.sample_indices(0)].obs)).mean
    assert float(means[0.2].mean()) > 0.5 and float(means[0.2].min()) > 0.3
    assert abs(float(means[1e9].mean())) < 0.1


# -- acting ------------------------------------------------------------------------------------
def test_actions_are_samples_in_training_and_the_mean_in_tests() -> None:
    torch.manual_seed(0)
    wide = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
    policy = rlblocks.make_policy("awac", OBS, wide, hidden_sizes=[8], actor_hidden_sizes=[8])
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    policy.eval()
    act = policy(Batch(obs=obs)).act
    with torch.no_grad():
        np.testing.assert_allclose(act, policy.actor(torch.as_tensor(obs)).mean.numpy())
    assert all(wide.contains(a) for a in policy.map_action(act))
    policy.train()
    sampled = policy(Batch(obs=obs)).act
    assert np.abs(sampled).max() <= 1.0 and not np.allclose(sampled, act)


# -- state --------------------------------------------------------------------------------------
def test_a_restored_policy_continues_bit_identically() -> None:
    options = dict(hidden_sizes=[16], actor_hidden_sizes=[16])
    torch.manual_seed(0)
    policy = rlblocks.make_policy("awac", OBS, ACT, **options)
    buf = data_buffer()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 64, 32) for _ in range(6)]

    def step(p, i: int) -> None:
        buf.sampler.sample_index = lambda n, idx=batches[i]: idx
        torch.manual_seed(100 + i)
        p.update(32, buf)

    for i in range(3):
        step(policy, i)
    torch.manual_seed(42)
    restored = rlblocks.make_policy("awac", OBS, ACT, **options)
    restored.load_state_dict(copy.deepcopy(policy.state_dict()))
    restored.load_extra_state(copy.deepcopy(policy.extra_state()))
    for i in range(3, 6):
        step(policy, i)
        step(restored, i)
    for (name, a), b in zip(policy.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


@cuda
def test_the_step_is_captured_on_a_gpu() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("awac", OBS, ACT, device="cuda", hidden_sizes=[32],
                                  actor_hidden_sizes=[32])  # fmt: skip
    buf = data_buffer(256)
    for _ in range(8):
        stats = policy.update(32, buf)
    assert policy._step_graph is not None and policy._step_graph.captured == 1
    assert policy.gradient_steps == 8
    assert all(torch.isfinite(torch.as_tensor(v)) for v in stats.values())


# -- a whole run --------------------------------------------------------------------------------
def test_a_run_from_the_command_line_trains_from_a_dataset_file_and_resumes(
    tmp_path, controller_mixture
) -> None:
    from rlblocks.cli import main as cli

    data, _ = controller_mixture("Pendulum-v1", 0.7, steps=1_000)
    data.save_hdf5(tmp_path / "pendulum.h5")
    run = tmp_path / "run"
    small = ["--set", "algo.hidden_sizes=[16]", "--set", "algo.actor_hidden_sizes=[16]",
             "--set", "trainer.test_interval=100", "--set", "trainer.test_episodes=1",
             "--set", "trainer.checkpoint_interval=100", "--set", "env.num_test_envs=1",
             "--set", "trainer.step_per_round=50", "--set", "trainer.batch_size=32"]  # fmt: skip
    argv = ["train", "awac", "--dataset", str(tmp_path / "pendulum.h5"), "--run-dir", str(run),
            "--max-gradient-steps", "200", "--no-progress", *small]  # fmt: skip
    assert cli(argv) == 0
    agent = rlblocks.load(run)
    assert agent.algo == "awac" and agent.act(np.zeros(3, np.float32)).shape == (1,)
    assert cli(["resume", str(run), "--max-gradient-steps", "300", "--no-progress"]) == 0
    saved = json.loads((run / "result.json").read_text())
    assert saved["gradient_steps"] == 300 and saved["env_steps"] == 0


# -- learning offline ---------------------------------------------------------------------------
def test_awac_learns_pendulum_from_a_mixture_that_behaviour_cloning_cannot(
    controller_mixture, offline_run
) -> None:
    """10,000 steps of Pendulum-v1: the scripted expert (about -150 alone) with 70% of
    its torques replaced by uniformly random ones (the episodes average about -790). AWAC with
    lambda 1 and Pendulum-sized networks and rates (64-64 for all, Adam at 1e-3) reaches a
    mean test return of -250 (seeds 1, 2 and 3: -178, -174 and -172 after 3,000 gradient
    steps); with its weights flattened to 1 (``lam`` 1e9: behaviour cloning) it stays below
    -500 (seeds 1 and 2: -695 and -746 at best in 4,000 steps). About 20 s of CPU."""
    data, mean_return = controller_mixture("Pendulum-v1", 0.7)
    assert -900.0 < mean_return < -600.0
    small = dict(hidden_sizes=[64, 64], actor_hidden_sizes=None, actor_lr=1e-3, critic_lr=1e-3)
    result, _ = offline_run("awac", "Pendulum-v1", data, 6_000, -250.0, **small)
    assert result.solved and result.best_test_return >= -250.0, result
    assert result.env_steps == 0
    control, _ = offline_run("awac", "Pendulum-v1", data, 4_000, **small, lam=1e9)
    assert control.best_test_return < -500.0, control
