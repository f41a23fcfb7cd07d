"""The algorithm toolkit of core: optimizer steps, target networks, statistics, noise,
observation encoders, actors and critic ensembles."""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlblocks.algo import (
    BasePolicy,
    FiniteWatch,
    GaussianNoise,
    OptimizerStep,
    OUNoise,
    TargetNetwork,
    make_noise,
    optimizers_deferred,
)
from rlblocks.algo.nets import (
    DeterministicActor,
    EnsembleLinear,
    FlattenEncoder,
    ImageEncoder,
    ObsEncoder,
    QEnsemble,
    SquashedGaussianActor,
    activation_class,
    is_image_space,
    obs_to_tensor,
)
from rlblocks.algo.nets._mlp import _ACTIVATIONS
from rlblocks.contracts._validators import ACTIVATIONS
from rlblocks.trainers import StatsAccumulator


# -- optimizer step ------------------------------------------------------------------------------
def test_optimizer_step_clips_the_global_gradient_norm() -> None:
    w = nn.Parameter(torch.zeros(3))
    step = OptimizerStep([w], lr=1.0, optimizer="sgd", max_grad_norm=0.5)
    step.step((w * torch.tensor([30.0, 40.0, 0.0])).sum())  # gradient norm 50
    torch.testing.assert_close(w.detach(), torch.tensor([-0.3, -0.4, 0.0]))
    assert step.steps == 1


def test_optimizer_step_clips_exactly_as_torch_does() -> None:
    torch.manual_seed(0)
    ours = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    theirs = copy.deepcopy(ours)
    step = OptimizerStep(ours, lr=1e-2, max_grad_norm=0.5)
    optim = torch.optim.Adam(theirs.parameters(), lr=1e-2, fused=True)
    for _ in range(20):
        x = torch.randn(32, 4)
        step.step(ours(x).pow(2).sum())
        optim.zero_grad()
        theirs(x).pow(2).sum().backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.5, foreach=True)
        optim.step()
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    # a gradient that is missing is left out of the norm, as torch leaves it out
    w, v = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2))
    step = OptimizerStep([w, v], lr=1.0, optimizer="sgd", max_grad_norm=1.0)
    step.step((w * torch.tensor([3.0, 4.0])).sum())
    torch.testing.assert_close(w.detach(), torch.tensor([-0.6, -0.8]))
    torch.testing.assert_close(v.detach(), torch.zeros(2))


def test_optimizer_step_zeroes_gradients_between_steps() -> None:
    w = nn.Parameter(torch.zeros(1))
    step = OptimizerStep([w], lr=1.0, optimizer="sgd")
    step.step(w.sum() * 2.0)
    step.step(w.sum() * 2.0)  # would be -6 if gradients accumulated
    torch.testing.assert_close(w.detach(), torch.tensor([-4.0]))


def test_optimizer_step_follows_its_schedule_and_round_trips() -> None:
    net = nn.Linear(2, 1)
    step = OptimizerStep(net, lr=1e-3, lr_schedule=lambda t: 1e-3 * (1 - t / 100))
    step.set_env_step(50)
    assert step.lr == pytest.approx(5e-4)
    step.step(net(torch.ones(4, 2)).pow(2).mean())
    other = OptimizerStep(nn.Linear(2, 1), lr=1.0)
    other.load_state_dict(step.state_dict())
    assert other.steps == 1 and other.lr == pytest.approx(5e-4)


def test_policy_schedule_stats_name_every_optimizer_at_its_current_rate() -> None:
    policy = BasePolicy(gym.spaces.Box(-1.0, 1.0, (2,)), gym.spaces.Discrete(2))
    policy.add_optimizer("actor", OptimizerStep(nn.Linear(2, 1), lr=3e-4))
    policy.add_optimizer(
        "critic", OptimizerStep(nn.Linear(2, 1), lr=1e-3, lr_schedule=lambda t: 1e-3 / (1 + t))
    )
    assert policy.schedule_stats() == {"lr/actor": pytest.approx(3e-4), "lr/critic": 1e-3}
    policy.set_env_step(3)
    assert policy.schedule_stats() == {
        "lr/actor": pytest.approx(3e-4),
        "lr/critic": pytest.approx(2.5e-4),
    }


