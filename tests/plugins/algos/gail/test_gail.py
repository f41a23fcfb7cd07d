"""GAIL: the spec (on-policy, with a dataset), the learner built by name, the discriminator's
loss and the two rewards against their formulas, the env's reward never reaching the learner,
checkpoints, runs from the command line (refused without a dataset, resumed, described), and
CartPole learned from a scripted expert's play with the env's reward hidden, where a
discriminator frozen at its start teaches nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.collect import Collector
from rlblocks.contracts import Batch, CheckpointError, ConfigError
from rlblocks.plugins import FIRST_PARTY, get_registry
from rlblocks.replay import ReplayBuffer

CARTPOLE = gym.make("CartPole-v1")
OBS, ACT = CARTPOLE.observation_space, CARTPOLE.action_space
#: the training envs pay nothing: the learner cannot be following the env's reward
HIDDEN_REWARD = (
    'env.train_wrappers=[{path = "gymnasium.wrappers:ClipReward", '
    "kwargs = {min_reward = 0.0, max_reward = 0.0}}]"
)


@pytest.fixture
def expert_play(scripted_play: Callable[..., Any]) -> ReplayBuffer:
    """5,000 steps (10 episodes of 500) of the scripted CartPole expert."""
    data, mean = scripted_play("CartPole-v1", 5_000)
    assert mean == 500.0
    return data


@pytest.fixture
def expert_file(expert_play: ReplayBuffer, tmp_path: Path) -> str:
    expert_play.save_hdf5(tmp_path / "expert.h5")
    return str(tmp_path / "expert.h5")


def rollout(policy: Any, steps: int = 256, seed: int = 0) -> ReplayBuffer:
    """``steps`` env steps (4 CartPole envs) of ``policy`` playing, as the on-policy trainer
    collects them."""
    envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=4, seed=seed)
    buf = rlblocks.make_buffer("replay", size=steps, num_envs=4)
    Collector(policy, envs, buf, seed=seed).collect(n_step=steps)
    envs.close()
    return buf


def test_spec_is_an_on_policy_first_party_algorithm_with_a_dataset(capsys) -> None:
    from rlblocks.cli import main as cli

    spec = get_registry("algo").spec("gail")
    assert spec.training == "on-policy" and spec.uses_dataset
    assert spec.describe()["training"] == "on-policy with a dataset"
    assert "gail" in FIRST_PARTY["algo"]
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "gail"] == [
        "rlblocks-algo-gail"
    ]
    assert cli(["list", "algo", "--details"]) == 0
    shown = capsys.readouterr().out.split("\ngail ")[1].split("\n")
    assert "    training: on-policy with a dataset" in shown[:12]


def test_the_learner_is_built_by_name_through_the_registry() -> None:
    policy = rlblocks.make_policy("gail", OBS, ACT)
    assert type(policy.learner) is get_registry("algo").load("ppo")
    assert policy.learner.config.lr == 3e-4  # the learner's own default, unless set
    a2c = rlblocks.make_policy("gail", OBS, ACT, learner="a2c", learner_config={"lr": 1e-3})
    assert type(a2c.learner) is get_registry("algo").load("a2c") and a2c.learner.config.lr == 1e-3
    # the learner's optimizers are checkpointed and scheduled with GAIL's own
    assert set(a2c.optim_steps) == {"discriminator", "learner/policy"}
    # acting is the learner's
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    policy.eval()
    np.testing.assert_array_equal(policy(Batch(obs=obs)).act, policy.learner(Batch(obs=obs)).act)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"learner": "dqn"}, r"\$\.learner: 'dqn' trains off-policy; .*on-policy"),
        ({"learner": "nosuch"}, r"\$\.learner: .*'nosuch'.*; on-policy algorithms: .*ppo"),
        ({"learner": "rppo"}, r"\$\.learner: 'rppo' is recurrent"),
        ({"learner": "gail"}, r"\$\.learner: 'gail' learns from a dataset itself"),
        ({"learner_config": {"lr": -1.0}}, r"\$\.learner_config: ppo's options: lr: must be"),
        ({"learner_config": {"clip": 0.1}}, r"learner_config: .*clip: unknown field"),
        ({"reward": "wgan"}, r"\$\.reward: unknown value 'wgan'"),
        ({"disc_epochs": -1}, r"\$\.disc_epochs"),
    ],
)
def test_a_wrong_setting_is_one_line_naming_it(fields: dict[str, Any], message: str) -> None:
    if fields.get("learner") == "rppo":
        pytest.importorskip("rlblocks_algo_rppo")
    with pytest.raises(ConfigError, match=message) as info:
        rlblocks.make_policy("gail", OBS, ACT, **fields)
    assert len(str(info.value).splitlines()) == 1


def test_the_discriminator_loss_and_the_rewards_follow_their_formulas(
    expert_play: ReplayBuffer,
) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16], disc_batch_size=64)
    policy.set_dataset(expert_play)
    own = rollout(policy, 64)
    steps = own[own.sample_index(0)]
    # D = 1/2 everywhere before it learns: no step is preferred
    assert torch.equal(policy.reward(steps.obs, steps.act), torch.zeros(64))
    seen: dict[str, torch.Tensor] = {}
    step = policy.disc_step.step

    def recording(loss: torch.Tensor, retain_graph: bool = False) -> None:
        seen["loss"] = loss.detach()
        step(loss, retain_graph)

    policy.disc_step.step = recording
    expert_rows = copy.deepcopy(expert_play)  # the expert batch the update will draw
    drawn, _ = expert_rows.sample(64)
    # the update's only pass: its minibatch is the rollout in the policy's permuted order
    order = copy.deepcopy(policy._rng).permutation(64)
    with torch.no_grad():
        d_own = torch.sigmoid(policy.logits(steps.obs[order], steps.act[order]))
        d_expert = torch.sigmoid(policy.logits(drawn.obs, drawn.act))
        expected = -torch.log(d_expert).mean() - torch.log(1 - d_own).mean()
    stats = policy.learn_discriminator(steps.obs, steps.act)
    torch.testing.assert_close(seen["loss"], expected)
    assert stats["disc/loss"] == pytest.approx(float(expected), rel=1e-5)
    # the rewards of the updated discriminator: its logit (airl) and -log(1 - D) (gail)
    with torch.no_grad():
        d = torch.sigmoid(policy.logits(steps.obs, steps.act))
    torch.testing.assert_close(policy.reward(steps.obs, steps.act), torch.log(d / (1 - d)))
    policy.config.reward = "gail"
    torch.testing.assert_close(policy.reward(steps.obs, steps.act), -torch.log(1 - d))


def test_the_discriminator_learns_to_tell_the_expert_from_the_policy(
    expert_play: ReplayBuffer,
) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("gail", OBS, ACT, lr=3e-3, disc_epochs=1)
    policy.set_dataset(expert_play)
    own = rollout(policy, 256)
    steps = own[own.sample_index(0)]
    first = policy.learn_discriminator(steps.obs, steps.act)["disc/loss"]
    policy.config.disc_epochs = 30
    last = policy.learn_discriminator(steps.obs, steps.act)["disc/loss"]
    assert first == pytest.approx(2 * np.log(2), abs=0.01)  # D = 1/2: chance
    assert last < 0.8 * first  # seed 0: 1.39 -> 0.91
    # the expert's steps earn more than the random policy's
    expert = expert_play[expert_play.sample_index(0)[:1000]]
    theirs = float(policy.reward(expert.obs, expert.act).mean())
    mine = float(policy.reward(steps.obs, steps.act).mean())
    assert theirs > 0.0 > mine


def test_the_envs_reward_never_reaches_the_learner(expert_play: ReplayBuffer) -> None:
    # the same rollout with other env rewards: the same update, to the last bit
    own = rollout(rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16]), 128)
    other = copy.deepcopy(own)
    other.storage_arrays["rew"][:] = np.random.default_rng(1).normal(0, 100, other.maxsize)
    params = []
    for buf in (own, other):
        torch.manual_seed(0)
        policy = rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16])
        policy.seed(0)
        policy.set_dataset(copy.deepcopy(expert_play))
        stats = policy.update(0, buf, batch_size=64, repeat=2)
        assert stats["gradient_steps"] == 4 and "disc/loss" in stats
        params.append([p.detach().clone() for p in policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params, strict=True))
    assert stats["reward/env"] != 1.0  # the env's reward is logged, as it was


def test_the_learner_reads_the_learned_reward_in_every_way_a_buffer_is_read() -> None:
    from rlblocks_algo_gail.gail import RewardView

    buf = rollout(rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16]), 64)
    index = buf.sample_index(0)
    learned = np.arange(len(index), dtype=np.float32) + 0.5
    view = RewardView(buf, index, learned)
    np.testing.assert_array_equal(view.get(index, "rew"), learned)
    np.testing.assert_array_equal(view[index].rew, learned)
    np.testing.assert_array_equal(view[:].rew, learned)  # a slice: time order, as buffers read it
    np.testing.assert_array_equal(view.rew[index], learned)
    batch, drawn = view.sample(16)
    np.testing.assert_array_equal(batch.rew, view.get(drawn, "rew"))
    # everything else is the buffer's own
    np.testing.assert_array_equal(view.get(index, "obs"), buf.get(index, "obs"))
    np.testing.assert_array_equal(view[index].act, buf[index].act)
    assert len(view) == len(buf) and view.maxsize == buf.maxsize
    assert set(np.asarray(buf.get(index, "rew")).tolist()) == {1.0}  # untouched


def test_without_a_dataset_the_update_says_how_to_give_one() -> None:
    policy = rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16])
    with pytest.raises(ConfigError, match=r"set_dataset.*--dataset"):
        policy.update(0, rollout(policy, 32), batch_size=32, repeat=1)
    wrong = ReplayBuffer(8)
    for _ in range(8):
        wrong.add(Batch(obs=np.zeros(3, np.float32), act=0, rew=0.0, terminated=False,
                        truncated=False, obs_next=np.zeros(3, np.float32)))  # fmt: skip
    with pytest.raises(ConfigError, match=r"shape \(3,\).*recorded on this env"):
        policy.set_dataset(wrong)
    with pytest.raises(ConfigError, match="learns from no dataset"):
        rlblocks.make_policy("ppo", OBS, ACT).set_dataset(wrong)


def _same(a: Any, b: Any) -> bool:
    """Whether two nested states (dicts, lists, tensors, numbers) hold the same values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_a_checkpoint_restores_the_learner_and_the_discriminator(
    expert_play: ReplayBuffer, tmp_path: Path
) -> None:
    from rlblocks.run import load_checkpoint, save_checkpoint

    torch.manual_seed(0)
    policy = rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16])
    policy.set_dataset(expert_play)
    policy.update(0, rollout(policy, 64), batch_size=32, repeat=2)
    policy.set_env_step(64)
    save_checkpoint(
        tmp_path / "ckpt.pt", {"policy": policy.state_dict(), "extra": policy.extra_state()}
    )
    saved = load_checkpoint(tmp_path / "ckpt.pt")
    fresh = rlblocks.make_policy("gail", OBS, ACT, hidden_sizes=[16])
    fresh.load_state_dict(saved["policy"])
    fresh.load_extra_state(saved["extra"])
    assert fresh.learner.gradient_steps == policy.learner.gradient_steps == 4
    assert fresh.env_step == fresh.learner.env_step == 64
    assert float(fresh.obs_count) == len(expert_play)
    assert set(saved["extra"]["optimizers"]) == {"discriminator", "learner/policy"}
    for name, step in policy.optim_steps.items():
        assert step.steps > 0 and _same(step.state_dict(), fresh.optim_steps[name].state_dict())
    obs = np.asarray(expert_play.obs[:16])
    with torch.no_grad():
        torch.testing.assert_close(fresh.logits(obs, expert_play.act[:16]),
                                   policy.logits(obs, expert_play.act[:16]))  # fmt: skip


