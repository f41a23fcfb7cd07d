"""IQL: the expectile loss and the clipped weights, a gradient step as the paper's three losses
(Box with either policy, Discrete), what the expectile does to V and the policy on a toy
dataset, acting, config checks, an exact continuation from saved state, the captured step, a run
from the command line, and Pendulum and CartPole learned offline from a controller's play mixed
with poor actions, where plain behaviour cloning (``beta = 0``) of the same data stays far
below."""

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
DISCRETE = gym.spaces.Discrete(3)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def data_buffer(n: int = 64, discrete: bool = False) -> ReplayBuffer:
    """``n`` transitions with 3-float observations, random actions (2 floats, or one of 3),
    random rewards and some terminal steps (seeded)."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    for t in range(n):
        act = rng.integers(0, 3) if discrete else rng.uniform(-1, 1, 2).astype(np.float32)
        buf.add(
            Batch(
                obs=rng.uniform(-1, 1, 3).astype(np.float32),
                act=act,
                rew=float(rng.normal()),
                terminated=t % 16 == 15,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
            )
        )
    return buf


# -- the spec and the config ----------------------------------------------------------------------
def test_spec_is_an_offline_first_party_algorithm_for_box_and_discrete_actions() -> None:
    spec = get_registry("algo").spec("iql")
    assert spec.training == "offline"
    assert spec.action_spaces == ("Box", "Discrete")
    assert spec.defaults["trainer"]["batch_size"] == 256
    assert spec.defaults["trainer"]["max_gradient_steps"] == 1_000_000
    assert "iql" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "iql"] == [
        "rlblocks-algo-iql"
    ]


def test_defaults_are_the_authors_locomotion_settings() -> None:
    c = rlblocks.make_policy("iql", OBS, ACT).config
    assert (c.expectile, c.beta, c.max_weight) == (0.7, 3.0, 100.0)
    assert (c.actor_lr, c.critic_lr, c.value_lr) == (3e-4, 3e-4, 3e-4)
    assert (c.gamma, c.tau, c.n_step, c.hidden_sizes) == (0.99, 0.005, 1, [256, 256])
    assert not c.deterministic_actor and c.deterministic_eval
    assert (c.log_std_min, c.log_std_max) == (-5.0, 2.0)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"expectile": 0.0}, "expectile"),
        ({"expectile": 1.0}, "expectile"),
        ({"expectile": -0.2}, "expectile"),
        ({"beta": -1.0}, "beta"),
        ({"max_weight": 0.0}, "max_weight"),
        ({"value_lr": 0.0}, "value_lr"),
        ({"log_std_min": 1.0, "log_std_max": 0.0}, "log_std_max"),
        ({"action_bound_method": "tanh"}, "action_bound_method"),
    ],
)
def test_bad_settings_are_refused_by_field(options: dict, field: str) -> None:
    with pytest.raises(rlblocks.ConfigError, match=field):
        rlblocks.make_policy("iql", OBS, ACT, **options)


def test_the_deterministic_policy_needs_box_actions() -> None:
    with pytest.raises(rlblocks.ConfigError, match=r"algo\.deterministic_actor is a policy"):
        rlblocks.make_policy("iql", OBS, DISCRETE, deterministic_actor=True)
    with pytest.raises(rlblocks.ConfigError, match="action spaces"):
        rlblocks.make_policy("iql", OBS, gym.spaces.MultiDiscrete([2, 2]))


# -- the two functions -----------------------------------------------------------------------------
def test_the_expectile_loss_weighs_each_side_of_zero() -> None:
    from rlblocks_algo_iql.iql import expectile_loss

    diff = torch.tensor([2.0, -2.0, 0.5, 0.0])
    torch.testing.assert_close(
        expectile_loss(diff, 0.7), torch.tensor([0.7 * 4.0, 0.3 * 4.0, 0.7 * 0.25, 0.0])
    )
    # tau = 0.5 is half the squared error
    torch.testing.assert_close(expectile_loss(diff, 0.5), 0.5 * diff.pow(2))


def _expectile(x: np.ndarray, tau: float) -> float:
    """The tau-expectile of ``x`` by bisection on its first-order condition
    ``tau E[(x - e)+] = (1 - tau) E[(e - x)+]``."""
    lo, hi = float(x.min()), float(x.max())
    for _ in range(100):
        e = 0.5 * (lo + hi)
        if tau * np.maximum(x - e, 0).mean() > (1 - tau) * np.maximum(e - x, 0).mean():
            lo = e
        else:
            hi = e
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("tau", [0.1, 0.5, 0.7, 0.9, 0.99])
def test_the_constant_that_minimises_the_loss_is_the_expectile(tau: float) -> None:
    from rlblocks_algo_iql.iql import expectile_loss

    x = torch.as_tensor(np.random.default_rng(1).exponential(size=500))
    grid = torch.linspace(float(x.min()), float(x.max()), 4_001, dtype=torch.float64)
    losses = expectile_loss(x[None, :] - grid[:, None], tau).mean(dim=1)  # one row per v
    best = float(grid[losses.argmin()])
    step = float(grid[1] - grid[0])
    assert best == pytest.approx(_expectile(x.numpy(), tau), abs=2 * step)
    if tau == 0.5:
        assert best == pytest.approx(float(x.mean()), abs=2 * step)


def test_higher_expectiles_move_towards_the_largest_value() -> None:
    x = np.random.default_rng(2).normal(size=1_000)
    values = [_expectile(x, tau) for tau in (0.1, 0.5, 0.7, 0.9, 0.999)]
    assert values == sorted(values) and values[-1] < x.max()
    assert values[-1] > np.quantile(x, 0.95)


def test_the_weights_are_the_exponentiated_advantage_clipped_at_max_weight() -> None:
    from rlblocks_algo_iql.iql import advantage_weights

    adv = torch.tensor([-1.0, 0.0, 1.0, 1.5, 10.0])
    w = advantage_weights(adv, beta=3.0, max_weight=100.0)
    expected = [math.exp(-3.0), 1.0, math.exp(3.0), math.exp(4.5), 100.0]
    torch.testing.assert_close(w, torch.tensor(expected))
    assert float(w.max()) == 100.0  # exp(4.5) = 90.0 passes, exp(30) is clipped
    torch.testing.assert_close(advantage_weights(adv, 0.0, 100.0), torch.ones(5))  # BC
    torch.testing.assert_close(advantage_weights(adv, 3.0, 2.0).max(), torch.tensor(2.0))


# -- a gradient step -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gaussian", "deterministic", "discrete"])
def test_a_step_takes_the_papers_three_losses_from_the_networks_before_it(kind: str) -> None:
    torch.manual_seed(0)
    discrete = kind == "discrete"
    options = dict(hidden_sizes=[16], gamma=0.9)
    if kind == "deterministic":
        options["deterministic_actor"] = True
    policy = rlblocks.make_policy("iql", OBS, DISCRETE if discrete else ACT, **options)
    buf = data_buffer(discrete=discrete)
    idx = np.arange(0, 64, 2)
    batch = policy.process_fn(copy.deepcopy(buf[idx]), buf, idx)
    before = copy.deepcopy(policy)
    seen: dict[str, float] = {}
    for name, step in policy.optim_steps.items():

        def recording(loss, retain_graph=False, name=name, original=step.step) -> None:
            seen[name] = float(loss.detach())
            original(loss, retain_graph=retain_graph)

        step.step = recording
    policy.learn(batch)

    with torch.no_grad():
        obs, obs_next = torch.as_tensor(batch.obs), torch.as_tensor(batch.obs_next)
        act = torch.as_tensor(batch.act)
        if discrete:
            act = act.long()
            q_target = before.critic_target(obs).gather(
                2, act.view(1, -1, 1).expand(2, -1, 1)
            ).squeeze(2).min(dim=0).values  # fmt: skip
            q = before.critic(obs).gather(2, act.view(1, -1, 1).expand(2, -1, 1)).squeeze(2)
        else:
            q_target = before.critic_target(obs, act).min(dim=0).values
            q = before.critic(obs, act)
        v = before.value(obs)
        u = q_target - v
        value_loss = (torch.where(u < 0, 0.3, 0.7) * u.pow(2)).mean()
        done = torch.as_tensor(batch.terminated, dtype=torch.float32)
        y = torch.as_tensor(batch.rew) + 0.9 * (1.0 - done) * before.value(obs_next)
        critic_loss = (q - y).pow(2).mean(dim=1).sum()
        w = torch.exp(3.0 * u).clamp(max=100.0)
        out = before.actor(obs)
        if kind == "deterministic":
            log_lik = -(out - act).pow(2).sum(dim=1)
        elif discrete:
            log_lik = torch.log_softmax(out.logits, dim=1).gather(1, act[:, None])[:, 0]
        else:
            std = out.std
            log_lik = (
                -0.5 * ((act - out.mean) / std).pow(2) - std.log() - 0.5 * math.log(2 * math.pi)
            ).sum(dim=1)
        actor_loss = -(w * log_lik).mean()
    assert seen["value"] == pytest.approx(float(value_loss), rel=1e-5)
    assert seen["critic"] == pytest.approx(float(critic_loss), rel=1e-5)
    assert seen["actor"] == pytest.approx(float(actor_loss), rel=1e-5)
    # every network moved, and the target critics by tau = 0.005 of the way
    for name in ("value", "critic", "actor"):
        moved = [
            not torch.equal(a, b)
            for a, b in zip(getattr(policy, name).parameters(), getattr(before, name).parameters())
        ]
        assert any(moved), name
    for target, old_target, online in zip(
        policy.critic_target.parameters(), before.critic_target.parameters(),
        policy.critic.parameters(),
    ):  # fmt: skip
        torch.testing.assert_close(target, old_target + 0.005 * (online - old_target))
    assert policy.gradient_steps == 1


def _one_step_bandit(n: int = 512) -> ReplayBuffer:
    """One-step episodes from random 3-float states, actions 0 and 1 taken equally often,
    reward = the action (1 for action 1, 0 for action 0)."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    for t in range(n):
        buf.add(
            Batch(
                obs=rng.uniform(-1, 1, 3).astype(np.float32),
                act=t % 2,
                rew=float(t % 2),
                terminated=True,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
            )
        )
    return buf


