"""The captured gradient step (``cuda_graph``) of DDPG, TD3 and REDQ: the eager step's
arithmetic and counters, one graph per phase of a delayed actor (TD3's ``policy_delay``, REDQ's
``actor_delay``), statistics that stay current on critic-only steps; and SAC and TD3 solving
Pendulum with it (SAC's other checks are in ``sac/test_cuda_graph.py``). The phase bookkeeping
and the statistics are checked on any machine; the CUDA tests run where a GPU is."""

from __future__ import annotations

import copy
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo import graph_refusal

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: small settings that keep each algorithm's step cheap and, where noted, free of randomness
#: that an eager and a captured step would draw differently
SMALL = {
    "ddpg": dict(hidden_sizes=[32, 32]),
    # smoothing noise of zero: the target is mu'(s') exactly
    "td3": dict(hidden_sizes=[32, 32], policy_delay=3, policy_noise=0.0),
    # every critic in the target's subset (the draw cannot matter), a near-deterministic actor
    "redq": dict(
        hidden_sizes=[32, 32],
        ensemble_size=4,
        subset_size=4,
        actor_delay=3,
        auto_alpha=False,
        alpha=1e-30,
        log_std_min=-25.0,
        log_std_max=-24.0,
    ),
}
SMALL["sac"] = dict(  # a near-deterministic actor, as REDQ's
    hidden_sizes=[32, 32], auto_alpha=False, alpha=1e-30, log_std_min=-25.0, log_std_max=-24.0
)
#: phases each algorithm's step has (DDPG, SAC: one; the delayed actors: critic-only and with
#: actor)
PHASES = {"ddpg": 1, "sac": 1, "td3": 2, "redq": 2}