# -- runs ------------------------------------------------------------------------------------------
def _small(run: Path, *more: str) -> list[str]:
    return ["--run-dir", str(run), "--no-progress", "--set", "trainer.test_episodes=2",
            "--set", "env.num_test_envs=2", "--set", "env.num_envs=2",
            "--set", "trainer.step_per_collect=64", "--set", "trainer.test_interval=128",
            "--set", "trainer.checkpoint_interval=128", *more]  # fmt: skip


def test_a_run_needs_the_dataset(tmp_path: Path, capsys) -> None:
    from rlblocks.cli import main as cli

    assert cli(["train", "gail", *_small(tmp_path / "run")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dataset FILE" in err[0] and "gail" in err[0]
    with pytest.raises(ConfigError, match="max_gradient_steps"):
        rlblocks.train("gail", dataset=tmp_path / "x.h5", max_gradient_steps=10, loggers=[],
                       run_dir=tmp_path / "other")  # fmt: skip


def test_a_run_from_the_command_line_trains_resumes_and_is_described(
    expert_file: str, tmp_path: Path, capsys
) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    argv = ["train", "gail", "--dataset", expert_file, "--max-env-steps", "256", *_small(run)]
    assert cli(argv) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["buffer"]["dataset"] == expert_file
    agent = rlblocks.load(run)
    assert agent.algo == "gail" and agent.act(np.zeros(4, np.float32)) in (0, 1)
    assert cli(["resume", str(run), "--max-env-steps", "384", "--no-progress"]) == 0
    assert json.loads((run / "result.json").read_text())["env_steps"] == 384
    capsys.readouterr()
    assert cli(["describe", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # as one line, whatever the wrapping
    assert f"online, also learning from the dataset {expert_file}" in text
    # a changed dataset is refused on resume, as an offline run's
    data = ReplayBuffer.load_hdf5(expert_file)
    data.storage_arrays["act"][:10] = 1 - data.storage_arrays["act"][:10]
    data.save_hdf5(expert_file)
    with pytest.raises(CheckpointError, match="changed since the run's checkpoint"):
        rlblocks.resume(run, overrides=["trainer.max_env_steps=512"])


# -- CartPole from the expert's play, the env's reward hidden -------------------------------------
def _imitate(path: str, tmp: Path, *sets: str) -> rlblocks.TrainResult:
    # the spec's CartPole settings (PPO's), 20 test episodes; the training envs pay nothing
    return rlblocks.train(
        "gail", env="CartPole-v1", dataset=path, max_env_steps=20_480, seed=0,
        overrides=[HIDDEN_REWARD, "trainer.test_episodes=20", "env.num_test_envs=20", *sets],
        loggers=["csv"], progress=False, run_dir=tmp,
    )  # fmt: skip


def test_gail_learns_cartpole_from_an_experts_play_without_its_reward(
    expert_file: str, tmp_path: Path
) -> None:
    # seeds 0-3 pass 475 (the mean of 20 test episodes) at 10k, 14k, 8k and 10k env steps
    result = _imitate(expert_file, tmp_path / "run")
    assert result.solved and result.best_test_return >= 475.0, result
    rows = (tmp_path / "run" / "logs" / "update.csv").read_text().splitlines()
    head = rows[0].split(",")
    env_rewards = [float(r.split(",")[head.index("reward/env")]) for r in rows[1:]]
    assert env_rewards and set(env_rewards) == {0.0}  # what the training envs paid


def test_a_discriminator_frozen_at_its_start_teaches_nothing(
    expert_file: str, tmp_path: Path
) -> None:
    # the same run, the discriminator never updated: its reward stays 0 and the policy stays
    # where it started (seed 0: 9.4)
    result = _imitate(expert_file, tmp_path / "run", "algo.disc_epochs=0")
    assert not result.solved and result.best_test_return < 50.0, result