@pytest.mark.parametrize("expectile", [0.5, 0.9])
def test_v_learns_the_expectile_and_the_policy_the_better_action(expectile: float) -> None:
    # Q(s, 0) = 0 and Q(s, 1) = 1 in every state, half the data each: V learns the
    # expectile of {0, 1}, which is the expectile itself (0.5: the mean; 0.9: 0.9). The policy
    # weighs action 1 by exp(3 (1 - V)) and action 0 by exp(-3 V), e^3 = 20 times less, so its
    # weighted likelihood is largest at pi(1|s) = e^3 / (1 + e^3) = 0.95 whatever V is, though
    # the data takes both equally often; with beta = 0 it clones the data's 1/2
    torch.manual_seed(0)
    buf = _one_step_bandit()
    policies = {}
    for beta in (3.0, 0.0):
        policy = rlblocks.make_policy(
            "iql", OBS, gym.spaces.Discrete(2), hidden_sizes=[32], expectile=expectile,
            beta=beta, actor_lr=3e-3, critic_lr=3e-3, value_lr=3e-3, tau=0.05,
        )  # fmt: skip
        for _ in range(600):
            policy.update(128, buf)
        policies[beta] = policy
    obs = torch.as_tensor(buf[buf.sample_indices(0)].obs)
    with torch.no_grad():
        v = policies[3.0].value(obs)
        prob_1 = {beta: p.actor(obs).probs[:, 1] for beta, p in policies.items()}
    assert float(v.mean()) == pytest.approx(expectile, abs=0.05)
    assert float(v.std()) < 0.12  # the same in every state, up to the fit's noise
    e3 = math.exp(3.0)
    assert float(prob_1[3.0].mean()) == pytest.approx(e3 / (1 + e3), abs=0.03)
    assert float(prob_1[3.0].min()) > 0.8
    assert float(prob_1[0.0].mean()) == pytest.approx(0.5, abs=0.04)
    assert float(prob_1[0.0].max()) < 0.8