def test_optimizer_step_leaves_out_frozen_parameters_and_names_bad_optimizers() -> None:
    net = nn.Linear(2, 2)
    net.bias.requires_grad_(False)
    assert len(OptimizerStep(net, lr=0.1).params) == 1
    with pytest.raises(ValueError, match="unknown optimizer 'adamm'"):
        OptimizerStep(net, lr=0.1, optimizer="adamm")


# -- non-finite watch -----------------------------------------------------------------------------
def _watched(optimizer: str = "adam", max_grad_norm: float | None = None, skip: bool = False):
    w = nn.Parameter(torch.ones(3))
    step = OptimizerStep([w], lr=0.1, optimizer=optimizer, max_grad_norm=max_grad_norm)
    watch = FiniteWatch({"q": step}, [("net.w", w)], skip=skip)
    return w, step, watch


def _take_steps(step: OptimizerStep, watch: FiniteWatch, w: nn.Parameter, losses: list) -> None:
    for make_loss in losses:
        step.step(make_loss(w))
        watch.end_update()


def _finite(w: torch.Tensor) -> torch.Tensor:
    return (w * w).sum()


def _nan(w: torch.Tensor) -> torch.Tensor:
    return (w * w).sum() * float("nan")


def _sqrt_at_zero(w: torch.Tensor) -> torch.Tensor:
    """A finite loss (w[0] is 0) whose gradient is infinite: d sqrt(w) / dw at 0."""
    with torch.no_grad():
        w[0] = 0.0
    return w.sqrt().sum()


def test_watch_is_quiet_while_everything_is_finite() -> None:
    w, step, watch = _watched(max_grad_norm=1.0)
    _take_steps(step, watch, w, [_finite] * 4)
    assert watch.check(gradient_step=4) == ""
    assert watch.check(gradient_step=4) == ""  # nothing new recorded


def test_watch_names_the_first_non_finite_loss_its_optimizer_and_gradient_step() -> None:
    w, step, watch = _watched()
    _take_steps(step, watch, w, [_finite, _finite, _nan, _finite])
    assert watch.check(gradient_step=14) == "the loss of optimizer 'q' is nan at gradient step 13"


def test_watch_names_non_finite_gradients_of_a_finite_loss_through_the_clipping_norm() -> None:
    w, step, watch = _watched(max_grad_norm=10.0)
    _take_steps(step, watch, w, [_sqrt_at_zero])
    problem = watch.check(gradient_step=1)
    assert problem.startswith("the gradients of optimizer 'q' are not finite")
    assert problem.endswith("at gradient step 1")


def test_watch_without_clipping_names_the_parameters_a_bad_gradient_reached() -> None:
    w, step, watch = _watched()
    _take_steps(step, watch, w, [_finite, _sqrt_at_zero])
    problem = watch.check(gradient_step=2)
    assert "parameters net.w (optimizer 'q') are not finite after gradient step 2" in problem
    assert "gradient steps 1-2" in problem


@pytest.mark.parametrize("optimizer", ["adam", "sgd", "rmsprop"])
def test_skip_update_leaves_parameters_and_optimizer_state_untouched(optimizer) -> None:
    w, step, watch = _watched(optimizer, skip=True)
    _take_steps(step, watch, w, [_finite, _finite])
    before = w.detach().clone()
    state = {k: v.clone() if torch.is_tensor(v) else v for k, v in step.optim.state[w].items()}
    _take_steps(step, watch, w, [_nan])
    torch.testing.assert_close(w.detach(), before)
    for key, value in step.optim.state[w].items():
        torch.testing.assert_close(value, state[key])
    assert watch.check(gradient_step=3) == ""
    assert watch.pop_skipped() == 1 and watch.pop_skipped() == 0
    _take_steps(step, watch, w, [_finite])
    assert not torch.equal(w.detach(), before)  # the next finite step is applied


