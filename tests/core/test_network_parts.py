"""The algorithm toolkit's handling of networks a user brings (rlblocks.algo.nets): building
from modules and factories, the one check at build time, the thesis-style adapter, fresh copies
for ensembles, and that user parts get what built-in ones get (state_dict, NaN watch, record)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
from rlblocks.algo import DiagGaussian
from rlblocks.algo.nets import (
    TupleOutput,
    build_part,
    check_output,
    encoder_part,
    fresh_copy,
    sample_observations,
)
from rlblocks.contracts import Batch, ConfigError

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
DISCRETE = gym.spaces.Discrete(2)


class Counting(nn.Module):
    """A thesis-style net that counts its forward calls."""

    def __init__(self, n_in: int = 3, n_out: int = 2) -> None:
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.calls = 0

    def forward(self, obs, state=None, info={}):  # noqa: B006 (the thesis' signature)
        self.calls += 1
        return self.linear(obs), state


def test_a_factory_is_called_with_the_spaces_and_anything_else_is_refused() -> None:
    seen = []

    def factory(observation_space, action_space):
        seen.append((observation_space, action_space))
        return nn.Linear(3, 2)

    assert isinstance(build_part("actor", factory, OBS, DISCRETE), nn.Linear)
    assert seen == [(OBS, DISCRETE)]
    module = nn.Linear(3, 2)
    assert build_part("actor", module, OBS, DISCRETE) is module
    with pytest.raises(ConfigError, match=r"the critic must be a torch nn\.Module or a factory"):
        build_part("critic", 3, OBS, DISCRETE)
    with pytest.raises(ConfigError, match=r"returned int, not a torch nn\.Module"):
        build_part("critic", lambda o, a: 3, OBS, DISCRETE)


def test_a_tuple_output_is_adapted_once_at_build_time_and_leaves_no_random_stream_moved() -> None:
    net = Counting()
    state = torch.random.get_rng_state()
    module, out = check_output("model", net, [torch.zeros(2, 3)], [(2,)], "Q-values")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert isinstance(module, TupleOutput) and module.net is net and out.shape == (2, 2)
    policy = rlblocks.make_policy("dqn", OBS, DISCRETE, model=net)
    calls = net.calls
    policy(Batch(obs=np.zeros((4, 3), np.float32)))
    assert net.calls == calls + 1  # acting calls the network once, with no probing


def test_the_check_runs_in_eval_mode_and_restores_training_flags() -> None:
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(self.training)
            return x[:, :2]

    net = Probe().train()
    check_output("actor", net, [torch.zeros(2, 3)], [(2,)], "logits")
    assert seen == [False] and net.training


def test_fresh_copies_have_their_own_freshly_initialised_parameters() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    copy = fresh_copy(net)
    assert copy is not net and not torch.equal(copy[0].weight, net[0].weight)
    assert [p.shape for p in copy.parameters()] == [p.shape for p in net.parameters()]


def test_twin_critics_of_one_given_module_start_different_and_train_separately() -> None:
    critic = nn.Sequential(nn.Linear(3 + 2, 16), nn.ReLU(), nn.Linear(16, 1))
    policy = rlblocks.make_policy("sac", OBS, BOX, critic=critic, hidden_sizes=[16])
    first, second = policy.critic.net.members
    assert first is critic  # the module itself, then a fresh copy
    assert not torch.equal(first[0].weight, second[0].weight)
    q = policy.critic(sample_observations(OBS), torch.zeros(2, 2))
    assert q.shape == (2, 2)  # [n critics, B]
    assert set(policy.critic_step.params) >= set(critic.parameters())


def test_an_encoder_needs_no_out_dim_and_a_wrong_one_is_refused() -> None:
    encoder = encoder_part(nn.Sequential(nn.Linear(3, 5), nn.ReLU()), OBS)
    assert encoder.out_dim == 5
    wrong = nn.Linear(3, 5)
    wrong.out_dim = 7
    with pytest.raises(ConfigError, match=r"out_dim is 7 but its output has shape \[B, 5\]"):
        encoder_part(wrong, OBS)


def test_dict_observations_reach_the_encoder_as_a_dict_of_tensors() -> None:
    space = gym.spaces.Dict({"pos": OBS, "id": gym.spaces.Discrete(4)})

    class DictEncoder(nn.Module):
        def forward(self, obs):
            return torch.cat([obs["pos"], obs["id"].float().unsqueeze(1)], dim=1)

    policy = rlblocks.make_policy("ppo", space, DISCRETE, encoder=DictEncoder())
    assert policy.encoder.out_dim == 4
    out = policy(Batch(obs={"pos": np.zeros((3, 3), np.float32), "id": np.zeros(3, np.int64)}))
    assert out.act.shape == (3,)


def test_an_on_policy_actor_returning_the_mean_gets_a_learned_log_std() -> None:
    actor = nn.Linear(3, 2)
    policy = rlblocks.make_policy("ppo", OBS, BOX, actor=actor, log_std_init=-0.5)
    dist = policy.dist(torch.zeros(4, 3))
    assert isinstance(dist, DiagGaussian) and policy.actor.net is actor
    torch.testing.assert_close(policy.actor.log_std.detach(), torch.full((2,), -0.5))


def test_a_critic_returning_one_value_per_row_is_not_squeezed_further() -> None:
    class Flat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 1)

        def forward(self, x):
            return self.linear(x)[:, 0]

    policy = rlblocks.make_policy("ppo", OBS, DISCRETE, critic=Flat())
    assert policy.critic(torch.zeros(1, 3)).shape == (1,)  # one row stays a row
    policy = rlblocks.make_policy("ppo", OBS, DISCRETE, critic=nn.Linear(3, 1))
    assert policy.critic(torch.zeros(1, 3)).shape == (1,)


def test_user_parts_are_in_the_state_dict_the_nan_watch_and_the_record() -> None:
    model = Counting()
    policy = rlblocks.make_policy("dqn", OBS, DISCRETE, model=model)
    assert {"model.net.linear.weight", "target.net.net.linear.weight"} <= set(policy.state_dict())
    watch = policy.watch_finite()
    assert watch.check(0) == ""
    with torch.no_grad():
        model.linear.weight[0, 0] = float("nan")
    assert "model.net.linear.weight" in watch.check(0)
    assert policy.custom_networks == {"model": f"{__name__}:Counting"}


def test_built_in_networks_keep_their_layout() -> None:
    """Default policies are built as before: the same parameter names (checkpoints of earlier
    runs load) and nothing recorded as the user's."""
    sac = rlblocks.make_policy("sac", OBS, BOX, hidden_sizes=[8])
    assert {"actor.body.0.weight", "actor.head.weight", "critic.net.net.0.weight"} <= set(
        sac.state_dict()
    )
    ppo = rlblocks.make_policy("ppo", OBS, DISCRETE, hidden_sizes=[8])
    assert {"actor.net.0.weight", "critic.net.0.weight"} <= set(ppo.state_dict())
    assert sac.custom_networks == {} and ppo.custom_networks == {}