@pytest.mark.parametrize("algo", ["ddpg", "td3", "redq"])
def test_cuda_graph_is_on_by_default_and_inert_on_a_cpu(algo: str, random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy(algo, OBS, ACT, **SMALL[algo])
    assert policy.config.cuda_graph
    buf = random_buffer(ACT)
    policy.update(16, buf)
    assert policy._step_graph is None and policy.gradient_steps == 1
    assert graph_refusal(policy, buf) == "the policy is on cpu, not a CUDA device"


@pytest.mark.parametrize("algo", ["td3", "redq"])
def test_graph_phase_says_which_steps_take_the_actor_step(algo: str, random_buffer) -> None:
    # the captured step replays the graph of graph_phase(); it must name the branch learn takes
    torch.manual_seed(0)
    policy = rlblocks.make_policy(algo, OBS, ACT, **SMALL[algo])
    buf = random_buffer(ACT)
    phases = []
    for _ in range(9):
        phase = policy.graph_phase()
        before = policy.actor_step.steps
        policy.update(16, buf)
        assert (policy.actor_step.steps > before) == phase
        phases.append(phase)
    assert phases == [False, False, True] * 3
    assert rlblocks.make_policy("ddpg", OBS, ACT).graph_phase() is None


@pytest.mark.parametrize("algo", ["td3", "redq"])
def test_critic_only_steps_report_the_last_actor_step(algo: str, random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy(algo, OBS, ACT, **SMALL[algo])
    buf = random_buffer(ACT)
    early = [policy.update(16, buf) for _ in range(2)]  # steps 1-2: no actor step yet
    if algo == "redq":  # nothing to report before the first actor step
        assert all("loss/actor" not in s and "entropy" not in s for s in early)
    stats = [policy.update(16, buf) for _ in range(3)]  # steps 3-5; the actor steps at 3
    actor_loss = [float(s["loss/actor"]) for s in stats]
    assert actor_loss[0] == actor_loss[1] == actor_loss[2] != 0.0
    # each step's statistics are its own tensors, not one buffer that later steps overwrite
    assert stats[1]["loss/actor"] is not stats[2]["loss/actor"]
    policy.update(16, buf)  # step 6: a new actor step
    assert float(policy.update(16, buf)["loss/actor"]) != actor_loss[2]
    assert float(stats[2]["loss/actor"]) == actor_loss[2]


def test_a_capture_refused_on_a_gpu_is_reported_once(random_buffer) -> None:
    # a GPU run with cuda_graph on whose step must stay eager (here: an LR schedule) says so
    buf = random_buffer(ACT)
    policy = rlblocks.make_policy("td3", OBS, ACT, **SMALL["td3"])
    policy.critic_step.lr_schedule = lambda env_step: 1e-3
    policy.device = torch.device("cuda")  # only the decision is asked for: nothing runs
    with pytest.warns(RuntimeWarning, match=r"TD3Policy .* eagerly on cuda.*schedule") as told:
        assert policy._graph_for(16, buf) is None
    assert "algo.cuda_graph=false" in str(told[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert policy._graph_for(16, random_buffer(ACT)) is None  # once per policy
        quiet = rlblocks.make_policy("td3", OBS, ACT, cuda_graph=False)
        quiet.critic_step.lr_schedule = lambda env_step: 1e-3
        quiet.device = torch.device("cuda")
        assert quiet._graph_for(16, buf) is None


def _paired_updates(eager, graphed, random_buffer, steps: int) -> tuple[dict, dict]:
    buf_a, buf_b = random_buffer(ACT, n=256), random_buffer(ACT, n=256)
    rng = np.random.default_rng(3)
    stats_a = stats_b = {}
    for _ in range(steps):
        idx = rng.integers(0, 256, 32)
        buf_a.sampler.sample_index = lambda n, idx=idx: idx
        buf_b.sampler.sample_index = lambda n, idx=idx: idx
        stats_a = eager.update(32, buf_a)
        stats_b = graphed.update(32, buf_b)
    return stats_a, stats_b


@cuda
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("algo", ["ddpg", "td3", "redq", "sac"])
def test_captured_step_matches_the_eager_step(algo: str, n_step: int, random_buffer) -> None:
    # n_step=3: the host walks three rows along the episode, the graph adds the bootstrap value
    torch.manual_seed(0)
    eager = rlblocks.make_policy(
        algo, OBS, ACT, device="cuda", cuda_graph=False, n_step=n_step, **SMALL[algo]
    )
    graphed = copy.deepcopy(eager)
    graphed.config.cuda_graph = True
    stats_a, stats_b = _paired_updates(eager, graphed, random_buffer, 14)
    graph = graphed._step_graph
    assert graph is not None and graph.captured == PHASES[algo]
    for (name, a), b in zip(eager.state_dict().items(), graphed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    assert stats_a.keys() == stats_b.keys()
    # REDQ's entropy is minus the sampled log-probabilities: the two steps draw their own noise
    for key in set(stats_a) - {"entropy"}:
        torch.testing.assert_close(
            torch.as_tensor(stats_a[key]), torch.as_tensor(stats_b[key]), rtol=1e-4, atol=1e-5
        )
    assert graphed.gradient_steps == eager.gradient_steps == 14
    for name, step in eager.optim_steps.items():
        assert graphed.optim_steps[name].steps == step.steps, name
    assert graphed.critic_target.updates == eager.critic_target.updates


def _replayed_critic_losses(algo: str, random_buffer, **fields) -> list[float]:
    """Critic losses of the last eight replays of one fixed batch, the networks frozen (learning
    rate 0: the targets stay the online copies too)."""
    torch.manual_seed(0)
    policy = rlblocks.make_policy(algo, OBS, ACT, device="cuda", **dict(SMALL[algo], **fields))
    policy.actor_step.lr = 0.0
    policy.critic_step.lr = 0.0
    buf = random_buffer(ACT, n=256)
    idx = np.arange(32)
    buf.sampler.sample_index = lambda n: idx
    losses = [float(policy.update(32, buf)["loss/critic"]) for _ in range(16)]
    assert policy._step_graph.captured == 2
    return losses[-8:]  # replays only (the first steps warm up eagerly)


@cuda
@pytest.mark.parametrize(
    ("algo", "random", "still"),
    [
        ("td3", {"policy_noise": 0.5}, {"policy_noise": 0.0}),
        ("redq", {"subset_size": 1}, {"subset_size": 4}),
    ],
)
def test_captured_steps_draw_fresh_noise_at_every_replay(algo, random, still, random_buffer):
    # TD3's target smoothing and REDQ's random target subset are drawn on the GPU inside the
    # graph: replays of one batch on frozen networks give different targets, hence different
    # critic losses; without the randomness they give one loss
    drawn = _replayed_critic_losses(algo, random_buffer, **random)
    assert len(set(drawn)) > 1, drawn
    fixed = _replayed_critic_losses(algo, random_buffer, **still)
    assert len(set(fixed)) == 1, fixed


@cuda
def test_td3_recaptures_both_phases_after_a_reload(random_buffer) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("td3", OBS, ACT, device="cuda", **SMALL["td3"])
    buf = random_buffer(ACT, n=256)
    for _ in range(8):
        policy.update(32, buf)
    graph = policy._step_graph
    assert graph is not None and graph.captured == 2
    policy.actor_step.load_state_dict(copy.deepcopy(policy.actor_step.state_dict()))
    for _ in range(8):
        stats = policy.update(32, buf)
    assert policy._step_graph is not graph and policy._step_graph.captured == 2
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values())


@cuda
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_a_captured_step_solves_pendulum_on_cuda(algo: str, tmp_path) -> None:
    result = rlblocks.train(
        algo,
        env="Pendulum-v1",
        seed=0,
        stop_reward=-250,
        loggers=[],
        progress=False,
        device="cuda",
        # the Pendulum presets' 3-step targets, captured (cuda_graph: the default)
        overrides=["trainer.max_env_steps=30000"],
        run_dir=tmp_path / "run",
    )
    assert result.solved, result
