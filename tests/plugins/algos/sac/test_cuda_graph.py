"""SAC's captured gradient step (``cuda_graph``): the same update as the eager step, counters
kept, refused where a replay would differ; the CUDA tests run where a GPU is."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo import graph_refusal

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_on_cpu_the_flag_keeps_the_eager_step(random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("sac", OBS, ACT)  # cuda_graph is on by default
    assert policy.config.cuda_graph
    buf = random_buffer(ACT)
    before = [p.detach().clone() for p in policy.critic.parameters()]
    stats = policy.update(16, buf)
    assert policy._step_graph is None and policy.gradient_steps == 1
    assert "loss/critic" in stats
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.critic.parameters()))
    assert graph_refusal(policy, buf) == "the policy is on cpu, not a CUDA device"


def test_refusals_name_what_a_replay_would_get_wrong(random_buffer) -> None:
    buf = random_buffer(ACT)
    nstep = rlblocks.make_policy("sac", OBS, ACT, n_step=3)
    scheduled = rlblocks.make_policy("sac", OBS, ACT)
    scheduled.actor_step.lr_schedule = lambda env_step: 1e-3
    fine = rlblocks.make_policy("sac", OBS, ACT)
    for policy in (nstep, scheduled, fine):
        policy.device = torch.device("cuda")  # only the reason is asked for: nothing runs
    assert graph_refusal(nstep, buf) is None  # the host walks the n steps, the graph adds V
    assert graph_refusal(scheduled, buf) == "optimizer 'actor' follows a learning-rate schedule"
    assert graph_refusal(fine, buf) is None


def _near_deterministic(**fields):
    # a tiny fixed temperature and standard deviation: the actor's noise and log-probabilities
    # no longer move the losses, so eager and captured steps must agree to rounding
    return dict(auto_alpha=False, alpha=1e-9, log_std_min=-25.0, log_std_max=-24.0, **fields)


@cuda
def test_captured_step_matches_the_eager_step(random_buffer) -> None:
    torch.manual_seed(0)
    eager = rlblocks.make_policy(
        "sac", OBS, ACT, device="cuda", **_near_deterministic(cuda_graph=False)
    )
    graphed = copy.deepcopy(eager)
    graphed.config.cuda_graph = True
    buf_a, buf_b = random_buffer(ACT, n=256), random_buffer(ACT, n=256)
    rng = np.random.default_rng(3)
    for _ in range(12):
        idx = rng.integers(0, 256, 32)
        buf_a.sampler.sample_index = lambda n, idx=idx: idx
        buf_b.sampler.sample_index = lambda n, idx=idx: idx
        eager.update(32, buf_a)
        graphed.update(32, buf_b)
    assert graphed._step_graph is not None and graphed._step_graph.captured == 1
    for (name, a), b in zip(eager.state_dict().items(), graphed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    assert graphed.gradient_steps == eager.gradient_steps == 12
    assert graphed.critic_step.steps == eager.critic_step.steps == 12
    assert graphed.critic_target.updates == eager.critic_target.updates == 12


@cuda
def test_captured_sac_with_auto_alpha_learns_and_recaptures_after_a_reload(random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("sac", OBS, ACT, device="cuda", alpha_lr=1e-2)  # graph: default
    buf = random_buffer(ACT, n=256)
    start = float(policy.alpha)
    stats = {}
    for _ in range(10):
        stats = policy.update(32, buf)
    graph = policy._step_graph
    assert graph is not None and graph.captured == 1
    assert float(policy.alpha) != start and policy.temperature.optimizer_step.steps == 10
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values())
    # a checkpoint's optimizer state replaces the tensors the graph updates: it is captured anew
    state = copy.deepcopy(policy.critic_step.state_dict())
    policy.critic_step.load_state_dict(state)
    policy.update(32, buf)
    assert policy._step_graph is not graph


@cuda
def test_a_non_finite_loss_in_a_replay_is_reported_with_its_optimizer(random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("sac", OBS, ACT, device="cuda", cuda_graph=True)
    buf = random_buffer(ACT, n=256)
    watch = policy.watch_finite()
    watch.attach()
    for _ in range(6):
        policy.update(32, buf)
        watch.end_update()
    assert policy._step_graph.captured == 1
    assert watch.check(policy.gradient_steps) == ""
    with torch.no_grad():
        next(policy.critic.parameters()).fill_(float("nan"))
    policy.update(32, buf)
    watch.end_update()
    problem = watch.check(policy.gradient_steps)
    assert "optimizer 'critic'" in problem and "gradient step 7" in problem, problem
