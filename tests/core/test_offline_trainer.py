"""Offline trainer: gradient steps over a fixed buffer, scheduled in gradient steps (budget,
tests, logs, checkpoints), the stop rule, hooks, resuming, and what it refuses."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
from rlblocks.algo import BasePolicy, OptimizerStep
from rlblocks.collect import Collector
from rlblocks.contracts import Batch, ConfigError, NonFiniteError
from rlblocks.plugins import hookimpl, make_plugin_manager
from rlblocks.replay import ReplayBuffer
from rlblocks.run import load_checkpoint, save_checkpoint
from rlblocks.trainers import OfflineTrainer

OBS = gym.spaces.Box(-5.0, 5.0, (4,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


class TinyPolicy(BasePolicy):
    """Always pushes left (CartPole returns about 9); each update fits one weight to the
    sampled rewards with a real optimizer step, and counts what it was given."""

    def __init__(self, poison_after: int | None = None) -> None:
        super().__init__(OBS, ACT)
        self.w = nn.Linear(1, 1)
        self.step = self.add_optimizer("w", OptimizerStep(self.w, 1e-2))
        self.sampled: list[int] = []
        self.poison_after = poison_after

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        return Batch(act=np.zeros(len(batch.obs), dtype=np.int64), state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        self.sampled.append(len(batch.rew))
        rew = torch.as_tensor(np.asarray(batch.rew), dtype=torch.float32)[:, None]
        loss = (self.w(torch.ones_like(rew)) - rew).pow(2).mean()
        if self.poison_after is not None and len(self.sampled) > self.poison_after:
            loss = loss * float("nan")
        self.step.step(loss)
        self.gradient_steps += 1
        return {"loss": loss.detach()}


class Recorder:
    """Every hook call of interest, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @hookimpl
    def rlblocks_rollout_end(self, stats, env_step):
        self.calls.append(("rollout_end", {"env_step": env_step}))

    @hookimpl
    def rlblocks_update_end(self, stats, env_step, gradient_step):
        self.calls.append(("update_end", {"env_step": env_step, "gradient_step": gradient_step}))

    @hookimpl
    def rlblocks_test_end(self, stats, env_step, trainer):
        self.calls.append(
            ("test_end", {"env_step": env_step, "gradient_step": trainer.state.gradient_step})
        )

    @hookimpl
    def rlblocks_log(self, namespace, scalars, step):
        self.calls.append(("log", {"namespace": namespace, "step": step}))

    def of(self, name: str, key: str) -> list[Any]:
        return [c[1][key] for c in self.calls if c[0] == name]


def dataset(n: int = 300) -> ReplayBuffer:
    """A fixed buffer of ``n`` random CartPole-like transitions (seeded)."""
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, seed=0)
    for t in range(n):
        buf.add(
            Batch(
                obs=rng.normal(size=4).astype(np.float32),
                act=int(rng.integers(2)),
                rew=float(rng.normal()),
                terminated=t % 50 == 49,
                truncated=False,
                obs_next=rng.normal(size=4).astype(np.float32),
            )
        )
    return buf


def build(
    recorder: object | None = None,
    *,
    policy: TinyPolicy | None = None,
    buffer: ReplayBuffer | None = None,
    **kw: Any,
) -> OfflineTrainer:
    policy = policy or TinyPolicy()
    test_envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=2, seed=100)
    options: dict[str, Any] = {
        "max_gradient_steps": 250,
        "step_per_round": 40,
        "batch_size": 8,
        "test_interval": 100,
        "test_episodes": 2,
        "log_interval": 50,
        **kw,
    }
    return OfflineTrainer(
        policy,
        Collector(policy, test_envs, None, exploration=False, seed=1),
        dataset() if buffer is None else buffer,
        plugin_manager=make_plugin_manager([recorder] if recorder else []),
        **options,
    )


def test_budget_is_gradient_steps_and_no_env_step_is_taken() -> None:
    trainer = build()
    result = trainer.run()
    assert result.gradient_steps == 250 == trainer.state.gradient_step
    assert trainer.policy.sampled == [8] * 250  # one update of batch_size per gradient step
    assert result.env_steps == 0 and result.train_episodes == 0
    assert result.collect_seconds == 0.0 and result.update_speed > 0
    assert result.stop_reason == "reached max_gradient_steps=250"
    assert not hasattr(trainer, "max_env_steps")  # an offline run has no env-step budget
    assert np.isfinite(result.best_test_return)


def test_tests_logs_and_update_hooks_follow_gradient_steps() -> None:
    rec = Recorder()
    build(rec).run()
    assert rec.of("rollout_end", "env_step") == []  # nothing is collected for training
    # a test every 100 gradient steps, and a full one of the final policy at the budget
    assert rec.of("test_end", "gradient_step") == [100, 200, 250]
    assert set(rec.of("test_end", "env_step")) == {0}
    # update statistics every log_interval=50 gradient steps, rounds cut to land on them
    assert rec.of("update_end", "gradient_step") == [50, 100, 150, 200, 250]
    assert set(rec.of("update_end", "env_step")) == {0}
    # the loggers' x axis is the gradient step
    logged = [(c[1]["namespace"], c[1]["step"]) for c in rec.calls if c[0] == "log"]
    assert ("test", 100) in logged and ("update", 250) in logged
    assert all(step > 0 for _, step in logged)


def test_rounds_end_where_something_is_due() -> None:
    sizes: list[int] = []

    def train_fn(epoch: int, gradient_step: int) -> None:
        sizes.append(gradient_step)

    build(train_fn=train_fn, step_per_round=30, log_interval=1_000).run()
    # rounds of 30, cut at the tests at 100 and 200 and at the budget of 250
    assert sizes == [0, 30, 60, 90, 100, 130, 160, 190, 200, 230]


