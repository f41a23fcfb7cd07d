"""Behaviour cloning: each loss against its formula, the dataset's state normalisation, the
user's networks, a run from the command line, and Pendulum (Box actions) and CartPole (Discrete)
learned offline from a scripted expert's play; the controls: Pendulum's play with its actions
shuffled teaches nothing, and the untrained CartPole network falls at once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlblocks
from rlblocks.collect import Collector
from rlblocks.contracts import Batch, ConfigError
from rlblocks.plugins import FIRST_PARTY, get_registry
from rlblocks.replay import ReplayBuffer

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), dtype=np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)


def shifted_buffer(act_space: gym.Space, n: int = 64) -> ReplayBuffer:
    """``n`` transitions whose observations are far from zero mean and unit scale, with
    actions of ``act_space`` that depend on the observation (seeded)."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    scale = np.array([10.0, 0.1, 3.0], np.float32)
    shift = np.array([5.0, -2.0, 0.0], np.float32)
    for t in range(n):
        obs = (rng.normal(size=3) * scale + shift).astype(np.float32)
        z = (obs - shift) / scale
        if isinstance(act_space, gym.spaces.Box):
            act: Any = np.tanh(z[:2]).astype(np.float32)
        elif isinstance(act_space, gym.spaces.Discrete):
            act = int(z[0] > 0) + int(z[2] > 0)
        else:
            act = np.array([int(z[0] > 0), int(z[1] > 0) + int(z[2] > 0)])
        buf.add(
            Batch(obs=obs, act=act, rew=0.0, terminated=t % 16 == 15, truncated=False,
                  obs_next=obs)
        )  # fmt: skip
    return buf


def test_spec_is_an_offline_first_party_algorithm() -> None:
    spec = get_registry("algo").spec("bc")
    assert spec.training == "offline"
    assert set(spec.action_spaces) == {"Box", "Discrete", "MultiDiscrete"}
    assert spec.networks == ("encoder", "actor")
    assert "bc" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "bc"] == [
        "rlblocks-algo-bc"
    ]
    c = rlblocks.make_policy("bc", OBS, BOX).config
    assert (c.loss, c.lr, c.hidden_sizes, c.obs_norm_eps) == ("mse", 1e-3, [256, 256], 1e-3)
    assert spec.defaults["trainer"]["batch_size"] == 100  # d3rlpy's BC batch
    with pytest.raises(ConfigError, match="loss"):
        rlblocks.make_policy("bc", OBS, BOX, loss="l1")


@pytest.mark.parametrize(
    "space, loss",
    [(BOX, "mse"), (BOX, "nll"), (gym.spaces.Discrete(3), "mse"),
     (gym.spaces.MultiDiscrete([2, 3]), "mse")],
)  # fmt: skip
def test_the_loss_is_the_negative_log_likelihood_of_the_data(space: gym.Space, loss: str) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bc", OBS, space, loss=loss, hidden_sizes=[16])
    buf = shifted_buffer(space)
    policy.fit_obs_norm(buf)
    batch = buf[np.arange(32)]
    obs = policy.normalize_obs(torch.as_tensor(batch.obs))
    with torch.no_grad():
        if policy.kind == "deterministic":
            expected = ((policy.actor(obs) - torch.as_tensor(batch.act)) ** 2).mean()
        elif policy.kind == "gaussian":
            # the tanh-squashed Gaussian's density at the data's action, by hand
            mean, log_std = policy.actor.distribution(obs)
            a = torch.as_tensor(batch.act).clamp(-1 + 1e-6, 1 - 1e-6)
            u = torch.atanh(a)
            normal = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
            expected = -(normal - torch.log(1 - a.pow(2)).sum(-1)).mean()
        elif policy.kind == "categorical":
            expected = F.cross_entropy(policy.actor(obs), torch.as_tensor(batch.act).long())
        else:
            logits = policy.actor(obs)
            act = torch.as_tensor(batch.act).long()
            expected = F.cross_entropy(logits[:, :2], act[:, 0]) + F.cross_entropy(
                logits[:, 2:], act[:, 1]
            )
        got = policy.loss(obs, batch.act)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    # and learning drives it down: the data's actions are a function of the state
    first = float(policy.update(32, buf)["loss"])
    for _ in range(300):
        last = float(policy.update(32, buf)["loss"])
    assert last < 0.5 * first if loss == "mse" else last < first - 1.0


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([2, 3])])
def test_the_greedy_policy_reproduces_the_data(space: gym.Space) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bc", OBS, space, hidden_sizes=[64], lr=3e-3)
    buf = shifted_buffer(space)
    for _ in range(400):
        policy.update(64, buf)
    policy.eval()
    act = policy(Batch(obs=buf.obs[:64])).act
    if isinstance(space, gym.spaces.Box):
        np.testing.assert_allclose(act, buf.act[:64], atol=0.1)
    else:
        assert np.mean(act == buf.act[:64]) >= 0.95
    for a in policy.map_action(act):
        assert space.contains(np.asarray(a, dtype=space.dtype))