def _adam_pair(optimizer: str, **kwargs) -> tuple[nn.Module, OptimizerStep, nn.Module, Any]:
    """The same network twice: one stepped by OptimizerStep, one by torch's own optimizer."""
    torch.manual_seed(0)
    ours = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    theirs = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    theirs.load_state_dict(ours.state_dict())
    step = OptimizerStep(ours, lr=1e-2, optimizer=optimizer, **kwargs)
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[optimizer]
    ref = cls(theirs.parameters(), lr=1e-2, fused=True, **kwargs)
    return ours, step, theirs, ref


def _loss(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return net(x).pow(2).mean()


@pytest.mark.parametrize(
    ("optimizer", "kwargs"),
    [("adam", {}), ("adam", {"weight_decay": 0.1}), ("adamw", {"weight_decay": 0.1}),
     ("adam", {"betas": (0.5, 0.9), "eps": 1e-4})],
)  # fmt: skip
def test_fused_adam_steps_equal_torch_optimizer_steps_exactly(optimizer, kwargs) -> None:
    """The direct kernel call after the first step is torch's own Adam step, bit for bit,
    through a learning-rate change and a state round trip."""
    ours, step, theirs, ref = _adam_pair(optimizer, **kwargs)
    gen = torch.Generator().manual_seed(1)
    for i in range(12):
        x = torch.randn(5, 3, generator=gen)
        if i == 6:  # new state tensors: torch's step once, then the direct path again
            step.load_state_dict(step.state_dict())
        step.step(_loss(ours, x))
        ref.zero_grad()
        _loss(theirs, x).backward()
        ref.step()
        if i == 3:
            step.lr = 3e-3
            for g in ref.param_groups:
                g["lr"] = 3e-3
        if i >= 1:
            assert step._fused is not None  # the direct path is what ran
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b), f"step {i}"
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(step.optim.state[a][key], ref.state[b][key])


def test_a_deferred_step_builds_its_optimizer_on_first_use_and_then_steps_like_an_eager_one():
    """optimizers_deferred(): no torch optimizer until one is used; a state loaded before then
    is the state the first step starts from, so a deferred step continues exactly as an eager
    step that loaded the same state."""
    ours, step, theirs, _ref = _adam_pair("adam")
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        step.step(_loss(ours, x))
    saved = copy.deepcopy(step.state_dict())  # as from a file: torch's loading aliases tensors
    theirs.load_state_dict(ours.state_dict())
    with optimizers_deferred():
        deferred = OptimizerStep(theirs, lr=1e-2)
    assert "optim" not in deferred.__dict__
    deferred.load_state_dict(saved)
    assert "optim" not in deferred.__dict__ and deferred.steps == 3
    for i in range(3):
        step.step(_loss(ours, x))
        deferred.step(_loss(theirs, x))
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b), f"step {i}"
    assert deferred.steps == step.steps == 6 and deferred._fused is not None
    # made outside the block, a step builds at once
    assert "optim" in OptimizerStep(nn.Linear(2, 2), lr=1e-3).__dict__


def test_a_deferred_step_checks_a_loaded_state_and_its_optimizer_name_at_once() -> None:
    net = nn.Linear(3, 2)
    with optimizers_deferred():
        with pytest.raises(ValueError, match="unknown optimizer 'adma'"):
            OptimizerStep(net, lr=1e-3, optimizer="adma")
        deferred = OptimizerStep(net, lr=1e-3)
        deferred.name = "critic"
    other = OptimizerStep(nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2)), lr=1e-3)
    with pytest.raises(ValueError, match=r"optimizer 'critic' has \[4\] parameters per group"):
        deferred.load_state_dict(other.state_dict())
    assert "optim" not in deferred.__dict__
    assert deferred.lr == pytest.approx(1e-3)  # reading the optimizer builds it
    assert "optim" in deferred.__dict__
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = deferred.nothing


