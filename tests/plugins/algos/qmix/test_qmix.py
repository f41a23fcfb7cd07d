"""QMIX and VDN: the mixers, masked acting, targets, refusals, and runs by name (recurrent too)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import rlblocks
from rlblocks.contracts import Batch, ConfigError
from rlblocks_algo_qmix.config import QMIXConfig, VDNConfig
from rlblocks_algo_qmix.qmix import QMixer, QMIXPolicy, VDNPolicy


def _spaces(n: int = 3, d: int = 4, a: int = 5, s: int = 6, masked: bool = True):
    entries = {
        "obs": gym.spaces.Box(-1, 1, (n, d), np.float32),
        "state": gym.spaces.Box(-1, 1, (s,), np.float32),
    }
    if masked:
        entries["action_mask"] = gym.spaces.MultiBinary((n, a))
    return gym.spaces.Dict(entries), gym.spaces.MultiDiscrete([a] * n)


def test_the_qmix_mixer_is_monotonic_in_every_agent() -> None:
    torch.manual_seed(0)
    mixer = QMixer(n_agents=3, state_dim=6, embed=8, hidden=16)
    q = torch.randn(64, 3, requires_grad=True)
    state = torch.randn(64, 6)
    mixer(q, state).sum().backward()
    assert (q.grad >= 0).all() and (q.grad > 0).any()
    # it depends on the state: the same utilities mix differently
    assert not torch.allclose(mixer(q, state), mixer(q, state.flip(0)))


def test_vdn_sums_the_utilities() -> None:
    obs_space, act_space = _spaces(masked=False)
    policy = VDNPolicy(obs_space, act_space, VDNConfig())
    q = torch.randn(7, 3)
    torch.testing.assert_close(policy.model["mixer"](q, torch.zeros(7, 6)), q.sum(-1))


def test_acting_and_exploring_honour_the_masks() -> None:
    obs_space, act_space = _spaces()
    policy = QMIXPolicy(obs_space, act_space, QMIXConfig(eps_start=1.0, eps_end=1.0))
    policy.seed(0)
    rng = np.random.default_rng(0)
    mask = (rng.random((256, 3, 5)) < 0.3).astype(np.int8)
    mask[..., 4] = 1  # at least one legal action each
    obs = {
        "obs": rng.standard_normal((256, 3, 4)).astype(np.float32),
        "state": rng.standard_normal((256, 6)).astype(np.float32),
        "action_mask": mask,
    }
    out = policy(Batch(obs=obs))
    assert out.act.shape == (256, 3)
    picked = np.take_along_axis(mask, out.act[..., None], -1)
    assert picked.all()  # greedy: legal
    noisy = policy.exploration_noise(out.act, out)  # epsilon 1: all random, all legal
    assert np.take_along_axis(mask, noisy[..., None], -1).all()
    assert len(np.unique(noisy)) > 1


def test_the_target_picks_legal_next_actions_with_the_online_network() -> None:
    obs_space, act_space = _spaces(n=2, a=3)
    policy = VDNPolicy(obs_space, act_space, VDNConfig(agent_id=False))
    # Q_a = obs[0] * head: the online network prefers action 0, the target network action 2
    heads = (
        (policy.model["agent"], [3.0, 2.0, 1.0]),
        (policy.target.net["agent"], [1.0, 2.0, 3.0]),
    )
    with torch.no_grad():
        for net, head in heads:
            for layer in net.body:
                if isinstance(layer, torch.nn.Linear):
                    layer.weight.zero_()
                    layer.bias.zero_()
            net.body[0].weight[0, 0] = 1.0
            net.body[2].weight[0, 0] = 1.0
            net.body[4].weight[:, 0] = torch.tensor(head)
    obs_next = {
        "obs": torch.tensor([[[1.0, 0, 0, 0], [1.0, 0, 0, 0]]]),
        "state": torch.zeros(1, 6),
        "action_mask": torch.tensor([[[0, 1, 1], [1, 1, 0]]]),
    }
    with torch.no_grad():
        value = policy.target_value(obs_next)
    # online picks: agent 0 action 1 (0 is masked), agent 1 action 0; valued by the target
    assert value.item() == pytest.approx(2.0 + 1.0)
    policy.config.double = False  # the target's own legal argmax: actions 2 and 1
    with torch.no_grad():
        assert policy.target_value(obs_next).item() == pytest.approx(3.0 + 2.0)


def test_a_single_agent_env_is_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match="joint view") as info:
        rlblocks.train("qmix", env="CartPole-v1", max_env_steps=100, loggers=[], quiet=True,
                       run_dir=tmp_path / "run")  # fmt: skip
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="joint view"):
        QMIXPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))


@pytest.mark.parametrize("algo", ["qmix", "vdn"])
def test_a_recurrent_run_by_name_learns_from_episode_windows(algo: str, tmp_path) -> None:
    result = rlblocks.train(
        algo, seed=0, max_env_steps=400, loggers=[], progress=False, quiet=True,
        run_dir=tmp_path / "run",
        overrides=[
            "algo.recurrent=true", "algo.rnn_hidden=16", "algo.hidden_sizes=[16]",
            "buffer.sampler=sequence", "buffer.start=episode", "buffer.length=25",
            "trainer.batch_size=8", "trainer.test_interval=400", "trainer.test_episodes=2",
            "env.num_envs=2", "env.num_test_envs=2",
        ],
    )  # fmt: skip
    assert result.env_steps == 400 and result.gradient_steps > 0
    assert np.isfinite(result.best_test_return)


def test_a_recurrent_run_needs_windows(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"buffer\.sampler=sequence"):
        rlblocks.train("qmix", max_env_steps=100, loggers=[], quiet=True,
                       run_dir=tmp_path / "run", overrides=["algo.recurrent=true"])  # fmt: skip


def test_the_conformance_probe_fails_a_masked_action() -> None:
    from rlblocks.testing.algo_checks import JointProbeEnv

    env = JointProbeEnv()
    obs, _ = env.reset(seed=0)
    legal = obs["action_mask"].argmax(axis=1)
    env.step(legal)  # legal actions pass
    mask = env._mask
    agent = int(np.flatnonzero(mask.min(axis=1) == 0)[0])  # an agent with a masked action
    act = mask.argmax(axis=1)
    act[agent] = int(np.flatnonzero(mask[agent] == 0)[0])
    with pytest.raises(AssertionError, match="masked action"):
        env.step(act)


def test_a_run_on_subprocesses_is_the_run_in_process(tmp_path) -> None:
    def run(backend: str) -> tuple[int, float]:
        result = rlblocks.train(
            "vdn", seed=0, max_env_steps=200, run_dir=tmp_path / backend, loggers=[],
            progress=False, quiet=True,
            overrides=[
                f"env.backend={backend}", "env.num_envs=2", "env.num_test_envs=2",
                "trainer.test_interval=200", "trainer.test_episodes=2", "trainer.batch_size=16",
            ],
        )  # fmt: skip
        return result.gradient_steps, result.best_test_return

    in_process = run("dummy")
    assert in_process[0] > 0
    assert run("subproc") == in_process
