"""CRR: the binary and exponential filters (and the clipping), the advantage's baselines (mean and
max over the policy's actions; exact for Discrete), the critic's target, a gradient step as the
paper's losses, hard and Polyak target updates, what the filters do on a toy dataset, config
checks, an exact continuation from saved state, the captured step, a run from the command line,
and Pendulum and CartPole learned offline from a controller's play mixed with poor actions,
where the same learner with its filter flattened to 1 (behaviour cloning) stays far below."""

from __future__ import annotations

import copy
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo import Categorical
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
    spec = get_registry("algo").spec("crr")
    assert spec.training == "offline"
    assert spec.action_spaces == ("Box", "Discrete")
    assert spec.defaults["trainer"]["max_gradient_steps"] == 1_000_000
    assert "crr" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "crr"] == [
        "rlblocks-algo-crr"
    ]


def test_defaults_are_the_papers_filter_and_acmes_optimisation() -> None:
    policy = rlblocks.make_policy("crr", OBS, ACT)
    c = policy.config
    assert (c.filter, c.advantage, c.num_action_samples) == ("exp", "mean", 4)
    assert (c.beta, c.max_weight, c.target_update_interval) == (1.0, 20.0, 100)
    assert (c.actor_lr, c.critic_lr, c.gamma, c.n_step) == (3e-4, 3e-4, 0.99, 1)
    assert policy.critic.n == 1  # one plain critic
    assert policy.critic_target.tau is None and policy.actor_target.tau is None


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"filter": "soft"}, "filter"),
        ({"advantage": "median"}, "advantage"),
        ({"num_action_samples": 0}, "num_action_samples"),
        ({"beta": 0.0}, "beta"),
        ({"max_weight": 0.0}, "max_weight"),
        ({"target_update_interval": -1}, "target_update_interval"),
        ({"log_std_min": 1.0, "log_std_max": 0.0}, "log_std_max"),
    ],
)
def test_bad_settings_are_refused_by_field(options: dict, field: str) -> None:
    with pytest.raises(rlblocks.ConfigError, match=field):
        rlblocks.make_policy("crr", OBS, ACT, **options)


def test_other_action_spaces_are_refused() -> None:
    with pytest.raises(rlblocks.ConfigError, match="action spaces"):
        rlblocks.make_policy("crr", OBS, gym.spaces.MultiDiscrete([2, 2]))
    from rlblocks_algo_crr.crr import CRRPolicy

    with pytest.raises(TypeError, match="CRR needs a Box or Discrete action space"):
        CRRPolicy(OBS, gym.spaces.MultiBinary(2))


# -- the filters ----------------------------------------------------------------------------------
def test_the_binary_filter_keeps_the_actions_with_a_positive_advantage() -> None:
    from rlblocks_algo_crr.crr import binary_filter

    adv = torch.tensor([-3.0, -1e-6, 0.0, 1e-6, 7.0])
    torch.testing.assert_close(binary_filter(adv), torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0]))


def test_the_exponential_filter_is_clipped_at_max_weight() -> None:
    from rlblocks_algo_crr.crr import exp_filter

    adv = torch.tensor([-2.0, 0.0, 1.0, 2.9, 3.1, 50.0])
    got = exp_filter(adv, beta=1.0, max_weight=20.0)
    expected = [math.exp(-2.0), 1.0, math.e, math.exp(2.9), 20.0, 20.0]  # e^2.9 = 18.2
    torch.testing.assert_close(got, torch.tensor(expected))
    # beta is a temperature: exp(A / beta)
    torch.testing.assert_close(exp_filter(adv[:3], 2.0, 20.0), torch.exp(adv[:3] / 2.0))
    assert float(exp_filter(torch.tensor([1e4]), 1.0, 20.0)) == 20.0  # no overflow to inf


# -- the advantage's baseline ----------------------------------------------------------------------
@pytest.mark.parametrize("advantage", ["mean", "max"])
def test_the_box_baseline_is_the_mean_or_max_q_of_m_actions_of_the_policy(advantage) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy(
        "crr", OBS, ACT, hidden_sizes=[16], num_action_samples=5, advantage=advantage
    )
    obs = torch.randn(4, 3)
    with torch.no_grad():
        dist = policy.actor(obs)
    torch.manual_seed(7)
    got = policy.baseline(obs, dist)
    torch.manual_seed(7)  # the same draws, by hand: m samples of N(mean, std), clipped
    samples = (dist.mean[:, None] + dist.std[:, None] * torch.randn(4, 5, 2)).clamp(-1.0, 1.0)
    with torch.no_grad():
        q = policy.critic(obs.repeat_interleave(5, dim=0), samples.reshape(20, 2))[0].view(4, 5)
    expected = q.mean(dim=1) if advantage == "mean" else q.max(dim=1).values
    torch.testing.assert_close(got, expected)
    assert not got.requires_grad