def test_fused_adam_falls_back_to_torch_when_a_gradient_is_missing_or_hooks_are_set() -> None:
    ours, step, *_ = _adam_pair("adam")
    x = torch.ones(4, 3)
    for _ in range(2):
        step.step(_loss(ours, x))
    calls: list[int] = []
    handle = step.optim.register_step_post_hook(lambda *_: calls.append(1))
    step.step(_loss(ours, x))
    assert calls == [1]  # torch's step ran, with its hooks
    handle.remove()
    first = next(ours.parameters())
    before = first.detach().clone()
    last = list(ours.parameters())[-1]
    step.optim.zero_grad()
    last.grad = torch.ones_like(last)  # only one parameter has a gradient: torch's step
    assert step._fused is not None and not step._fused.step()
    step._optimizer_step()
    assert torch.equal(first.detach(), before)
    for p in ours.parameters():
        p.grad = torch.ones_like(p)
    step.optim.param_groups[0]["maximize"] = True  # a flag the direct call does not pass
    assert not step._fused.step()


def test_skip_update_also_skips_non_finite_gradients_of_a_finite_loss() -> None:
    w, step, watch = _watched(skip=True)
    _take_steps(step, watch, w, [_sqrt_at_zero])
    assert torch.isfinite(w).all()
    assert watch.check(gradient_step=1) == "" and watch.skipped == 1


def test_a_detached_watch_leaves_the_step_as_unwatched() -> None:
    w, step, watch = _watched(skip=True)
    watch.detach()
    _take_steps(step, watch, w, [_nan])
    assert not torch.isfinite(w).all()  # applied, as without a watch
    assert "found_inf" not in step.optim.__dict__


def test_policy_watch_covers_its_registered_optimizers_by_name() -> None:
    class Tiny(BasePolicy):
        def __init__(self) -> None:
            super().__init__(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
            self.net = nn.Linear(2, 1)
            self.add_optimizer("critic", OptimizerStep(self.net, lr=1e-3))

    policy = Tiny()
    watch = policy.watch_finite()
    policy.optim_steps["critic"].step(_nan(policy.net.weight))
    watch.end_update()
    assert watch.check(gradient_step=1).startswith("the loss of optimizer 'critic' is nan")


def test_config_activation_names_are_the_networks_activations() -> None:
    assert tuple(_ACTIVATIONS) == ACTIVATIONS
    with pytest.raises(ValueError, match="did you mean 'relu'"):
        activation_class("relux")


# -- target networks -----------------------------------------------------------------------------
def test_polyak_target_moves_tau_of_the_way() -> None:
    online = nn.Linear(3, 2)
    target = TargetNetwork(online, tau=0.25)
    before = [p.clone() for p in target.parameters()]
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    target.update()
    for old, new, cur in zip(before, target.parameters(), online.parameters()):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * cur)
    assert not any(p.requires_grad for p in target.parameters())


def test_hard_target_copies_every_interval_only() -> None:
    online = nn.Linear(3, 2)
    target = TargetNetwork(online, tau=None, hard_update_interval=3)
    with torch.no_grad():
        online.weight.add_(1.0)
    target.update()
    target.update()
    assert not torch.equal(target.net.weight, online.weight)
    target.update()
    assert torch.equal(target.net.weight, online.weight)


