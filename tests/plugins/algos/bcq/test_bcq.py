"""BCQ: the perturbation bounded by phi, the soft clipped double-Q target over n generated
actions, acting by Q_1 over the candidates, the VAE's loss and what it learns, config checks, an
exact continuation from saved state, a run from the command line, and Pendulum learned offline
from a scripted controller's noisy play, where the same learner without the batch constraint
(phi = 2) stays far below."""

from __future__ import annotations

import contextlib
import copy
import json
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
from rlblocks.algo import BasePolicy
from rlblocks.collect import Collector
from rlblocks.contracts import Batch
from rlblocks.plugins import FIRST_PARTY, get_registry
from rlblocks.replay import ReplayBuffer
from rlblocks.trainers import OfflineTrainer

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
SMALL = dict(hidden_sizes=[16], vae_hidden_sizes=[16])


def data_buffer(n: int = 64, act_fn=None) -> ReplayBuffer:
    """``n`` unfinished transitions with 3-float observations and 2-float actions that depend on
    the observation (``act_fn(obs)``; default ``tanh`` of twice its first two features), zero
    reward (seeded)."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    act_fn = act_fn or (lambda obs: np.tanh(2.0 * obs[:2]))
    for _ in range(n):
        obs = rng.uniform(-1, 1, 3).astype(np.float32)
        buf.add(
            Batch(
                obs=obs,
                act=np.asarray(act_fn(obs), np.float32),
                rew=0.0,
                terminated=False,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
            )
        )
    return buf


def fixed_samples(buf: ReplayBuffer, idx: np.ndarray) -> None:
    """Make ``buf`` draw rows ``idx`` at every sample."""
    buf.sampler.sample_index = lambda n: idx


# -- the spec and the config ----------------------------------------------------------------------
def test_spec_is_an_offline_first_party_algorithm() -> None:
    spec = get_registry("algo").spec("bcq")
    assert spec.training == "offline"
    assert spec.action_spaces == ("Box",) and spec.observation_spaces == ("Box",)
    assert spec.networks == ("encoder", "actor", "critic")
    assert spec.defaults["trainer"]["batch_size"] == 100
    assert spec.defaults["trainer"]["max_gradient_steps"] == 1_000_000
    assert "bcq" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "bcq"] == [
        "rlblocks-algo-bcq"
    ]


def test_defaults_are_the_papers() -> None:
    policy = rlblocks.make_policy("bcq", OBS, ACT)
    c = policy.config
    assert (c.phi, c.lmbda, c.num_sampled_actions) == (0.05, 0.75, 10)
    assert (c.actor_lr, c.critic_lr, c.vae_lr) == (1e-3, 1e-3, 1e-3)
    assert (c.gamma, c.tau, c.n_step) == (0.99, 0.005, 1)
    assert c.hidden_sizes == [400, 300] and c.vae_hidden_sizes == [750, 750]
    assert (c.latent_dim, c.kl_weight, c.latent_clip) == (None, 0.5, 0.5)
    assert policy.vae.latent_dim == 2 * 2  # twice the action dimension
    assert policy.eval_latents.shape == (10, 4)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"phi": -0.1}, "phi"),
        ({"lmbda": 1.5}, "lmbda"),
        ({"num_sampled_actions": 0}, "num_sampled_actions"),
        ({"latent_dim": 0}, "latent_dim"),
        ({"kl_weight": -1.0}, "kl_weight"),
        ({"latent_clip": 0.0}, "latent_clip"),
        ({"vae_hidden_sizes": [0]}, "vae_hidden_sizes"),
        ({"vae_lr": 0.0}, "vae_lr"),
        ({"action_bound_method": "tanh"}, "action_bound_method"),
    ],
)
def test_bad_settings_are_refused_by_field(options: dict, field: str) -> None:
    with pytest.raises(rlblocks.ConfigError, match=field):
        rlblocks.make_policy("bcq", OBS, ACT, **options)


def test_non_box_actions_are_refused() -> None:
    with pytest.raises(rlblocks.ConfigError, match="action spaces"):
        rlblocks.make_policy("bcq", OBS, gym.spaces.Discrete(3))
    from rlblocks_algo_bcq.bcq import BCQPolicy

    with pytest.raises(TypeError, match="discrete-bcq"):
        BCQPolicy(OBS, gym.spaces.Discrete(3))


def test_actions_are_scaled_to_the_envs_bounds() -> None:
    wide = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
    policy = rlblocks.make_policy("bcq", OBS, wide, **SMALL)
    policy.eval()
    act = policy.map_action(policy(Batch(obs=np.zeros((4, 3), np.float32))).act)
    assert all(wide.contains(a) for a in act)


# -- 2. the perturbation model ---------------------------------------------------------------------
@pytest.mark.parametrize("phi", [0.05, 0.3])
def test_the_perturbation_is_bounded_by_phi(phi: float) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, phi=phi, **SMALL)
    with torch.no_grad():  # weights large enough to push the tanh to its ends
        for p in policy.actor.parameters():
            p.mul_(50.0)
    obs, act = torch.randn(512, 3), torch.rand(512, 2) * 2 - 1
    with torch.no_grad():
        xi = policy.actor.xi(obs, act)
        perturbed = policy.actor(obs, act)
    assert xi.abs().max() <= phi
    assert xi.abs().max() > 0.99 * phi  # saturated: the bound is reached, not just respected
    # clip(a + xi, -1, 1): within phi of the generated action and inside the action bounds
    torch.testing.assert_close(perturbed, (act + xi).clamp(-1.0, 1.0))
    assert (perturbed - act).abs().max() <= phi + 1e-6
    assert perturbed.abs().max() <= 1.0


def test_with_phi_zero_the_candidates_are_the_vaes_actions() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, phi=0.0, num_sampled_actions=4, **SMALL)
    obs = torch.randn(5, 3)
    z = torch.randn(20, 4).clamp(-0.5, 0.5)
    with torch.no_grad():
        candidates, repeated = policy.candidate_actions(obs, policy.actor, z)
        torch.testing.assert_close(candidates, policy.vae.decode(repeated, z))
    torch.testing.assert_close(repeated, obs.repeat_interleave(4, dim=0))


# -- 3. the soft clipped double-Q target -----------------------------------------------------------
def test_soft_clipped_double_q_weighs_the_minimum_by_lambda() -> None:
    from rlblocks_algo_bcq.bcq import soft_clipped_double_q

    q = torch.tensor([[1.0, 5.0, -2.0], [3.0, 2.0, -2.0]])
    torch.testing.assert_close(
        soft_clipped_double_q(q, 0.75), torch.tensor([1.5, 2.75, -2.0])
    )  # 0.75 * min + 0.25 * max, per column
    torch.testing.assert_close(soft_clipped_double_q(q, 1.0), q.min(dim=0).values)  # TD3's
    torch.testing.assert_close(soft_clipped_double_q(q, 0.5), q.mean(dim=0))


class _TableCritic(nn.Module):
    """Two critics with ``Q_1(s, a) = sum(a)`` and ``Q_2(s, a) = -sum(a) + 1``, whatever ``s``."""

    def forward(self, obs: Any, act: torch.Tensor, *, member: int | None = None) -> torch.Tensor:
        q = torch.stack([act.sum(-1), 1.0 - act.sum(-1)])
        return q if member is None else q[member : member + 1]


def test_the_target_is_the_best_of_n_generated_actions_under_the_soft_clipped_q() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, num_sampled_actions=6, lmbda=0.75, **SMALL)
    policy.critic_target = _TableCritic()
    obs_next = torch.randn(4, 3)
    torch.manual_seed(7)
    value = policy.target_value(obs_next)
    # the same draws, by hand: 6 latents per state, the target perturbation, then the soft
    # clipped double Q of each candidate, the best of each state's 6
    torch.manual_seed(7)
    repeated = obs_next.repeat_interleave(6, dim=0)
    with torch.no_grad():
        candidates = policy.actor_target(repeated, policy.vae.decode(repeated))
    s = candidates.sum(-1)
    q1, q2 = s, 1.0 - s
    soft = 0.75 * torch.minimum(q1, q2) + 0.25 * torch.maximum(q1, q2)
    torch.testing.assert_close(value, soft.view(4, 6).max(dim=1).values)
    assert value.shape == (4,)


def test_the_critics_regress_on_the_processed_target() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, gamma=0.9, **SMALL)
    buf = data_buffer()
    idx = np.arange(16)
    fixed_samples(buf, idx)
    batch = buf[idx]
    batch.rew = np.linspace(-1, 1, 16).astype(np.float32)
    batch.terminated = np.arange(16) % 4 == 0
    torch.manual_seed(3)
    processed = policy.process_fn(copy.deepcopy(batch), buf, idx)
    torch.manual_seed(3)
    with torch.no_grad():
        value = policy.target_value(torch.as_tensor(batch.obs_next))
    expected = torch.as_tensor(batch.rew) + 0.9 * torch.as_tensor(~batch.terminated) * value
    torch.testing.assert_close(processed.returns, expected)


# -- 4. the gradient step -------------------------------------------------------------------------
def test_the_vae_loss_is_reconstruction_plus_half_the_kl_to_the_unit_gaussian() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, **SMALL)
    twin = copy.deepcopy(policy)  # the networks before the step
    buf = data_buffer()
    idx = np.arange(32)
    obs, act = torch.as_tensor(buf.obs[:32]), torch.as_tensor(buf.act[:32])
    torch.manual_seed(5)
    stats = policy.learn(policy.process_fn(buf[idx], buf, idx))
    # the same draws by hand (the target's latents first, then the VAE's sample), with torch's
    # KL divergence
    torch.manual_seed(5)
    twin.process_fn(buf[idx], buf, idx)
    with torch.no_grad():
        features = twin.vae.encoder(obs)
        mean, log_std = twin.vae.encode_net(torch.cat([features, act], -1)).chunk(2, -1)
        std = log_std.clamp(-4.0, 15.0).exp()
        recon = twin.vae._decode(features, mean + std * torch.randn_like(mean))
    kl = torch.distributions.kl_divergence(
        torch.distributions.Normal(mean, std), torch.distributions.Normal(0.0, 1.0)
    ).mean()
    recon_loss = ((recon - act) ** 2).mean()
    torch.testing.assert_close(stats["loss/recon"], recon_loss)
    torch.testing.assert_close(stats["loss/kl"], kl)
    torch.testing.assert_close(stats["loss/vae"], recon_loss + 0.5 * kl)


def test_the_actor_step_maximises_q1_of_the_perturbed_generated_actions() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, phi=0.5, actor_lr=1e-2, **SMALL)
    policy.critic = _TableCritic()  # Q_1 = sum(a): the best perturbation is +phi everywhere

    class _NoStep:
        def step(self, loss: torch.Tensor, retain_graph: bool = False) -> None:
            pass

        def frozen(self) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()

    policy.critic_step = _NoStep()
    buf = data_buffer()
    obs = torch.as_tensor(buf.obs[:64])
    with torch.no_grad():
        z = policy.vae.sample_latents(64, "cpu")
        generated = policy.vae.decode(obs, z)
        before = policy.actor.xi(obs, generated).mean()
    for _ in range(100):
        policy.learn(policy.process_fn(*_sample(buf)))
    with torch.no_grad():
        generated = policy.vae.decode(obs, z)
        after = policy.actor.xi(obs, generated)
    assert float(after.mean()) > float(before) + 0.2
    assert float(after.min()) > 0.4  # every perturbation near +phi = 0.5


def _sample(buf: ReplayBuffer) -> tuple[Batch, ReplayBuffer, np.ndarray]:
    batch, idx = buf.sample(32)
    return batch, buf, idx


def test_every_part_steps_and_the_targets_move_tau_each_step() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, tau=0.5, **SMALL)
    actor0 = [p.clone() for p in policy.actor_target.parameters()]
    critic0 = [p.clone() for p in policy.critic_target.parameters()]
    stats = policy.update(32, data_buffer())
    assert policy.gradient_steps == 1
    assert {name: s.steps for name, s in policy.optim_steps.items()} == {
        "vae": 1, "actor": 1, "critic": 1
    }  # fmt: skip
    for old, new, online in zip(actor0, policy.actor_target.parameters(),
                                policy.actor.parameters()):  # fmt: skip
        torch.testing.assert_close(new, 0.5 * old + 0.5 * online)
    for old, new, online in zip(critic0, policy.critic_target.parameters(),
                                policy.critic.parameters()):  # fmt: skip
        torch.testing.assert_close(new, 0.5 * old + 0.5 * online)
    expected = {"loss/vae", "loss/recon", "loss/kl", "loss/critic", "loss/actor", "q/data"}
    assert set(stats) == expected
    assert all(math.isfinite(float(v)) for v in stats.values())


def test_the_vae_learns_the_datasets_actions() -> None:
    # narrow data: one action per state; decoded from the prior, the VAE proposes it
    torch.manual_seed(0)
    policy = rlblocks.make_policy(
        "bcq", OBS, ACT, hidden_sizes=[16], vae_hidden_sizes=[64, 64], vae_lr=3e-3
    )
    buf = data_buffer(256)
    for _ in range(400):
        policy.update(64, buf)
    obs, act = torch.as_tensor(buf.obs[:256]), torch.as_tensor(buf.act[:256])
    with torch.no_grad():
        generated = policy.vae.decode(obs)
    assert float((generated - act).abs().mean()) < 0.1
    untrained = rlblocks.make_policy("bcq", OBS, ACT, hidden_sizes=[16], vae_hidden_sizes=[64])
    with torch.no_grad():
        assert float((untrained.vae.decode(obs) - act).abs().mean()) > 0.3


# -- 5. acting -------------------------------------------------------------------------------------
def test_acting_takes_the_candidate_with_the_highest_q1() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, num_sampled_actions=8, **SMALL)
    policy.eval()
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    act = policy(Batch(obs=obs)).act
    with torch.no_grad():
        candidates, repeated = policy.candidate_actions(
            torch.as_tensor(obs), policy.actor, policy.eval_latents.repeat(5, 1)
        )
        q1 = policy.critic(repeated, candidates, member=0).view(5, 8)
    best = candidates.view(5, 8, 2)[torch.arange(5), q1.argmax(dim=1)]
    np.testing.assert_allclose(act, best.numpy(), rtol=1e-6)
    assert act.shape == (5, 2)


def test_tests_act_deterministically_and_training_draws_fresh_latents() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, phi=0.0, **SMALL)
    obs = np.random.default_rng(0).uniform(-1, 1, (6, 3)).astype(np.float32)
    policy.eval()
    first = policy(Batch(obs=obs)).act
    np.testing.assert_array_equal(policy(Batch(obs=obs)).act, first)
    # the latents are saved with the weights: a restored policy acts the same
    torch.manual_seed(1)
    restored = rlblocks.make_policy("bcq", OBS, ACT, phi=0.0, **SMALL)
    restored.load_state_dict(policy.state_dict())
    restored.eval()
    np.testing.assert_array_equal(restored(Batch(obs=obs)).act, first)
    policy.train()
    assert not np.array_equal(policy(Batch(obs=obs)).act, first)
    random_tests = rlblocks.make_policy("bcq", OBS, ACT, deterministic_eval=False, **SMALL)
    random_tests.eval()
    assert not np.array_equal(random_tests(Batch(obs=obs)).act, random_tests(Batch(obs=obs)).act)


# -- saved state -----------------------------------------------------------------------------------
def test_a_restored_policy_continues_bit_identically() -> None:
    """Weights, the three optimizers, the targets and the gradient-step count survive
    ``state_dict`` / ``extra_state``: a copy restored after 3 steps takes the same next steps."""
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bcq", OBS, ACT, **SMALL)
    buf = data_buffer()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 64, 32) for _ in range(7)]

    def step(p: Any, i: int) -> None:
        fixed_samples(buf, batches[i])
        torch.manual_seed(100 + i)
        p.update(32, buf)

    for i in range(3):
        step(policy, i)
    torch.manual_seed(42)  # another start: everything must come from the saved state
    restored = rlblocks.make_policy("bcq", OBS, ACT, **SMALL)
    restored.load_state_dict(copy.deepcopy(policy.state_dict()))
    restored.load_extra_state(copy.deepcopy(policy.extra_state()))
    assert restored.gradient_steps == 3
    for i in range(3, 7):
        step(policy, i)
        step(restored, i)
    for (name, a), b in zip(policy.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


# -- a whole run -----------------------------------------------------------------------------------
def test_cli_trains_bcq_from_a_dataset_and_resumes(tmp_path: Path) -> None:
    from rlblocks.cli import main as cli

    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=1, seed=0)
    data = rlblocks.make_buffer("replay", size=1_000, num_envs=1, seed=0)
    Collector(None, envs, data, seed=0).collect(n_step=1_000, random=True)
    envs.close()
    data.save_hdf5(tmp_path / "pendulum.h5")
    run = tmp_path / "run"
    small = ["--set", "algo.hidden_sizes=[16]", "--set", "algo.vae_hidden_sizes=[16]",
             "--set", "trainer.test_interval=100", "--set", "trainer.test_episodes=1",
             "--set", "trainer.checkpoint_interval=100", "--set", "trainer.batch_size=32",
             "--set", "env.num_test_envs=1", "--set", "trainer.step_per_round=50"]  # fmt: skip
    dataset = str(tmp_path / "pendulum.h5")
    argv = ["train", "bcq", "--env", "Pendulum-v1", "--dataset", dataset, "--run-dir", str(run),
            "--max-gradient-steps", "200", "--no-progress", *small]  # fmt: skip
    assert cli(argv) == 0
    agent = rlblocks.load(run)
    assert agent.algo == "bcq"
    assert agent.act(np.array([1.0, 0.0, 0.0], np.float32)).shape == (1,)
    assert cli(["resume", str(run), "--max-gradient-steps", "300", "--no-progress"]) == 0
    saved = json.loads((run / "result.json").read_text())
    assert saved["gradient_steps"] == 300 and saved["env_steps"] == 0


# -- learning offline ------------------------------------------------------------------------------
class SwingUp(BasePolicy):
    """A scripted Pendulum-v1 controller with Gaussian noise on its actions: energy pumping
    (``u ~ (E* - E) sign(theta_dot)``) far from the top, a PD controller near it. Noiseless it
    averages about -130 per episode; the noise makes it a behaviour policy with one narrow
    band of actions per state."""

    def __init__(self, envs: Any, noise: float, seed: int) -> None:
        super().__init__(envs.observation_space, envs.action_space)
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        cos, sin, speed = np.asarray(batch.obs, np.float64).T
        angle = np.arctan2(sin, cos)
        # theta'' = 15 sin(theta) + 3 u: E = speed^2 / 2 + 15 cos(theta), 15 upright at rest
        energy = 0.5 * speed**2 + 15.0 * cos
        torque = np.where(
            cos > 0.85, -(10.0 * angle + 2.0 * speed), 1.5 * (15.0 - energy) * np.sign(speed + 1e-6)
        )
        act = np.clip(torque / 2.0, -1.0, 1.0) + self.noise * self.rng.normal(size=torque.shape)
        return Batch(act=np.clip(act, -1.0, 1.0)[:, None].astype(np.float32), state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        return {}


@pytest.fixture(scope="module")
def _swing_up_play() -> ReplayBuffer:
    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=4, seed=0)
    try:
        data = rlblocks.make_buffer("replay", size=10_000, num_envs=4, seed=0)
        stats = Collector(SwingUp(envs, noise=0.3, seed=0), envs, data, seed=0).collect(
            n_step=10_000
        )
    finally:
        envs.close()
    assert len(data) == 10_000 and -200 < stats.mean_return < -100  # about -143
    return data


@pytest.fixture
def swing_up_play(_swing_up_play: ReplayBuffer) -> ReplayBuffer:
    """A narrow dataset: 10,000 env steps (4 envs, 50 episodes) of :class:`SwingUp` with
    Gaussian noise of 0.3 ([-1, 1] units) on every action. Each test gets its own copy."""
    return copy.deepcopy(_swing_up_play)


def _bcq_offline(data: ReplayBuffer, phi: float, stop_reward: float | None = None) -> Any:
    """BCQ with Pendulum-sized networks (64-64 for every network, the paper's learning rates,
    batch and other settings), ``phi`` as given, on ``data`` for at most 2,000 gradient steps,
    tested on 10 episodes every 500; the result and the policy."""
    test_envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=10, seed=100)
    try:
        torch.manual_seed(1)
        policy = rlblocks.make_policy(
            "bcq", test_envs.observation_space, test_envs.action_space,
            hidden_sizes=[64, 64], vae_hidden_sizes=[64, 64], phi=phi,
        )  # fmt: skip
        result = OfflineTrainer(
            policy,
            Collector(policy, test_envs, None, exploration=False, seed=100),
            data,
            max_gradient_steps=2_000,
            batch_size=100,
            test_interval=500,
            test_episodes=10,
            stop_reward=stop_reward,
        ).run()
        return result, policy
    finally:
        test_envs.close()


def test_bcq_learns_pendulum_from_a_noisy_controllers_play(swing_up_play: ReplayBuffer) -> None:
    """From the dataset alone, without an env step, BCQ reaches a mean test return of -300
    within 2,000 gradient steps (seed 1: -230 at 1,000 steps; seeds 2 and 3: -241 and -267;
    an untrained policy scores about -1,200), and holds it on 20 episodes from other starts.
    About 15 s of CPU."""
    result, policy = _bcq_offline(swing_up_play, phi=0.05, stop_reward=-300.0)
    assert result.solved and result.best_test_return >= -300.0, result
    assert result.env_steps == 0 and result.gradient_steps <= 2_000
    other_envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=10, seed=5)
    policy.eval()
    unseen = Collector(policy, other_envs, None, exploration=False, seed=1_000)
    assert unseen.collect(n_episode=20).mean_return >= -400.0
    other_envs.close()


def test_without_the_batch_constraint_the_same_data_teaches_little(
    swing_up_play: ReplayBuffer,
) -> None:
    """``phi = 2``: the perturbation reaches every action from every generated one, so the
    VAE constrains nothing and the learner is offline DDPG with BCQ's critics. It trusts its
    critics on actions the controller never took and stays far below BCQ on the same data and
    budget: seeds 1-3 peak at -1,181, -1,192 and -1,201 within 2,000 gradient steps (given
    3,000 they reach -570 to -1,040, against BCQ's -150). About 15 s of CPU."""
    result, _ = _bcq_offline(swing_up_play, phi=2.0)
    assert result.gradient_steps == 2_000
    assert result.best_test_return < -900.0, result