def test_observations_are_normalised_with_the_datasets_statistics() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("bc", OBS, BOX, hidden_sizes=[16])
    buf = shifted_buffer(BOX)
    obs = torch.as_tensor(buf.obs[:64])
    assert torch.equal(policy.normalize_obs(obs), obs)  # nothing fitted: the identity
    policy.update(16, buf)  # the first update fits them, from every stored observation
    data = buf.obs[:64].astype(np.float64)
    expected = (data - data.mean(0)) / (data.std(0) + 1e-3)
    torch.testing.assert_close(policy.normalize_obs(obs), torch.as_tensor(expected).float())
    assert float(policy.obs_count) == 64
    policy.eval()
    with torch.no_grad():
        direct = policy.actor(policy.normalize_obs(obs)).numpy()
    np.testing.assert_array_equal(policy(Batch(obs=buf.obs[:64])).act, direct)
    # the statistics are part of the weights: a restored policy acts the same and keeps them
    fresh = rlblocks.make_policy("bc", OBS, BOX, hidden_sizes=[16])
    fresh.load_state_dict(policy.state_dict())
    fresh.eval()
    np.testing.assert_array_equal(fresh(Batch(obs=buf.obs[:64])).act, direct)
    fresh.train()
    other = shifted_buffer(BOX, 32)
    other.obs[:32] *= 7.0
    fresh.update(16, other)
    torch.testing.assert_close(fresh.obs_mean, policy.obs_mean)


def test_obs_norm_is_on_for_vector_observations_only() -> None:
    image = gym.spaces.Box(0, 255, (36, 36, 3), dtype=np.uint8)
    keyed = gym.spaces.Dict({"x": OBS})
    assert rlblocks.make_policy("bc", OBS, BOX).obs_norm
    assert not rlblocks.make_policy("bc", image, BOX).obs_norm
    assert not rlblocks.make_policy("bc", keyed, BOX, hidden_sizes=[8]).obs_norm
    assert not rlblocks.make_policy("bc", OBS, BOX, obs_norm=False).obs_norm
    with pytest.raises(ConfigError, match=r"obs_norm=false"):
        rlblocks.make_policy("bc", keyed, BOX, obs_norm=True)


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)])
def test_the_users_encoder_and_actor_head_are_the_policys(space: gym.Space) -> None:
    torch.manual_seed(0)
    seen: list[str] = []

    class Encoder(torch.nn.Module):
        out_dim = 5

        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 5)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            seen.append("encoder")
            return self.net(obs)

    out = 2 if isinstance(space, gym.spaces.Box) else 3
    head = torch.nn.Linear(5, out)
    policy = rlblocks.make_policy(
        "bc", OBS, space, encoder=lambda o, a: Encoder(), actor=head, hidden_sizes=[16]
    )
    assert policy.custom_networks.keys() == {"encoder", "actor"}
    assert any(m is head for m in policy.actor.modules())
    before = head.weight.detach().clone()
    policy.update(16, shifted_buffer(space))
    assert seen and not torch.equal(before, head.weight)


# -- learning from a scripted expert's play -----------------------------------------------------
@pytest.fixture
def pendulum_play(scripted_play: Callable[..., Any], tmp_path: Path) -> tuple[str, str]:
    """10,000 steps (50 episodes) of the scripted Pendulum expert with Gaussian noise of 0.1
    (torque / 2) on its actions, saved, and the same with its actions shuffled among the rows."""
    data, mean = scripted_play("Pendulum-v1", 10_000, noise=0.1)
    assert mean > -200.0  # the expert, noise and all
    data.save_hdf5(tmp_path / "expert.h5")
    act = data.storage_arrays["act"]
    act[:] = act[np.random.default_rng(0).permutation(len(act))]
    data.save_hdf5(tmp_path / "shuffled.h5")
    return str(tmp_path / "expert.h5"), str(tmp_path / "shuffled.h5")