def test_target_network_stays_in_eval_mode_and_is_saved_with_its_owner() -> None:
    owner = nn.Module()
    owner.net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    owner.target = TargetNetwork(owner.net, tau=0.1)
    owner.train()
    assert not owner.target.training and not owner.target.net[1].training
    assert any(k.startswith("target.") for k in owner.state_dict())
    with pytest.raises(ValueError, match="tau"):
        TargetNetwork(owner.net, tau=1.5)


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ),
    ],
)
def test_a_recurrent_target_follows_its_network_with_its_weights_in_one_block(device) -> None:
    # a deep copy of a CUDA LSTM holds separate weight tensors, which cuDNN would compact (and
    # warn about) at every call; the target's copy is flattened, and Polyak updates still reach
    # the tensors the LSTM runs with
    online = nn.LSTM(4, 8, batch_first=True).to(device)
    target = TargetNetwork(online, tau=0.5)
    x = torch.randn(2, 3, 4, device=device)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(0.1)
    target.update()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, _ = target(x)
    with torch.no_grad():
        half = copy.deepcopy(online)
        half.flatten_parameters()  # the reference copy too, or cuDNN warns on its call
        for p, q in zip(half.parameters(), target.net.parameters()):
            p.copy_(q)
        want, _ = half(x)
    torch.testing.assert_close(out, want)
    assert not torch.equal(out, online(x)[0])


# -- statistics ----------------------------------------------------------------------------------
def test_stats_accumulator_averages_tensors_and_floats_per_name() -> None:
    acc = StatsAccumulator()
    acc.add({"loss": torch.tensor(1.0), "q": 2.0})
    acc.add({"loss": torch.tensor(3.0)})
    assert acc.means() == {"loss": 2.0, "q": 2.0}
    assert not acc and acc.means() == {}


# -- exploration noise ---------------------------------------------------------------------------
def test_gaussian_noise_has_the_asked_spread() -> None:
    x = GaussianNoise(0.3)((20_000, 2), np.random.default_rng(0))
    assert x.dtype == np.float32 and abs(x.std() - 0.3) < 0.01 and abs(x.mean()) < 0.01


def test_ou_noise_is_correlated_in_time_and_reverts_to_its_mean() -> None:
    noise = OUNoise(sigma=0.3, theta=0.15, dt=0.01)
    rng = np.random.default_rng(0)
    xs = np.stack([noise((1, 1), rng)[0, 0] for _ in range(20_000)])
    lag1 = np.corrcoef(xs[:-1], xs[1:])[0, 1]
    assert lag1 > 0.9  # Gaussian noise would give ~0
    assert abs(xs[5000:].mean()) < 0.3
    noise.reset()
    assert noise((1, 1), rng)[0, 0] == pytest.approx(0.0, abs=0.1)
    with pytest.raises(ValueError, match="unknown exploration noise"):
        make_noise("pink", 0.1)


# -- encoders ------------------------------------------------------------------------------------
def test_discrete_observations_are_one_hot_from_their_start() -> None:
    enc = FlattenEncoder(gym.spaces.Discrete(3, start=-1))
    out = enc(torch.tensor([-1, 0, 1]))
    torch.testing.assert_close(out, torch.eye(3))


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-1, 1, (2, 3)),
        gym.spaces.MultiBinary(4),
        gym.spaces.MultiDiscrete([2, 3], start=[1, -1]),
        gym.spaces.Discrete(3, start=2),
    ],
)
def test_an_empty_batch_of_observations_encodes_to_no_rows(space: gym.Space) -> None:
    # an on-policy update whose episodes all terminated has no observation to bootstrap from
    enc = ObsEncoder(space)
    empty = torch.zeros((0, *space.shape))
    assert enc(empty).shape == (0, enc.out_dim)


def test_nested_dict_and_tuple_observations_are_encoded_leaf_by_leaf() -> None:
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1, 1, (2,)),
            "inner": gym.spaces.Dict(
                {
                    "flags": gym.spaces.MultiBinary(3),
                    "pair": gym.spaces.Tuple(
                        (gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([2, 3], start=[1, 0]))
                    ),
                }
            ),
        }
    )
    enc = ObsEncoder(space)
    assert enc.out_dim == 2 + 3 + 2 + 5 and not enc.learnable
    obs = {
        "pos": np.array([[0.5, -0.5]], np.float32),
        "inner": {
            "flags": np.array([[1, 0, 1]], np.int8),
            "pair": (np.array([1]), np.array([[2, 1]])),
        },
    }
    out = enc(obs_to_tensor(obs))
    # gymnasium keeps Dict keys sorted: "inner" (flags, then the tuple's parts) before "pos"
    expected = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0.5, -0.5]
    torch.testing.assert_close(out, torch.tensor([expected], dtype=torch.float32))