def test_actor_and_critic_widths_default_to_hidden_sizes() -> None:
    def widths(m: nn.Module) -> list[int]:
        return [x.out_features for x in m.modules() if isinstance(x, nn.Linear)]

    td3 = rlblocks.make_policy("td3", OBS, BOX, hidden_sizes=[8], critic_hidden_sizes=[4, 4])
    assert widths(td3.actor) == [8, 2]
    assert list(td3.critic.net.net[0].weight.shape) == [2, 3 + 2, 4]
    a2c = rlblocks.make_policy("a2c", OBS, DISCRETE, hidden_sizes=[8], actor_hidden_sizes=[4])
    assert widths(a2c.actor) == [4, 2] and widths(a2c.critic) == [8, 1]


def test_the_config_fields_are_checked_when_the_config_is_built() -> None:
    with pytest.raises(ConfigError, match=r"\$\.encoder: must be an import path"):
        rlblocks.make_policy("sac", OBS, BOX, encoder="no_colon")
    with pytest.raises(ConfigError, match=r"actor_hidden_sizes: must be a list of layer widths"):
        rlblocks.make_policy("sac", OBS, BOX, actor_hidden_sizes=[0])
    with pytest.raises(ConfigError, match=r"encoder_kwargs are the arguments of algo\.encoder"):
        rlblocks.make_policy("sac", OBS, BOX, encoder_kwargs={"features": 3})


def test_an_algo_spec_declares_only_known_network_parts() -> None:
    from rlblocks.plugins import NETWORK_PARTS, AlgoSpec

    assert NETWORK_PARTS == ("encoder", "actor", "critic", "model")
    with pytest.raises(ValueError, match="unknown \\['head'\\]"):
        AlgoSpec(name="x", summary="x", impl="x:y", networks=("head",))
    spec = AlgoSpec(name="x", summary="x", impl="x:y", networks=("encoder", "model"))
    assert spec.describe()["networks"] == ["encoder", "model"]


def test_describe_lists_the_networks_an_algorithm_takes(capsys) -> None:
    from rlblocks.cli import main as cli

    assert cli(["describe", "dqn"]) == 0
    assert "networks of your own: encoder, model" in capsys.readouterr().out
    assert cli(["describe", "r2d2"]) == 0
    assert "networks of your own: encoder (" in capsys.readouterr().out