# -- acting ------------------------------------------------------------------------------------
def test_box_actions_are_samples_in_training_and_the_mean_in_tests() -> None:
    torch.manual_seed(0)
    wide = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
    policy = rlblocks.make_policy("iql", OBS, wide, hidden_sizes=[8])
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    policy.eval()
    act = policy(Batch(obs=obs)).act
    with torch.no_grad():
        np.testing.assert_allclose(act, policy.actor(torch.as_tensor(obs)).mean.numpy())
    assert all(wide.contains(a) for a in policy.map_action(act))
    policy.train()
    sampled = policy(Batch(obs=obs)).act
    assert sampled.shape == (5, 2) and np.abs(sampled).max() <= 1.0
    assert not np.allclose(sampled, act)


def test_discrete_actions_are_indices_and_map_action_adds_the_spaces_start() -> None:
    torch.manual_seed(0)
    space = gym.spaces.Discrete(3, start=1)
    policy = rlblocks.make_policy("iql", OBS, space, hidden_sizes=[8])
    policy.eval()
    obs = np.random.default_rng(0).uniform(-1, 1, (6, 3)).astype(np.float32)
    act = policy(Batch(obs=obs)).act
    with torch.no_grad():
        mode = policy.actor(torch.as_tensor(obs)).logits.argmax(dim=1).numpy()
    np.testing.assert_array_equal(act, mode)  # the most likely index
    env_act = policy.map_action(act)
    np.testing.assert_array_equal(env_act, mode + 1)
    assert all(space.contains(int(a)) for a in env_act)