def test_image_boxes_get_a_cnn_and_other_boxes_do_not() -> None:
    atari = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    stacked = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    rgb_last = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    vector = gym.spaces.Box(-1, 1, (17,))
    assert all(is_image_space(s) for s in (atari, stacked, rgb_last))
    assert not is_image_space(vector) and not is_image_space(gym.spaces.Box(-1, 1, (3, 2, 2)))
    for space in (atari, stacked, rgb_last):
        enc = ObsEncoder(space)
        assert isinstance(enc.parts[0].image, ImageEncoder) and enc.learnable
        x = torch.as_tensor(np.stack([space.sample() for _ in range(2)]))
        assert enc(x).shape == (2, 512)
    small = ObsEncoder(gym.spaces.Box(0, 255, (10, 10, 3), np.uint8))
    assert small(torch.zeros(2, 10, 10, 3, dtype=torch.uint8)).shape == (2, 512)
    assert FlattenEncoder(atari).out_dim == 84 * 84


def test_unknown_leaf_spaces_get_a_clear_error() -> None:
    with pytest.raises(TypeError, match="no built-in encoder for Text"):
        ObsEncoder(gym.spaces.Text(5))


# -- actors and critics --------------------------------------------------------------------------
def test_squashed_gaussian_log_prob_matches_torch_distributions() -> None:
    torch.manual_seed(0)
    enc = FlattenEncoder(gym.spaces.Box(-1, 1, (3,)))
    actor = SquashedGaussianActor(enc, act_dim=2, hidden=(16,))
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    act, logp = actor(obs)
    mean, log_std = actor.distribution(obs)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1),
        [torch.distributions.TanhTransform(cache_size=1)],
    )
    clipped = act.clamp(-1 + 1e-6, 1 - 1e-6)
    torch.testing.assert_close(logp, dist.log_prob(clipped), atol=2e-3, rtol=1e-3)
    assert act.abs().max() <= 1.0
    greedy, _ = actor(obs, deterministic=True)
    torch.testing.assert_close(greedy, torch.tanh(mean))


def test_deterministic_actor_is_bounded() -> None:
    actor = DeterministicActor(FlattenEncoder(gym.spaces.Box(-1, 1, (3,))), 2, (8,))
    out = actor(torch.randn(10, 3) * 100)
    assert out.shape == (10, 2) and out.abs().max() <= 1.0