def test_the_discrete_baselines_are_the_exact_mean_and_a_sampled_max() -> None:
    torch.manual_seed(0)
    q_all = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 5.0]])
    dist = Categorical(torch.log(torch.tensor([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]])))
    mean_policy = rlblocks.make_policy("crr", OBS, DISCRETE, hidden_sizes=[8])
    torch.testing.assert_close(
        mean_policy.baseline(None, dist, q_all), torch.tensor([2.3, 1.0])
    )  # 0.2 + 0.6 + 1.5 and 0 - 0.25 + 1.25
    max_policy = rlblocks.make_policy(
        "crr", OBS, DISCRETE, hidden_sizes=[8], advantage="max", num_action_samples=64
    )
    # 64 draws miss none of three likely actions: the max over the samples is the max over all
    torch.testing.assert_close(max_policy.baseline(None, dist, q_all), torch.tensor([3.0, 5.0]))
    one = rlblocks.make_policy("crr", OBS, DISCRETE, hidden_sizes=[8], advantage="max",
                               num_action_samples=1)  # fmt: skip
    # one draw: Q of one of the actions, never more than their max
    draws = torch.stack([one.baseline(None, dist, q_all) for _ in range(50)])
    assert set(draws[:, 0].tolist()) <= {1.0, 2.0, 3.0} and len(set(draws[:, 0].tolist())) > 1


def test_the_critics_target_evaluates_the_target_policy() -> None:
    torch.manual_seed(0)
    discrete = rlblocks.make_policy("crr", OBS, DISCRETE, hidden_sizes=[8])
    obs_next = torch.randn(5, 3)
    with torch.no_grad():
        expected = (discrete.actor_target(obs_next).probs
                    * discrete.critic_target(obs_next)[0]).sum(dim=1)  # fmt: skip
        torch.testing.assert_close(discrete.target_value(obs_next), expected)
    box = rlblocks.make_policy("crr", OBS, ACT, hidden_sizes=[8])
    with torch.no_grad():
        torch.manual_seed(3)
        got = box.target_value(obs_next)
        torch.manual_seed(3)
        act_next = box.actor_target(obs_next).sample().clamp(-1.0, 1.0)
        torch.testing.assert_close(got, box.critic_target(obs_next, act_next)[0])


# -- a gradient step ------------------------------------------------------------------------------
@pytest.mark.parametrize(("discrete", "kind"), [(False, "exp"), (False, "binary"), (True, "exp")])
def test_a_step_takes_the_papers_losses_from_the_networks_before_it(discrete, kind) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy(
        "crr", OBS, DISCRETE if discrete else ACT, hidden_sizes=[16], filter=kind, beta=0.5
    )
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
    torch.manual_seed(11)
    policy.learn(batch)

    obs, returns = torch.as_tensor(batch.obs), batch.returns
    with torch.no_grad():
        dist = before.actor(obs)
        torch.manual_seed(11)
        if discrete:
            act = torch.as_tensor(batch.act).long()
            q_all = before.critic(obs)[0]
            q = q_all.gather(1, act[:, None])[:, 0]
            baseline = (dist.probs * q_all).sum(dim=1)
        else:
            act = torch.as_tensor(batch.act)
            q = before.critic(obs, act)[0]
            baseline = before.baseline(obs, dist)
        adv = q - baseline
        f = (adv > 0).float() if kind == "binary" else torch.exp(adv / 0.5).clamp(max=20.0)
        actor_loss = -(f * dist.log_prob(act)).mean()
    assert seen["critic"] == pytest.approx(float((q - returns).pow(2).mean()), rel=1e-5)
    assert seen["actor"] == pytest.approx(float(actor_loss), rel=1e-5)
    if kind == "binary":
        assert 0 < float(f.sum()) < len(f)  # the filter kept some actions, not all
    assert policy.gradient_steps == 1


