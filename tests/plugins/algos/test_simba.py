"""The SimBa network option (``algo.network = "simba"``): the builder's layout (embedding,
pre-LayerNorm residual blocks, final LayerNorm), running-statistics normalisation that only
training collects move and that checkpoints keep, the algorithms that take it (and those that
refuse it), runs from the command line, and SAC+SimBa solving Pendulum from scratch."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
from rlblocks.algo.nets import (
    MLP,
    SIMBA_DEFAULTS,
    RSNorm,
    SimbaBlock,
    SimbaEncoder,
    SimbaMLP,
    make_encoder,
    network_body,
    simba_size,
)
from rlblocks.cli import main as cli
from rlblocks.collect import Collector
from rlblocks.contracts import Batch, ConfigError
from rlblocks.replay import ReplayBuffer

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
TWO = gym.spaces.Discrete(2)


# -- the builder -----------------------------------------------------------------------------------


def test_simba_mlp_is_embedding_residual_blocks_final_layernorm_and_head() -> None:
    net = SimbaMLP(5, width=16, blocks=2, out_dim=3)
    layers = list(net)
    assert isinstance(layers[0], nn.Linear) and layers[0].in_features == 5
    assert layers[0].out_features == 16
    assert [type(m) for m in layers[1:3]] == [SimbaBlock, SimbaBlock]
    assert isinstance(layers[3], nn.LayerNorm) and layers[3].normalized_shape == (16,)
    assert isinstance(layers[4], nn.Linear) and (layers[4].in_features, layers[4].out_features) == (
        16,
        3,
    )
    block = layers[1]
    assert isinstance(block.norm, nn.LayerNorm)
    assert (block.up.in_features, block.up.out_features) == (16, 64)  # 4x the width
    assert (block.down.in_features, block.down.out_features) == (64, 16)
    assert net(torch.randn(7, 5)).shape == (7, 3) and net.out_dim == 3
    body = SimbaMLP(5, width=16, blocks=0)
    assert isinstance(list(body)[-1], nn.LayerNorm) and body.out_dim == 16


def test_a_block_adds_its_branch_to_the_input_and_normalises_before_it() -> None:
    torch.manual_seed(0)
    block = SimbaBlock(8)
    x = torch.randn(4, 8) * 5 + 3
    branch = block.down(block.act(block.up(block.norm(x))))
    torch.testing.assert_close(block(x), x + branch)
    nn.init.zeros_(block.down.weight)
    nn.init.zeros_(block.down.bias)
    torch.testing.assert_close(block(x), x)  # a zero branch is the identity: the skip path
    # pre-LayerNorm: the branch sees the same input whatever its scale and offset
    torch.manual_seed(1)
    fresh = SimbaBlock(8)
    torch.testing.assert_close(fresh(x) - x, fresh(x * 10 - 4) - (x * 10 - 4), atol=1e-4, rtol=1e-4)


def test_network_body_picks_the_configured_network_and_paper_sizes() -> None:
    class Cfg:
        network = "mlp"
        network_width = None
        network_blocks = None

    cfg = Cfg()
    assert type(network_body(cfg, "critic", 4, 1, [32, 32])) is MLP
    cfg.network = "simba"
    critic = network_body(cfg, "critic", 4, 1, [32, 32])
    actor = network_body(cfg, "actor", 4, 2, [32, 32])
    assert isinstance(critic, SimbaMLP) and isinstance(actor, SimbaMLP)
    assert simba_size(cfg, "critic") == SIMBA_DEFAULTS["critic"] == (512, 2)
    assert simba_size(cfg, "actor") == SIMBA_DEFAULTS["actor"] == (128, 1)
    assert sum(isinstance(m, SimbaBlock) for m in critic.modules()) == 2
    assert critic[0].out_features == 512 and actor[0].out_features == 128
    cfg.network_width, cfg.network_blocks = 24, 3
    assert simba_size(cfg, "actor") == simba_size(cfg, "critic") == (24, 3)
    cfg.network = "resnet"
    with pytest.raises(ValueError, match="unknown network 'resnet'"):
        network_body(cfg, "critic", 4, 1, [32])


def test_the_config_refuses_an_unknown_network_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match="did you mean 'simba'"):
        rlblocks.make_policy("sac", OBS, BOX, network="simbaa")


# -- running statistics ----------------------------------------------------------------------------


def test_rsnorm_merges_batches_and_normalises_without_moving() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, (500, 4))
    norm = RSNorm((4,), clip=None)
    for chunk in np.array_split(data, 7):
        norm.update(chunk)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-10)
    x = torch.as_tensor(data[:5], dtype=torch.float32)
    before = norm.state_dict()
    out = norm(x)
    expected = (data[:5] - data.mean(0)) / np.sqrt(data.var(0) + 1e-8)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert all(
        torch.equal(before[k], v) for k, v in norm.state_dict().items()
    )  # forward: read only


def test_simba_encoder_state_round_trips_exactly() -> None:
    enc = SimbaEncoder(make_encoder(OBS))
    enc.observe(
        torch.as_tensor(np.random.default_rng(1).normal(5, 3, (64, 3)), dtype=torch.float32)
    )
    state = enc.state_dict()
    assert {"norm.mean", "norm.var", "norm.count"} <= set(state)
    other = SimbaEncoder(make_encoder(OBS))
    x = torch.randn(6, 3)
    assert not torch.equal(other(x), enc(x))
    other.load_state_dict(state)
    assert torch.equal(other(x), enc(x))
    assert all(torch.equal(other.state_dict()[k], v) for k, v in state.items())


def _counts(policy: nn.Module) -> list[float]:
    return [float(m.norm.count) for m in policy.modules() if isinstance(m, SimbaEncoder)]


def test_only_training_collects_move_the_statistics_and_targets_copy_them(random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("sac", OBS, BOX, network="simba", network_width=16)
    obs = Batch(obs=np.full((4, 3), 2.0, np.float32))
    # actor, critic and the critic's target copy each hold statistics
    assert _counts(policy) == [0.0, 0.0, 0.0]
    policy.train()
    policy(obs)
    assert _counts(policy)[:2] == [4.0, 4.0]  # the online networks saw the collect
    assert _counts(policy)[2] == 0.0  # the target follows at its next update
    policy.eval()
    policy(obs)  # a test
    assert _counts(policy)[:2] == [4.0, 4.0]
    policy.train()
    actor, critic, target = [m for m in policy.modules() if isinstance(m, SimbaEncoder)]
    mean = actor.norm.mean.clone()
    assert torch.equal(critic.norm.mean, mean) and not torch.equal(target.norm.mean, mean)
    policy.update(16, random_buffer(BOX))  # a gradient step reads, never merges
    assert _counts(policy) == [4.0, 4.0, 4.0]
    assert all(torch.equal(m.norm.mean, mean) for m in (actor, critic, target))


def test_random_warm_up_steps_of_a_training_collect_feed_the_statistics() -> None:
    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=2, seed=0)
    policy = rlblocks.make_policy(
        "sac", envs.observation_space, envs.action_space, network="simba", network_width=8
    )
    policy.train()
    Collector(policy, envs, ReplayBuffer(100, num_envs=2), seed=0).collect(n_step=20, random=True)
    assert _counts(policy)[:2] == [20.0, 20.0]
    policy.eval()
    Collector(policy, envs, None, exploration=False).collect(n_step=10)  # a test: no change
    assert _counts(policy)[:2] == [20.0, 20.0]
    envs.close()


@pytest.mark.parametrize(
    ("algo", "space", "kwargs"),
    [("sac", BOX, {}), ("td3", BOX, {}), ("ddpg", BOX, {}), ("redq", BOX, {}), ("dqn", TWO, {}),
     ("dqn", TWO, {"dueling": True}), ("ppo", BOX, {}), ("a2c", TWO, {})],
)  # fmt: skip
def test_the_algorithms_build_simba_networks(algo: str, space: gym.Space, kwargs: dict) -> None:
    policy = rlblocks.make_policy(algo, OBS, space, network="simba", network_width=8, **kwargs)
    nets = [m for m in policy.modules() if isinstance(m, SimbaMLP)]
    assert nets and all(n[0].out_features == 8 for n in nets)
    plain = rlblocks.make_policy(algo, OBS, space, **kwargs)
    assert not any(isinstance(m, SimbaMLP | SimbaEncoder) for m in plain.modules())
    policy.train()
    out = policy(Batch(obs=np.ones((2, 3), np.float32)))
    assert np.asarray(out.act).shape[0] == 2
    if algo in ("ppo", "a2c"):  # the on-policy running statistics are obs_norm's, not a second set
        assert policy.obs_rms is not None
        assert not any(isinstance(m, SimbaEncoder) for m in policy.modules())
    else:
        assert _counts(policy)[0] == 2.0


def test_an_algorithm_without_the_option_refuses_it_in_one_line() -> None:
    policy = rlblocks.make_policy("c51", OBS, TWO, network="simba")
    with pytest.raises(ConfigError, match=r"algo\.network='mlp'"):
        policy(Batch(obs=np.ones((2, 3), np.float32)))


# -- runs ------------------------------------------------------------------------------------------

SMALL = ["trainer.max_env_steps=400", "trainer.warmup_steps=96", "trainer.test_interval=200",
         "trainer.test_episodes=2", "env.num_envs=2", "env.num_test_envs=2",
         "algo.network=simba", "algo.network_width=32"]  # fmt: skip


@pytest.mark.parametrize("algo", ["sac", "dqn", "ppo"])
def test_simba_runs_from_the_command_line_and_loads_for_raw_observations(
    algo: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    sets = [arg for s in SMALL for arg in ("--set", s)]
    assert cli(["train", algo, "--seed", "0", "--run-dir", str(run), "--no-progress", *sets]) == 0
    agent = rlblocks.load(run)
    encoders = [m for m in agent.policy.modules() if isinstance(m, SimbaEncoder)]
    stats = [float(m.norm.count) for m in encoders] or [float(agent.policy.obs_rms.count)]
    assert min(stats) > 0  # the checkpoint carries the statistics of the training collects
    env = gym.make("Pendulum-v1" if algo == "sac" else "CartPole-v1")
    obs, _ = env.reset(seed=0)
    act = agent.act(obs)
    assert env.action_space.contains(np.asarray(act, dtype=env.action_space.dtype).reshape(
        env.action_space.shape))  # fmt: skip
    assert [float(m.norm.count) for m in encoders] == stats[: len(encoders)]  # acting: frozen


# -- training --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sac_with_simba_networks_solves_pendulum(tmp_path: Path) -> None:
    """Pendulum-v1 to a mean test return of -400 from scratch with SimBa networks (narrowed to
    width 64, one block, to fit a CPU test). Tuning seeds 1 and 2 solved it at
    2,000 and 3,500 env steps; the budget, 6,000, is checked here on seed 0."""
    result = rlblocks.train(
        "sac", seed=0, stop_reward=-400, loggers=[], progress=False, run_dir=tmp_path / "run",
        overrides=["algo.network=simba", "algo.network_width=64", "algo.network_blocks=1",
                   "trainer.max_env_steps=6000", "trainer.test_episodes=20",
                   "env.num_test_envs=20"],
    )  # fmt: skip
    assert result.solved, result


@pytest.mark.parametrize("algo", ["td3bc", "iql"])
def test_an_offline_run_fits_the_statistics_to_its_dataset_at_the_first_update(algo: str) -> None:
    """An offline learner never collects, so nothing feeds the running statistics: at the
    first gradient step they are fitted to the whole dataset, once; later steps leave them."""
    torch.manual_seed(0)
    policy = rlblocks.make_policy(algo, OBS, BOX, network="simba", network_width=8)
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(64)
    for _ in range(50):
        o = (5.0 + rng.normal(size=3)).astype(np.float32)
        buf.add(Batch(obs=o, act=rng.uniform(-1, 1, 2).astype(np.float32), rew=0.0,
                      terminated=False, truncated=False, obs_next=o))  # fmt: skip
    online = [m for m in policy.modules() if isinstance(m, SimbaEncoder)]  # targets' too
    assert online and all(float(m.norm.count) == 0 for m in online)
    policy.train()
    policy.update(16, buf)
    assert max(float(m.norm.count) for m in online) == 50.0  # the dataset, once
    actor = online[0]
    assert torch.allclose(actor.norm.mean.float(), torch.full((3,), 5.0), atol=0.5)
    policy.update(16, buf)  # later steps read them (target copies follow the online ones)
    assert all(float(m.norm.count) in (0.0, 50.0) for m in online)
    assert float(actor.norm.count) == 50.0