@pytest.mark.parametrize("out_dim", [5, 1])  # 1: a critic's scalar head, its own CPU kernel
def test_ensemble_members_equal_separate_linear_layers(out_dim: int) -> None:
    layer = EnsembleLinear(3, 4, out_dim)
    x = torch.randn(3, 7, 4, requires_grad=True)
    out = layer(x)
    assert out.shape == (3, 7, out_dim)
    for i in range(3):
        torch.testing.assert_close(out[i], x[i] @ layer.weight[i] + layer.bias[i, 0])
    # gradients reach the weights, the bias and the input as separate layers' would
    (out * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
    w, b, xi = (t.detach().clone().requires_grad_() for t in (layer.weight, layer.bias, x))
    ref = torch.stack([xi[i] @ w[i] + b[i, 0] for i in range(3)])
    (ref * torch.arange(ref.numel()).reshape(ref.shape)).sum().backward()
    for got, want in ((layer.weight.grad, w.grad), (layer.bias.grad, b.grad), (x.grad, xi.grad)):
        torch.testing.assert_close(got, want)


def test_q_ensemble_members_are_independent() -> None:
    enc = FlattenEncoder(gym.spaces.Box(-1, 1, (3,)))
    critic = QEnsemble(enc, act_dim=2, hidden=(8,), n=4)
    obs, act = torch.randn(5, 3), torch.randn(5, 2)
    q = critic(obs, act)
    assert q.shape == (4, 5)
    assert not torch.allclose(q[0], q[1])
    q[2].sum().backward()
    first = critic.net.net[0].weight.grad
    assert first[2].abs().sum() > 0 and first[[0, 1, 3]].abs().sum() == 0
    discrete = QEnsemble(enc, num_actions=6, hidden=(8,), n=2)
    assert discrete(obs).shape == (2, 5, 6)
    with pytest.raises(ValueError, match="exactly one"):
        QEnsemble(enc, hidden=(8,))
    assert math.isfinite(float(q.detach().mean()))


def test_one_q_ensemble_member_alone_matches_the_whole_ensemble() -> None:
    torch.manual_seed(0)
    enc = FlattenEncoder(gym.spaces.Box(-1, 1, (3,)))
    critic = QEnsemble(enc, act_dim=2, hidden=(8, 8), n=3)
    obs, act = torch.randn(5, 3), torch.randn(5, 2, requires_grad=True)
    every = critic(obs, act)
    for i in (0, 2, -1):
        alone = critic(obs, act, member=i)
        assert alone.shape == (1, 5)
        torch.testing.assert_close(alone[0], every[i], rtol=0, atol=0)
    # the gradient reaching the input (an actor's action) is member 0's alone
    (g_alone,) = torch.autograd.grad(critic(obs, act, member=0).sum(), act)
    (g_every,) = torch.autograd.grad(critic(obs, act)[0].sum(), act)
    torch.testing.assert_close(g_alone, g_every, rtol=0, atol=0)
    # per-member inputs [n, B, in] pick that member's row
    x = torch.randn(3, 5, 5)
    torch.testing.assert_close(critic.net(x, 1)[0], critic.net(x)[1], rtol=0, atol=0)
    discrete = QEnsemble(enc, num_actions=4, hidden=(8,), n=2)
    assert discrete(obs, member=1).shape == (1, 5, 4)
    with pytest.raises(IndexError, match="member 3 of an ensemble of 3"):
        critic(obs, act, member=3)


def test_frozen_parameters_get_no_gradient_and_thaw_afterwards() -> None:
    critic, actor = nn.Linear(2, 1), nn.Linear(2, 2)
    critic_step = OptimizerStep(critic, lr=0.1)
    with critic_step.frozen():
        critic(actor(torch.ones(3, 2))).sum().backward()
    assert critic.weight.grad is None and actor.weight.grad is not None
    assert all(p.requires_grad for p in critic.parameters())


def test_step_with_closed_form_gradients_equals_autograd() -> None:
    a, b = nn.Parameter(torch.tensor(0.5)), nn.Parameter(torch.tensor(0.5))
    x = torch.tensor([1.0, 3.0])
    OptimizerStep([a], lr=0.1).step(-(a * x).mean())
    OptimizerStep([b], lr=0.1).step_with_grads([-x.mean()])
    torch.testing.assert_close(a.detach(), b.detach())


def test_a_restored_target_network_keeps_its_schedule_of_hard_copies() -> None:
    """The count of updates is saved with the weights: a copy restored after 2 of its 3
    updates copies the online weights at the very next update, as the uninterrupted one does;
    a state dict saved without the count (an earlier version's checkpoint) still loads."""
    from rlblocks.algo import TargetNetwork

    online = torch.nn.Linear(3, 2)
    target = TargetNetwork(online, tau=None, hard_update_interval=3)
    for _ in range(2):
        target.update()
    saved = target.state_dict()
    with torch.no_grad():
        online.weight.add_(1.0)
    restored = TargetNetwork(online, tau=None, hard_update_interval=3)
    restored.load_state_dict(saved)
    assert restored.updates == 2
    restored.update()
    assert torch.equal(restored.net.weight, online.weight)
    assert saved["updates"].item() == 2
    old = {k: v for k, v in saved.items() if k != "updates"}
    TargetNetwork(online, tau=None, hard_update_interval=3).load_state_dict(old)  # no error