def test_targets_are_copied_every_interval_or_follow_by_polyak_averaging() -> None:
    torch.manual_seed(0)
    buf = data_buffer()
    hard = rlblocks.make_policy("crr", OBS, ACT, hidden_sizes=[8], target_update_interval=3)
    first = copy.deepcopy(hard.critic_target.state_dict())
    for _ in range(2):
        hard.update(16, buf)
    for name, value in hard.critic_target.state_dict().items():
        assert torch.equal(value, first[name]), name  # not yet
    hard.update(16, buf)
    for target, online in [(hard.critic_target.net, hard.critic),
                           (hard.actor_target.net, hard.actor)]:  # fmt: skip
        for a, b in zip(target.parameters(), online.parameters(), strict=True):
            assert torch.equal(a, b)  # copies after the third step
    soft = rlblocks.make_policy("crr", OBS, ACT, hidden_sizes=[8], target_update_interval=0,
                                tau=0.5)  # fmt: skip
    old = [p.clone() for p in soft.actor_target.parameters()]
    soft.update(16, buf)
    for o, t, online in zip(old, soft.actor_target.parameters(), soft.actor.parameters()):
        torch.testing.assert_close(t, o + 0.5 * (online - o))


def _one_step_bandit(n: int = 512) -> ReplayBuffer:
    """One-step episodes from random 3-float states, actions 0 and 1 taken equally often,
    reward = the action."""
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


@pytest.mark.parametrize("kind", ["binary", "exp"])
def test_the_filter_makes_the_policy_prefer_the_better_of_two_equally_common_actions(kind):
    # Q(s, 0) = 0, Q(s, 1) = 1, and the data takes each half the time. With p = pi(1|s) the
    # advantages over the policy's mean are 1 - p and -p: the binary filter keeps action 1
    # only, so p goes to 1; the exponential one weighs them e^(1 - p) and e^(-p), whose
    # weighted likelihood is largest at p = e / (1 + e) = 0.73 (beta = 1); flattened to 1
    # (beta = 1e9) it clones the data's 1/2
    torch.manual_seed(0)
    buf = _one_step_bandit()
    probs = {}
    for beta in (1.0, 1e9) if kind == "exp" else (1.0,):
        policy = rlblocks.make_policy(
            "crr", OBS, gym.spaces.Discrete(2), hidden_sizes=[32], filter=kind, beta=beta,
            actor_lr=3e-3, critic_lr=3e-3, target_update_interval=10,
        )  # fmt: skip
        for _ in range(400):
            policy.update(128, buf)
        obs = torch.as_tensor(buf[buf.sample_indices(0)].obs)
        with torch.no_grad():
            probs[beta] = policy.actor(obs).probs[:, 1]
    if kind == "binary":
        assert float(probs[1.0].min()) > 0.85
    else:
        assert float(probs[1.0].mean()) == pytest.approx(math.e / (1 + math.e), abs=0.04)
        assert float(probs[1.0].min()) > 0.55
        assert float(probs[1e9].mean()) == pytest.approx(0.5, abs=0.04)
        assert float(probs[1e9].max()) < float(probs[1.0].mean())