# -- state ------------------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [False, True])
def test_a_restored_policy_continues_bit_identically(discrete: bool) -> None:
    space = DISCRETE if discrete else ACT
    torch.manual_seed(0)
    policy = rlblocks.make_policy("iql", OBS, space, hidden_sizes=[16])
    buf = data_buffer(discrete=discrete)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 64, 32) for _ in range(6)]

    def step(p, i: int) -> None:
        buf.sampler.sample_index = lambda n, idx=batches[i]: idx
        torch.manual_seed(100 + i)
        p.update(32, buf)

    for i in range(3):
        step(policy, i)
    torch.manual_seed(42)
    restored = rlblocks.make_policy("iql", OBS, space, hidden_sizes=[16])
    restored.load_state_dict(copy.deepcopy(policy.state_dict()))
    restored.load_extra_state(copy.deepcopy(policy.extra_state()))
    assert restored.gradient_steps == 3 and set(restored.optim_steps) == {
        "actor", "critic", "value"
    }  # fmt: skip
    for i in range(3, 6):
        step(policy, i)
        step(restored, i)
    for (name, a), b in zip(policy.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


@cuda
def test_captured_step_matches_the_eager_step() -> None:
    torch.manual_seed(0)
    eager = rlblocks.make_policy("iql", OBS, ACT, device="cuda", cuda_graph=False,
                                 hidden_sizes=[32], deterministic_actor=True)  # fmt: skip
    graphed = copy.deepcopy(eager)
    graphed.config.cuda_graph = True
    buf_a, buf_b = data_buffer(256), data_buffer(256)
    rng = np.random.default_rng(3)
    for _ in range(10):
        idx = rng.integers(0, 256, 32)
        buf_a.sampler.sample_index = lambda n, idx=idx: idx
        buf_b.sampler.sample_index = lambda n, idx=idx: idx
        stats_a, stats_b = eager.update(32, buf_a), graphed.update(32, buf_b)
    assert graphed._step_graph is not None and graphed._step_graph.captured == 1
    for (name, a), b in zip(eager.state_dict().items(), graphed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    for key in stats_a:
        torch.testing.assert_close(stats_a[key], stats_b[key], rtol=1e-4, atol=1e-5)


# -- a whole run --------------------------------------------------------------------------------
def test_a_run_from_the_command_line_trains_from_a_dataset_file_and_resumes(
    tmp_path, controller_mixture
) -> None:
    from rlblocks.cli import main as cli

    data, _ = controller_mixture("CartPole-v1", 0.6, steps=1_000)
    data.save_hdf5(tmp_path / "cartpole.h5")
    run = tmp_path / "run"
    small = ["--set", "algo.hidden_sizes=[16]", "--set", "trainer.test_interval=100",
             "--set", "trainer.test_episodes=2", "--set", "trainer.checkpoint_interval=100",
             "--set", "env.num_test_envs=2", "--set", "trainer.step_per_round=50",
             "--set", "trainer.batch_size=32"]  # fmt: skip
    dataset = str(tmp_path / "cartpole.h5")
    argv = ["train", "iql", "--env", "CartPole-v1", "--dataset", dataset, "--run-dir", str(run),
            "--max-gradient-steps", "200", "--no-progress", *small]  # fmt: skip
    assert cli(argv) == 0
    agent = rlblocks.load(run)
    assert agent.algo == "iql" and agent.act(np.zeros(4, np.float32)) in (0, 1)
    assert cli(["resume", str(run), "--max-gradient-steps", "300", "--no-progress"]) == 0
    saved = json.loads((run / "result.json").read_text())
    assert saved["gradient_steps"] == 300 and saved["env_steps"] == 0


# -- learning offline ---------------------------------------------------------------------------
#: Pendulum- and CartPole-sized settings: 64-64 networks, Adam at 1e-3
SMALL = dict(hidden_sizes=[64, 64], actor_lr=1e-3, critic_lr=1e-3, value_lr=1e-3)


@pytest.fixture(scope="module")
def pendulum_data(controller_mixture) -> ReplayBuffer:
    """10,000 steps of Pendulum-v1: the scripted expert (about -150 alone) with 70% of
    its torques replaced by uniformly random ones; the episodes average about -790."""
    data, mean_return = controller_mixture("Pendulum-v1", 0.7)
    assert -900.0 < mean_return < -600.0
    return data


@pytest.fixture(scope="module")
def cartpole_data(controller_mixture) -> ReplayBuffer:
    """10,000 steps of CartPole-v1: the scripted expert (500 alone) with 60% of its
    actions replaced by "push left"; the episodes last about 17 steps."""
    data, mean_return = controller_mixture("CartPole-v1", 0.6)
    assert mean_return < 30.0
    return data


def test_iql_learns_pendulum_from_a_mixture_that_behaviour_cloning_cannot(
    pendulum_data, offline_run
) -> None:
    """IQL with the authors' expectile and temperature reaches a mean test return of -250
    (seeds 1, 2 and 3: -145, -183 and -192 at their first test past it, after 3,000 to 4,000
    gradient steps); the same learner with ``beta = 0``, which weighs every action 1 and so
    clones the data, stays below -500 (seeds 1 and 2: -656 and -730 at best in 5,000 steps).
    About 25 s of CPU."""
    result, _ = offline_run("iql", "Pendulum-v1", pendulum_data, 6_000, -250.0, **SMALL)
    assert result.solved and result.best_test_return >= -250.0, result
    assert result.env_steps == 0
    control, _ = offline_run("iql", "Pendulum-v1", pendulum_data, 5_000, **SMALL, beta=0.0)
    assert control.best_test_return < -500.0, control


def test_iql_learns_cartpole_from_a_mixture_that_behaviour_cloning_cannot(
    cartpole_data, offline_run
) -> None:
    """Discrete actions: IQL reaches a mean test return of 400 (seeds 1, 2 and 3: 438, 428 and
    453 after 2,000 to 3,000 gradient steps) from episodes of about 17 steps; behaviour cloning
    (``beta = 0``) learns "push left" and falls within about 10 steps. About 20 s of CPU."""
    result, _ = offline_run("iql", "CartPole-v1", cartpole_data, 6_000, 400.0, **SMALL)
    assert result.solved and result.best_test_return >= 400.0, result
    control, _ = offline_run("iql", "CartPole-v1", cartpole_data, 3_000, **SMALL, beta=0.0)
    assert control.best_test_return < 50.0, control