def test_train_fn_and_test_fn_get_the_epoch_and_the_gradient_step() -> None:
    seen: list[tuple[str, int, int]] = []
    build(
        train_fn=lambda e, g: seen.append(("train", e, g)),
        test_fn=lambda e, g: seen.append(("test", e, g)),
        step_per_round=100,
        log_interval=1_000,
    ).run()
    assert seen == [
        ("train", 1, 0), ("test", 1, 100),
        ("train", 2, 100), ("test", 2, 200),
        ("train", 3, 200), ("test", 3, 250),
    ]  # fmt: skip


def test_stop_reward_stops_at_the_first_test_that_reaches_it() -> None:
    reached = build(stop_reward=5.0, max_gradient_steps=10_000).run()  # CartPole pays ~9
    assert reached.solved and reached.gradient_steps == 100
    assert reached.stop_reason.startswith("mean test return")
    missed = build(stop_reward=400.0).run()
    assert not missed.solved and missed.gradient_steps == 250


def test_should_stop_hook_and_request_stop_end_the_run() -> None:
    class StopAfterTwoTests:
        @hookimpl
        def rlblocks_should_stop(self, state):
            return state["tests"] >= 2

    assert build(StopAfterTwoTests(), max_gradient_steps=1_000).run().gradient_steps == 200

    class StopAtFirstUpdateLog:
        @hookimpl
        def rlblocks_update_end(self, stats, env_step, gradient_step, trainer):
            trainer.request_stop("enough")

    result = build(StopAtFirstUpdateLog(), max_gradient_steps=1_000).run()
    assert result.stop_reason == "enough" and result.gradient_steps == 50


def test_best_and_checkpoint_callbacks_count_gradient_steps() -> None:
    checkpoints: list[int] = []
    bests: list[int] = []
    build(
        checkpoint_fn=lambda t: checkpoints.append(t.state.gradient_step),
        best_fn=lambda t: bests.append(t.state.gradient_step),
        checkpoint_interval=120,
    ).run()
    assert checkpoints == [120, 240, 250]  # on schedule, and when the run ends
    assert bests and bests[0] == 100  # the first test is always the best so far


def test_resume_from_saved_state_continues_the_schedule(tmp_path) -> None:
    straight = Recorder()
    whole = build(straight, max_gradient_steps=400)
    whole.run()

    first = build(max_gradient_steps=200)
    first.run()
    save_checkpoint(
        tmp_path / "state.pt",
        {
            "trainer": first.state_dict(),
            "policy": first.policy.state_dict(),
            "extra": first.policy.extra_state(),
        },
    )
    saved = load_checkpoint(tmp_path / "state.pt")
    policy = TinyPolicy()
    policy.load_state_dict(saved["policy"])
    policy.load_extra_state(saved["extra"])
    rec = Recorder()
    resumed = build(rec, policy=policy, max_gradient_steps=400)
    resumed.load_state_dict(saved["trainer"])
    result = resumed.run()
    assert result.gradient_steps == 400 == whole.state.gradient_step
    assert policy.gradient_steps == 400
    assert len(policy.sampled) == 200  # only the second half ran here
    # the schedule goes on where it was: tests and update logs at the same steps as a run
    # that never stopped
    assert rec.of("test_end", "gradient_step") == [300, 400]
    assert straight.of("test_end", "gradient_step") == [100, 200, 300, 400]
    assert rec.of("update_end", "gradient_step") == [250, 300, 350, 400]
    assert resumed.state.tests == 4 and result.env_steps == 0


def test_an_empty_buffer_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"buffer \(ReplayBuffer\) is empty.*load_hdf5"):
        build(buffer=ReplayBuffer(10))


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"max_env_steps": 100}, "max_gradient_steps"),
        ({"test_in_training": True}, "test_in_training"),
        ({"batch_mode": "complete_episodes"}, "batch_mode"),
        ({"step_per_round": 0}, "step_per_round"),
    ],
)
def test_online_settings_are_refused(extra: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(**extra)


def test_a_non_positive_budget_names_max_gradient_steps() -> None:
    with pytest.raises(ValueError, match="max_gradient_steps must be positive"):
        build(max_gradient_steps=0)


def test_the_dataset_is_only_sampled() -> None:
    buf = dataset()
    before = buf[buf.sample_indices(0)]
    build(buffer=buf).run()
    after = buf[buf.sample_indices(0)]
    assert len(buf) == 300
    for key in ("obs", "act", "rew", "terminated", "truncated", "obs_next"):
        np.testing.assert_array_equal(after[key], before[key])


def test_a_nan_loss_names_the_gradient_step() -> None:
    with pytest.raises(NonFiniteError, match=r"nan at gradient step 31 \(gradient step 40\)"):
        build(policy=TinyPolicy(poison_after=30)).run()


def test_without_a_test_collector_it_runs_the_budget() -> None:
    policy = TinyPolicy()
    trainer = OfflineTrainer(policy, None, dataset(), max_gradient_steps=120, batch_size=4)
    result = trainer.run()
    assert result.gradient_steps == 120 and trainer.state.tests == 0
    assert rlblocks.OfflineTrainer is OfflineTrainer


def test_test_at_start_tests_before_the_first_gradient_step() -> None:
    rec = Recorder()
    seen: list[tuple[str, int, int]] = []
    build(
        rec, test_at_start=True, step_per_round=100, log_interval=1_000,
        train_fn=lambda e, g: seen.append(("train", e, g)),
        test_fn=lambda e, g: seen.append(("test", e, g)),
    ).run()  # fmt: skip
    assert rec.of("test_end", "gradient_step") == [0, 100, 200, 250]
    assert seen[:2] == [("test", 0, 0), ("train", 1, 0)]