# -- state --------------------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [False, True])
def test_a_restored_policy_continues_bit_identically(discrete: bool) -> None:
    space = DISCRETE if discrete else ACT
    options = dict(hidden_sizes=[16], target_update_interval=4, advantage="max")
    torch.manual_seed(0)
    policy = rlblocks.make_policy("crr", OBS, space, **options)
    buf = data_buffer(discrete=discrete)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 64, 32) for _ in range(7)]

    def step(p, i: int) -> None:
        buf.sampler.sample_index = lambda n, idx=batches[i]: idx
        torch.manual_seed(100 + i)
        p.update(32, buf)

    for i in range(3):
        step(policy, i)
    torch.manual_seed(42)
    restored = rlblocks.make_policy("crr", OBS, space, **options)
    restored.load_state_dict(copy.deepcopy(policy.state_dict()))
    restored.load_extra_state(copy.deepcopy(policy.extra_state()))
    for i in range(3, 7):  # across the hard update at step 4
        step(policy, i)
        step(restored, i)
    for (name, a), b in zip(policy.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_hard_update_schedule_follows_the_gradient_step_count_after_a_restore() -> None:
    # the schedule counts gradient steps, which a checkpoint keeps: a restored policy copies
    # its targets at the same steps as the policy it was saved from
    torch.manual_seed(0)
    options = dict(hidden_sizes=[8], target_update_interval=4)
    policy = rlblocks.make_policy("crr", OBS, ACT, **options)
    buf = data_buffer()
    for _ in range(3):
        policy.update(16, buf)
    restored = rlblocks.make_policy("crr", OBS, ACT, **options)
    restored.load_state_dict(copy.deepcopy(policy.state_dict()))
    restored.load_extra_state(copy.deepcopy(policy.extra_state()))
    restored.update(16, buf)  # the fourth step: a copy
    for a, b in zip(restored.critic_target.net.parameters(), restored.critic.parameters()):
        assert torch.equal(a, b)


@cuda
def test_the_captured_step_copies_the_targets_on_schedule() -> None:
    # two graphs, one for the steps that copy the targets and one for the others; the copy
    # of step 12 comes from a replay of the first
    torch.manual_seed(0)
    policy = rlblocks.make_policy("crr", OBS, ACT, device="cuda", hidden_sizes=[32],
                                  target_update_interval=3)  # fmt: skip
    buf = data_buffer(256)
    for _ in range(12):
        stats = policy.update(32, buf)
    assert policy._step_graph is not None and policy._step_graph.captured == 2
    assert policy.gradient_steps == 12
    assert all(torch.isfinite(torch.as_tensor(v)) for v in stats.values())
    for target, online in [(policy.critic_target.net, policy.critic),
                           (policy.actor_target.net, policy.actor)]:  # fmt: skip
        for a, b in zip(target.parameters(), online.parameters(), strict=True):
            assert torch.equal(a, b)
    policy.update(32, buf)  # step 13 moves only the online networks
    moved = [not torch.equal(a, b) for a, b in zip(policy.critic_target.net.parameters(),
                                                    policy.critic.parameters())]  # fmt: skip
    assert any(moved)


# -- a whole run --------------------------------------------------------------------------------
def test_a_run_from_the_command_line_trains_from_a_dataset_file_and_resumes(
    tmp_path, controller_mixture
) -> None:
    from rlblocks.cli import main as cli

    data, _ = controller_mixture("Pendulum-v1", 0.7, steps=1_000)
    data.save_hdf5(tmp_path / "pendulum.h5")
    run = tmp_path / "run"
    small = ["--set", "algo.hidden_sizes=[16]", "--set", "trainer.test_interval=100",
             "--set", "trainer.test_episodes=1", "--set", "trainer.checkpoint_interval=100",
             "--set", "env.num_test_envs=1", "--set", "trainer.step_per_round=50",
             "--set", "trainer.batch_size=32", "--set", "algo.filter=binary"]  # fmt: skip
    dataset = str(tmp_path / "pendulum.h5")
    argv = ["train", "crr", "--env", "Pendulum-v1", "--dataset", dataset, "--run-dir", str(run),
            "--max-gradient-steps", "200", "--no-progress", *small]  # fmt: skip
    assert cli(argv) == 0
    agent = rlblocks.load(run)
    assert agent.algo == "crr" and agent.policy.config.filter == "binary"
    assert cli(["resume", str(run), "--max-gradient-steps", "300", "--no-progress"]) == 0
    saved = json.loads((run / "result.json").read_text())
    assert saved["gradient_steps"] == 300 and saved["env_steps"] == 0


# -- learning offline ---------------------------------------------------------------------------
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


def test_crr_learns_pendulum_from_a_mixture_that_behaviour_cloning_cannot(
    pendulum_data, offline_run
) -> None:
    """CRR exp with the paper's filter (mean of 4 actions, beta 1, clip 20) and Pendulum-sized
    networks and rates (64-64, Adam at 1e-3) reaches a mean test return of -250 (seeds 1, 2
    and 3: -143, -169 and -167 after 2,000 gradient steps); flattened to behaviour cloning
    (``beta`` 1e9, so every weight is 1) it stays below -500 (seeds 1 and 2: -748 and -765 at
    best in 4,000 steps). About 20 s of CPU."""
    small = dict(hidden_sizes=[64, 64], actor_lr=1e-3, critic_lr=1e-3)
    result, _ = offline_run("crr", "Pendulum-v1", pendulum_data, 5_000, -250.0, **small)
    assert result.solved and result.best_test_return >= -250.0, result
    assert result.env_steps == 0
    control, _ = offline_run("crr", "Pendulum-v1", pendulum_data, 4_000, **small, beta=1e9)
    assert control.best_test_return < -500.0, control


def test_crr_learns_cartpole_from_a_mixture_that_behaviour_cloning_cannot(
    cartpole_data, offline_run
) -> None:
    """Discrete actions, CRR exp with its defaults but 64-64 networks: a mean test return of
    400 (seeds 1, 2 and 3: 429, 435 and 500 after 2,000 gradient steps) from episodes of about
    17 steps; behaviour cloning (``beta`` 1e9) learns "push left" and falls within about 10
    steps. About 20 s of CPU."""
    small = dict(hidden_sizes=[64, 64])
    result, _ = offline_run("crr", "CartPole-v1", cartpole_data, 6_000, 400.0, **small)
    assert result.solved and result.best_test_return >= 400.0, result
    control, _ = offline_run("crr", "CartPole-v1", cartpole_data, 3_000, **small, beta=1e9)
    assert control.best_test_return < 50.0, control
