"""Your own networks in runs: trained from Python (``networks=``, a policy object) and from a
config file (``algo.encoder``, separate actor and critic widths), loaded back and acting; exact
resume; and the one-line refusals (a part an algorithm does not take, a wrong output shape, an
encoder import path from a run directory nobody trusted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
from rlblocks.contracts import ConfigError

SUPPORT = Path(__file__).parents[1] / "support"
CARTPOLE = gym.make("CartPole-v1")
QUIET = {"loggers": [], "progress": False, "quiet": True}


@pytest.fixture
def support(monkeypatch):
    """The support module (networks importable by path) on sys.path."""
    monkeypatch.syspath_prepend(str(SUPPORT))
    import tests_support_networks

    return tests_support_networks


def _widths(module: nn.Module) -> list[int]:
    return [m.out_features for m in module.modules() if isinstance(m, nn.Linear)]


def _actor_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)
    )


# -- training from Python ------------------------------------------------------------------------
@pytest.mark.slow
def test_sac_learns_pendulum_with_your_encoder_and_its_own_actor_and_critic_widths(
    tmp_path, support
) -> None:
    """Pendulum-v1 to -250 over 100 test episodes (SAC's own test threshold) with a user
    encoder (a factory, so the actor and each critic ensemble get their own), a 32-32 actor and
    64-64 critics; the run loads back with the encoder passed again, and acts."""
    result = rlblocks.train(
        "sac", seed=0, stop_reward=-250, run_dir=tmp_path / "run",
        networks={"encoder": support.small_encoder},
        overrides=["algo.actor_hidden_sizes=[32, 32]", "algo.critic_hidden_sizes=[64, 64]"],
        **QUIET,
    )  # fmt: skip
    assert result.solved and result.best_test_return >= -250.0, result
    policy = result.agent.policy
    assert policy.actor.encoder is not policy.critic.encoder
    assert _widths(policy.actor.encoder) == [32]
    assert _widths(policy.actor.body) == [32, 32] and _widths(policy.critic.encoder) == [32]
    assert list(policy.critic.net.net[0].weight.shape) == [2, 32 + 1, 64]  # [features, action]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["run"]["networks"] == {"encoder": "tests_support_networks:small_encoder"}

    with pytest.raises(ConfigError, match=r"your own encoder .*small_encoder.*networks="):
        rlblocks.load(tmp_path / "run")
    agent = rlblocks.load(tmp_path / "run", networks={"encoder": support.small_encoder})
    obs, _ = gym.make("Pendulum-v1").reset(seed=0)
    action = agent.act(obs)
    assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0
    assert agent.evaluate(episodes=10, seed=0).mean >= -400.0


@pytest.mark.slow
def test_ppo_learns_cartpole_with_your_actor_module(tmp_path) -> None:
    """CartPole-v1 to 475 (PPO's own test threshold) with the user's actor head: a plain
    module returning logits, which the policy wraps into a categorical."""
    actor = _actor_mlp()
    result = rlblocks.train(
        "ppo", env="CartPole-v1", seed=0, stop_reward=475.0, run_dir=tmp_path / "run",
        networks={"actor": actor}, **QUIET,
    )  # fmt: skip
    assert result.solved and result.best_test_return >= 475.0, result
    assert result.agent.policy.actor.net is actor  # trained in place: the user's own module
    agent = rlblocks.load(tmp_path / "run", networks={"actor": _actor_mlp()})
    torch.testing.assert_close(agent.policy.actor.net[0].weight, actor[0].weight)
    obs, _ = CARTPOLE.reset(seed=0)
    assert int(agent.act(obs)) in (0, 1)
    assert agent.evaluate(episodes=5, seed=0).mean >= 400.0


@pytest.mark.slow
def test_dqn_learns_cartpole_with_a_thesis_style_net(tmp_path, support) -> None:
    """The thesis' ``Net`` (``forward(obs, state=None, info={}) -> (logits, state)``) as DQN's
    Q-network: CartPole-v1 to its 475 threshold with DQN's defaults (its own test's run)."""
    result = rlblocks.train(
        "dqn", seed=0, run_dir=tmp_path / "run", networks={"model": support.Net(4, 2)}, **QUIET
    )
    assert result.solved and result.best_test_return >= 475.0, result
    assert isinstance(result.agent.policy.model, rlblocks.algo.nets.TupleOutput)
    agent = rlblocks.load(tmp_path / "run", networks={"model": support.Net(4, 2)})
    obs, _ = CARTPOLE.reset(seed=0)
    assert int(agent.act(obs)) in (0, 1)
    assert agent.evaluate(episodes=5, seed=0).mean >= 400.0


# -- training from a config file -----------------------------------------------------------------
@pytest.mark.slow
def test_sac_from_a_toml_file_with_an_encoder_import_path(tmp_path, support) -> None:
    """``rlblocks train sac --config file.toml`` with ``algo.encoder`` and the two widths:
    Pendulum-v1 to -250; config.json records the path, and load rebuilds the encoder from it."""
    from rlblocks.cli import main as cli

    toml = tmp_path / "sac.toml"
    toml.write_text(
        "[algo]\n"
        'encoder = "tests_support_networks:small_encoder"\n'
        "encoder_kwargs = {features = 32}\n"
        "actor_hidden_sizes = [32, 32]\n"
        "critic_hidden_sizes = [64, 64]\n"
        "[trainer]\n"
        "stop_reward = -250\n"
        "[run]\n"
        "loggers = []\n"
    )
    run = tmp_path / "run"
    assert cli(["train", "sac", "--config", str(toml), "--seed", "0", "--run-dir", str(run),
                "--no-progress"]) == 0  # fmt: skip
    result = json.loads((run / "result.json").read_text())
    assert result["solved"] and result["best_test_return"] >= -250.0, result
    config = json.loads((run / "config.json").read_text())
    assert config["algo"]["encoder"] == "tests_support_networks:small_encoder"
    assert config["algo"]["encoder_kwargs"] == {"features": 32}
    agent = rlblocks.load(run)  # the module is imported already: no trust needed
    assert _widths(agent.policy.actor.encoder) == [32]
    obs, _ = gym.make("Pendulum-v1").reset(seed=0)
    assert agent.act(obs).shape == (1,)


@pytest.mark.slow
def test_ppo_from_a_config_with_an_encoder_path_and_separate_widths(tmp_path, support) -> None:
    """``rlblocks.train(config=file.toml)``: a user encoder by path, a 64-64 actor and a
    32-32 critic; CartPole-v1 to 475."""
    toml = tmp_path / "ppo.toml"
    toml.write_text(
        "[env]\n"
        'id = "CartPole-v1"\n'
        "[algo]\n"
        'encoder = "tests_support_networks:small_encoder"\n'
        "encoder_kwargs = {features = 16}\n"
        "actor_hidden_sizes = [64, 64]\n"
        "critic_hidden_sizes = [32, 32]\n"
    )
    result = rlblocks.train(
        "ppo", config=toml, seed=0, stop_reward=475.0, run_dir=tmp_path / "run", **QUIET
    )
    assert result.solved and result.best_test_return >= 475.0, result
    policy = result.agent.policy
    assert _widths(policy.encoder) == [16]
    assert _widths(policy.actor) == [64, 64, 2] and _widths(policy.critic) == [32, 32, 1]
    agent = rlblocks.load(tmp_path / "run")
    assert int(agent.act(CARTPOLE.reset(seed=0)[0])) in (0, 1)


# -- checkpoints, exact resume, policy objects -----------------------------------------------------
class _Crash(Exception):
    pass


class _CrashAt:
    def __init__(self, env_step: int) -> None:
        self.env_step = env_step

    @rlblocks.plugins.hookimpl
    def rlblocks_rollout_end(self, stats, env_step, trainer) -> None:
        if env_step >= self.env_step:
            raise _Crash(env_step)


def test_a_run_with_your_network_resumes_bit_identical_to_an_uninterrupted_one(
    tmp_path, support, capsys
) -> None:
    """The user's Q-network is a submodule of the policy: checkpoints hold its weights and its
    optimizer state, and a crashed-and-resumed run ends where the uninterrupted one does."""
    sets = ["trainer.max_env_steps=2000", "trainer.checkpoint_interval=300",
            "trainer.test_interval=500", "trainer.test_episodes=3",
            "env.num_test_envs=3"]  # fmt: skip

    def net(observation_space, action_space):
        torch.manual_seed(7)  # the same initial weights in both runs (the seed covers the rest)
        return support.Net(4, 2, hidden=32)

    kw = {"seed": 3, "overrides": sets, "networks": {"model": net}, **QUIET}
    whole = rlblocks.train("dqn", run_dir=tmp_path / "whole", **kw)
    with pytest.raises(_Crash):
        rlblocks.train("dqn", run_dir=tmp_path / "cut", hooks=[_CrashAt(1100)], **kw)
    from rlblocks.cli import main as cli

    assert cli(["describe", str(tmp_path / "cut")]) == 0
    out = " ".join(capsys.readouterr().out.split())  # how to continue it: valid Python
    assert "networks={'model': model_net})" in out
    assert "model_net: the model network it trained with" in out
    with pytest.raises(ConfigError, match="your own model"):
        rlblocks.resume(tmp_path / "cut")
    resumed = rlblocks.resume(tmp_path / "cut", networks={"model": net})
    assert resumed.env_steps == whole.env_steps
    a, b = whole.agent.policy.state_dict(), resumed.agent.policy.state_dict()
    assert any(k.startswith("model.net.model.") for k in a)
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []


def test_train_trains_a_policy_object_as_the_algorithm_of_its_class(tmp_path, support) -> None:
    policy = rlblocks.make_policy(
        "dqn", CARTPOLE.observation_space, CARTPOLE.action_space, model=support.Net(4, 2, 32),
        lr=1e-3,
    )  # fmt: skip
    before = [p.detach().clone() for p in policy.parameters()]
    result = rlblocks.train(
        policy, env="CartPole-v1", max_env_steps=1500, run_dir=tmp_path / "run", **QUIET
    )
    assert result.agent.policy is policy
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.parameters()))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["algo_name"] == "dqn" and config["algo"]["lr"] == 1e-3
    assert config["run"]["networks"] == {"model": "tests_support_networks:Net"}
    model = support.Net(4, 2, 32)
    agent = rlblocks.load(tmp_path / "run", which="latest", networks={"model": model})
    assert int(agent.act(CARTPOLE.reset(seed=0)[0])) in (0, 1)


def test_a_policy_of_no_installed_algorithm_is_refused_in_one_line(tmp_path) -> None:
    from rlblocks_algo_dqn.dqn import DQNPolicy

    class MyPolicy(rlblocks.algo.BasePolicy):
        pass

    mine = MyPolicy(CARTPOLE.observation_space, CARTPOLE.action_space)
    with pytest.raises(ConfigError, match=r"cannot tell which algorithm a .*MyPolicy") as err:
        rlblocks.train(mine, env="CartPole-v1", run_dir=tmp_path / "a", **QUIET)
    assert "\n" not in str(err.value)
    dqn = DQNPolicy(CARTPOLE.observation_space, CARTPOLE.action_space)
    with pytest.raises(ConfigError, match="networks build a new policy"):
        rlblocks.train(dqn, networks={"model": nn.Linear(4, 2)}, run_dir=tmp_path / "b", **QUIET)
    with pytest.raises(ConfigError, match="algo settings given with it would be ignored"):
        rlblocks.train(dqn, overrides=["algo.lr=0.1"], run_dir=tmp_path / "c", **QUIET)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_of_your_policy_subclass_loads_and_resumes_as_that_class(tmp_path, support) -> None:
    """train(MyDQN(...)) records the subclass; load and resume rebuild it when it is passed
    again (policy_class=), refuse in one line without it, and take the algorithm's own class
    when asked to."""
    from rlblocks_algo_dqn.dqn import DQNPolicy

    cls = support.counting_dqn_class()
    mine = cls(CARTPOLE.observation_space, CARTPOLE.action_space)
    budget = ["trainer.warmup_steps=100", "trainer.test_episodes=2", "trainer.test_interval=400"]
    run = tmp_path / "run"
    rlblocks.train(mine, env="CartPole-v1", seed=0, run_dir=run,
                   overrides=["trainer.max_env_steps=400", *budget], **QUIET)  # fmt: skip
    assert cls.learned > 0
    config = json.loads((run / "config.json").read_text())
    assert config["run"]["policy_class"] == "tests_support_networks:CountingDQN"
    for call in (lambda: rlblocks.load(run), lambda: rlblocks.resume(run)):
        with pytest.raises(ConfigError) as err:
            call()
        assert "your class tests_support_networks:CountingDQN (a subclass of DQNPolicy)" in str(
            err.value
        ) and "\n" not in str(err.value)
    agent = rlblocks.load(run, which="latest", policy_class=cls)
    assert type(agent.policy) is cls
    assert type(rlblocks.load(run, which="latest", policy_class=DQNPolicy).policy) is DQNPolicy
    with pytest.raises(ConfigError, match="policy_class must be DQNPolicy"):
        rlblocks.load(run, policy_class=nn.Linear)
    before = cls.learned
    result = rlblocks.resume(run, overrides=["trainer.max_env_steps=800"], policy_class=cls)
    assert type(result.agent.policy) is cls and cls.learned > before
    plain = tmp_path / "plain"
    rlblocks.train("dqn", env="CartPole-v1", seed=0, run_dir=plain,
                   overrides=["trainer.max_env_steps=200", *budget], **QUIET)  # fmt: skip
    with pytest.raises(ConfigError, match="leave policy_class out"):
        rlblocks.load(plain, which="latest", policy_class=cls)


def test_iqn_trains_and_loads_with_your_quantile_network(tmp_path, support) -> None:
    """IQN's ``model`` part: a user quantile network (obs, taus) -> [B, K, A] is what the run
    trains (its weights move), is recorded, and loads back to act."""
    net = support.QuantileNet(4, 2)
    before = [p.detach().clone() for p in net.parameters()]
    result = rlblocks.train(
        "iqn", seed=0, run_dir=tmp_path / "run", networks={"model": net},
        overrides=["trainer.max_env_steps=1500", "trainer.warmup_steps=200",
                   "trainer.test_episodes=2", "trainer.test_interval=1500"],
        **QUIET,
    )  # fmt: skip
    assert result.agent.policy.model is net
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["run"]["networks"] == {"model": "tests_support_networks:QuantileNet"}
    agent = rlblocks.load(tmp_path / "run", networks={"model": support.QuantileNet(4, 2)})
    for a, b in zip(agent.policy.model.parameters(), net.parameters(), strict=True):
        assert torch.equal(a.cpu(), b.detach().cpu())
    assert agent.act(CARTPOLE.observation_space.sample()) in (0, 1)


def test_r2d2_trains_and_loads_with_an_encoder_from_its_config(tmp_path, support) -> None:
    """R2D2 takes ``algo.encoder`` (an import path) like the other value-based algorithms: the
    recurrent network is built over it, and load rebuilds it from the run's config."""
    result = rlblocks.train(
        "r2d2", seed=0, run_dir=tmp_path / "run",
        overrides=["algo.encoder=tests_support_networks:small_encoder",
                   "algo.encoder_kwargs={features = 24}", "env.id=CartPole-v1",
                   "env.num_envs=2", "trainer.max_env_steps=600", "trainer.test_episodes=2",
                   "trainer.test_interval=600", "buffer.size=2000"],
        **QUIET,
    )  # fmt: skip
    encoder = result.agent.policy.model.encoder
    assert _widths(encoder) == [24]
    agent = rlblocks.load(tmp_path / "run")
    assert _widths(agent.policy.model.encoder) == [24]
    assert agent.policy.custom_networks == {"encoder": "tests_support_networks:small_encoder"}


# -- refusals --------------------------------------------------------------------------------------
def test_a_part_the_algorithm_does_not_take_is_one_line_naming_what_it_takes(tmp_path) -> None:
    obs, act = CARTPOLE.observation_space, CARTPOLE.action_space
    with pytest.raises(ConfigError) as err:
        rlblocks.make_policy("dqn", obs, act, actor=nn.Linear(4, 2))
    assert str(err.value) == "algo 'dqn' takes no actor of yours; it takes encoder and model"
    with pytest.raises(ConfigError, match="algo 'reinforce' takes no critic of yours; it takes "
                                          "encoder and actor"):  # fmt: skip
        rlblocks.train("reinforce", networks={"critic": nn.Linear(4, 1)},
                       run_dir=tmp_path / "run", **QUIET)  # fmt: skip
    assert not (tmp_path / "run").exists()  # refused before anything was made
    with pytest.raises(ConfigError, match=r"algo 'fqf' takes no model of yours; it takes encoder$"):
        rlblocks.make_policy("fqf", obs, act, model=nn.Linear(4, 2))
    with pytest.raises(ConfigError, match="'head' is not a network part"):
        rlblocks.train("ppo", networks={"head": nn.Linear(4, 2)}, run_dir=tmp_path / "x", **QUIET)


class _FirstQuantile(nn.Module):
    """A quantile network that forgets the fraction axis: ``[B, A]`` instead of ``[B, K, A]``."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        return self.q(obs)


@pytest.mark.parametrize(
    ("algo", "space", "part", "net", "message"),
    [
        (
            "ppo",
            None,
            "actor",
            nn.Linear(4, 3),
            "the actor's output has shape [B, 3], expected [B, 2] (a Distribution, or 2 logits)",
        ),
        (
            "ppo",
            None,
            "critic",
            nn.Linear(4, 2),
            "the critic's output has shape [B, 2], expected [B, 1] or [B] (the state value V(s))",
        ),
        (
            "dqn",
            None,
            "model",
            nn.Linear(4, 5),
            "the model's output has shape [B, 5], expected [B, 2] (Q-values of the 2 actions)",
        ),
        (
            "iqn",
            None,
            "model",
            _FirstQuantile(),
            "the model's output has shape [B, 2], expected [B, 3, 2] (quantile values [B, K, 2] "
            "for fractions taus [B, K])",
        ),
        (
            "r2d2",
            None,
            "encoder",
            nn.Flatten(0),
            "the encoder's output has shape [8] (for a batch of B=2), expected [B, D] (features)",
        ),
        (
            "sac",
            "box",
            "actor",
            nn.Linear(3, 1),
            "the actor's output has shape [B, 1], expected [B, 2] (the mean, then the log std, of "
            "each action dimension)",
        ),
        (
            "sac",
            "box",
            "critic",
            nn.Linear(4, 3),
            "the critic's output has shape [B, 3], expected [B, 1] or [B] (Q(s, a) of the features "
            "and the action concatenated)",
        ),
        (
            "sac",
            "box",
            "encoder",
            nn.Sequential(nn.Linear(3, 8), nn.Flatten(0)),
            "the encoder's output has shape [16] (for a batch of B=2), expected [B, D] (features)",
        ),
    ],
)
def test_a_network_whose_output_does_not_fit_is_one_line_naming_both_shapes(
    algo, space, part, net, message
) -> None:
    obs, act = CARTPOLE.observation_space, CARTPOLE.action_space
    if space == "box":
        obs = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        act = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    with pytest.raises(ConfigError) as err:
        rlblocks.make_policy(algo, obs, act, **{part: net})
    assert str(err.value) == message


def test_an_untrusted_encoder_import_path_is_not_imported_on_load(tmp_path, monkeypatch) -> None:
    """A run directory naming ``algo.encoder`` is data: loading it imports that module only when
    it is imported already or with ``trust_imports=True``."""
    module = "rlblocks_test_untrusted_encoder"
    (tmp_path / f"{module}.py").write_text(
        "from torch import nn\n"
        "IMPORTED = []\n"
        "def encoder(observation_space, action_space):\n"
        "    IMPORTED.append(1)\n"
        "    return nn.Sequential(nn.Linear(4, 8), nn.ReLU())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    rlblocks.train(
        "dqn", max_env_steps=300, run_dir=run, overrides=[f"algo.encoder={module}:encoder",
        "trainer.warmup_steps=100", "trainer.test_interval=300", "trainer.test_episodes=2"],
        **QUIET,
    )  # fmt: skip
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ConfigError) as err:
        rlblocks.load(run, which="latest")
    assert f"module {module!r}" in str(err.value) and "trust_imports=True" in str(err.value)
    assert "\n" not in str(err.value) and module not in sys.modules
    with pytest.raises(ConfigError, match="trust_imports=True"):
        rlblocks.resume(run, overrides=["trainer.max_env_steps=600"])
    assert module not in sys.modules
    agent = rlblocks.load(run, which="latest", trust_imports=True)
    assert module in sys.modules and sys.modules[module].IMPORTED
    assert int(agent.act(CARTPOLE.reset(seed=0)[0])) in (0, 1)