@pytest.fixture
def cartpole_play(scripted_play: Callable[..., Any], tmp_path: Path) -> str:
    """5,000 steps of the scripted CartPole expert playing 20% random actions, saved."""
    data, mean = scripted_play("CartPole-v1", 5_000, eps=0.2)
    assert mean > 150.0
    data.save_hdf5(tmp_path / "expert.h5")
    return str(tmp_path / "expert.h5")


def _clone(path: str, env: str, steps: int, stop: float, tmp: Path, *sets: str) -> Any:
    return rlblocks.train(
        "bc", env=env, dataset=path, max_gradient_steps=steps, seed=0, stop_reward=stop,
        overrides=["trainer.test_interval=250", *sets], loggers=[], progress=False, run_dir=tmp,
    )  # fmt: skip


@pytest.mark.parametrize("loss", ["mse", "nll"])
def test_bc_learns_pendulum_from_a_scripted_experts_play(
    pendulum_play: tuple[str, str], loss: str, tmp_path: Path
) -> None:
    # from scratch on the dataset alone: seed 0 passes -200 (the mean of 10 test episodes)
    # within 1,000 gradient steps with either loss (random play: about -1,200)
    result = _clone(
        pendulum_play[0], "Pendulum-v1", 2_000, -200.0, tmp_path / "run", f"algo.loss={loss}"
    )
    assert result.solved and result.best_test_return >= -200.0, result
    assert result.env_steps == 0


def test_pendulum_with_the_actions_shuffled_teaches_nothing(
    pendulum_play: tuple[str, str], tmp_path: Path
) -> None:
    # the same states and the same actions, paired at random: nothing to imitate
    result = _clone(pendulum_play[1], "Pendulum-v1", 2_000, -200.0, tmp_path / "run")
    assert not result.solved and result.best_test_return < -700.0, result


def test_bc_learns_cartpole_from_a_noisy_scripted_expert(
    cartpole_play: str, tmp_path: Path
) -> None:
    # the expert's choice is the data's majority in every state: cross-entropy finds it (seed
    # 0: 500 at the first test, after 250 gradient steps)
    result = _clone(cartpole_play, "CartPole-v1", 2_000, 475.0, tmp_path / "run")
    assert result.solved and result.best_test_return >= 475.0, result


def test_the_untrained_cartpole_policy_is_far_from_it() -> None:
    # the control: what the network acts before cloning (greedy, the same 10 test episodes)
    torch.manual_seed(0)
    envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=10, seed=100_000)
    policy = rlblocks.make_policy("bc", envs.observation_space, envs.action_space).eval()
    stats = Collector(policy, envs, None, exploration=False, seed=100_000).collect(n_episode=10)
    envs.close()
    assert np.mean(stats.returns) < 100.0, stats.returns  # seed 0: 13.5


def test_a_run_from_the_command_line_trains_from_a_dataset_file_and_resumes(
    cartpole_play: str, tmp_path: Path
) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    small = ["--set", "trainer.test_interval=100", "--set", "trainer.test_episodes=2",
             "--set", "env.num_test_envs=2", "--set", "trainer.checkpoint_interval=100",
             "--set", "algo.hidden_sizes=[32]"]  # fmt: skip
    argv = ["train", "bc", "--env", "CartPole-v1", "--dataset", cartpole_play, "--run-dir",
            str(run), "--max-gradient-steps", "200", "--no-progress", *small]  # fmt: skip
    assert cli(argv) == 0
    agent = rlblocks.load(run)
    assert agent.algo == "bc" and agent.act(np.zeros(4, np.float32)) in (0, 1)
    # behaviour cloning of a good player may solve CartPole in 200 steps: go on anyway
    assert cli(["resume", str(run), "--max-gradient-steps", "300", "--no-progress",
                "--continue-solved"]) == 0  # fmt: skip
    saved = json.loads((run / "result.json").read_text())
    assert saved["gradient_steps"] == 300 and saved["env_steps"] == 0
