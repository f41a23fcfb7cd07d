"""Off-policy trainer: schedule, hook firing order, stop rules, resumable counters."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.collect import Collector
from rlblocks.contracts import ConfigError, NonFiniteError
from rlblocks.plugins import hookimpl, make_plugin_manager
from rlblocks.trainers import OffPolicyTrainer


class Recorder:
    """Records every hook call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    @hookimpl
    def rlblocks_rollout_end(self, stats, env_step):
        self.calls.append(("rollout_end", {"env_step": env_step}))

    @hookimpl
    def rlblocks_update_end(self, stats, env_step, gradient_step):
        self.calls.append(("update_end", {"env_step": env_step, "gradient_step": gradient_step}))

    @hookimpl
    def rlblocks_test_end(self, stats, env_step):
        self.calls.append(("test_end", {"env_step": env_step, "mean": stats["return_mean"],
                                        "stats": dict(stats)}))

    @hookimpl
    def rlblocks_log(self, namespace, scalars, step):
        self.calls.append(("log", {"namespace": namespace, "step": step}))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def build(recorder: object, *, stop_reward=None, max_env_steps=400, **kw) -> OffPolicyTrainer:
    train_envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=4, seed=0)
    test_envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=4, seed=100)
    policy = rlblocks.make_policy("dqn", train_envs.observation_space, train_envs.action_space)
    buffer = rlblocks.make_buffer("replay", size=2000, num_envs=4)
    return OffPolicyTrainer(
        policy,
        Collector(policy, train_envs, buffer, seed=0),
        Collector(policy, test_envs, None, exploration=False, seed=1),
        buffer,
        step_per_collect=8,
        update_per_step=0.5,
        batch_size=16,
        max_env_steps=max_env_steps,
        test_interval=200,
        test_episodes=4,
        log_interval=100,
        stop_reward=stop_reward,
        plugin_manager=make_plugin_manager([recorder]),
        **{"warmup_steps": 64, **kw},
    )


def test_schedule_counts_steps_and_gradient_steps() -> None:
    trainer = build(Recorder())
    result = trainer.run()
    assert result.env_steps >= 400
    # warm-up (64 random steps) plus updates at 0.5 per step of every later collect
    expected = int(0.5 * (result.env_steps - 64))
    assert abs(result.gradient_steps - expected) <= 1
    assert result.stop_reason.startswith("reached max_env_steps")
    assert math.isfinite(result.best_test_return)


def test_hooks_fire_per_collect_update_and_test_in_order() -> None:
    rec = Recorder()
    build(rec).run()
    names = rec.names()
    assert names[0] == "rollout_end"  # the warm-up collect
    assert "update_end" in names and "test_end" in names
    tests = [c for c in rec.calls if c[0] == "test_end"]
    # tests at 200 and 400 env steps (the last one ends the run)
    assert [c[1]["env_step"] for c in tests] == [200, 400]
    # every test is logged under the "test" namespace before test_end fires
    first_test = names.index("test_end")
    assert rec.calls[first_test - 1] == ("log", {"namespace": "test", "step": 200})
    # updates are aggregated: at most one update_end per log interval, never per gradient step
    assert names.count("update_end") <= 400 // 100 + 1
    steps = [c[1]["env_step"] for c in rec.calls if c[0] == "rollout_end"]
    assert steps == sorted(steps)


def test_a_warm_up_that_reaches_a_test_step_is_tested_before_the_first_gradient_step() -> None:
    rec = Recorder()
    trainer = build(rec, warmup_steps=200)
    trainer.run()
    tests = [c for c in rec.calls if c[0] == "test_end"]
    # the first test at the warm-up's end, with no update before it; the rest on schedule
    assert [c[1]["env_step"] for c in tests] == [200, 400]
    assert "update_end" not in rec.names()[: rec.names().index("test_end")]
    assert trainer.state.gradient_step == int(0.5 * (trainer.state.env_step - 200))


def test_update_logs_carry_the_learning_rate_and_the_epsilon_of_the_latest_collect() -> None:
    logged: list[tuple[int, dict[str, float]]] = []

    class UpdateLog:
        @hookimpl
        def rlblocks_log(self, namespace, scalars, step):
            if namespace == "update":
                logged.append((step, dict(scalars)))

    trainer = build(UpdateLog())
    trainer.run()
    c = trainer.policy.config
    assert logged
    for step, scalars in logged:
        announced = step - trainer.step_per_collect  # told to the policy before that collect
        frac = min(1.0, announced / c.eps_decay_steps)
        assert scalars["epsilon"] == pytest.approx(c.eps_start + frac * (c.eps_end - c.eps_start))
        assert scalars["lr/q"] == pytest.approx(c.lr)


def test_stop_reward_stops_after_a_test() -> None:
    rec = Recorder()
    result = build(rec, stop_reward=-1.0, max_env_steps=10_000).run()
    assert result.solved
    assert result.env_steps < 10_000
    assert result.stop_reason.startswith("mean test return")


def test_should_stop_hook_stops_the_run() -> None:
    class StopAt300:
        @hookimpl
        def rlblocks_should_stop(self, state):
            return state["env_step"] >= 300

    trainer = build(StopAt300(), max_env_steps=100_000)
    result = trainer.run()
    # asked after each test (every 200 env steps): the first test past 300 stops the run
    assert result.env_steps == 400
    assert "rlblocks_should_stop" in result.stop_reason
    assert not result.solved


def test_should_stop_false_keeps_a_solved_run_going_and_sees_the_stop_reward() -> None:
    asked: list[tuple[int, float]] = []

    class KeepGoingUntil600:
        @hookimpl
        def rlblocks_should_stop(self, state):
            asked.append((state["env_step"], state["stop_reward"]))
            return None if state["env_step"] >= 600 else False

    # any return solves a stop reward of -1: the built-in rule would stop at the first test
    trainer = build(KeepGoingUntil600(), stop_reward=-1.0, max_env_steps=100_000)
    result = trainer.run()
    assert result.solved and result.env_steps == 600
    assert [step for step, _ in asked] == [200, 400, 600]
    assert all(reward == -1.0 for _, reward in asked)


def test_exception_hook_hears_the_phase_that_failed() -> None:
    heard: list[str] = []

    class Listener:
        @hookimpl
        def rlblocks_exception(self, exc, where):
            heard.append(where)

    trainer = build(Listener(), max_env_steps=1_000)

    def broken_update(*args, **kwargs):
        raise RuntimeError("boom")

    trainer.policy.update = broken_update
    with pytest.raises(RuntimeError, match="boom"):
        trainer.run()
    assert heard == ["update"]


def test_state_dict_round_trip_restores_counters() -> None:
    trainer = build(Recorder())
    trainer.run()
    state = trainer.state_dict()
    other = build(Recorder())
    other.load_state_dict(state)
    assert other.state.env_step == trainer.state.env_step
    assert other.state.gradient_step == trainer.state.gradient_step
    assert other.state.best_test_return == trainer.state.best_test_return


def test_invalid_max_env_steps_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_env_steps"):
        build(Recorder(), max_env_steps=0)


def test_update_needs_samples_from_the_buffer() -> None:
    trainer = build(Recorder(), max_env_steps=100)
    trainer.run()
    assert len(trainer.buffer) == trainer.state.env_step
    assert np.isfinite(trainer.buffer.rew[: len(trainer.buffer)]).all()


def test_buffer_with_set_env_step_hears_progress_before_each_collect() -> None:
    from rlblocks.replay import UniformSampler

    heard: list[int] = []

    class Annealed(UniformSampler):  # a sampler that follows training progress
        def set_env_step(self, env_step: int) -> None:
            heard.append(env_step)

    trainer = build(Recorder(), max_env_steps=200)
    sampler = Annealed()
    sampler.bind(trainer.buffer)
    trainer.buffer.sampler = sampler
    trainer.buffer = trainer.buffer  # abilities are found when the buffer is set, not per collect
    trainer.run()
    assert heard[0] == 64  # after the warm-up
    assert heard == sorted(heard) and heard[-1] == trainer.state.env_step - 8


@pytest.mark.parametrize("in_training", [True, False])
def test_in_training_tests_as_soon_as_training_returns_reach_the_stop_reward(in_training) -> None:
    # CartPole's random-ish early episodes return ~20: a stop reward of 5 is met by the first
    # finished training episodes, long before the scheduled test at 10k env steps
    rec = Recorder()
    trainer = build(rec, stop_reward=5.0, max_env_steps=20_000, test_in_training=in_training)
    trainer.test_interval = trainer.state.next_test_step = 10_000
    result = trainer.run()
    tests = [c[1]["env_step"] for c in rec.calls if c[0] == "test_end"]
    if in_training:
        assert result.solved and tests and tests[0] < 200, tests
        assert result.env_steps == tests[-1] < 10_000
    else:
        assert tests[0] == 10_000


def test_in_training_waits_a_quarter_interval_between_tests_that_fail() -> None:
    # training returns (~20) always reach 5; the greedy tests never reach 1e9: tests come at
    # most once per quarter of test_interval (plus the scheduled ones)
    rec = Recorder()
    trainer = build(rec, stop_reward=5.0, max_env_steps=1_200, test_in_training=True)
    trainer.test = _failing_test(trainer)
    trainer.run()
    tests = trainer.seen_tests
    unscheduled = [(a, b) for a, b in itertools.pairwise(tests) if b % 200 != 0]
    assert len(unscheduled) >= 3, tests
    assert all(b - a >= 200 / 4 for a, b in unscheduled), tests


def _failing_test(trainer):
    trainer.seen_tests = []
    real = trainer.test

    def test(screen=True):
        trainer.seen_tests.append(trainer.state.env_step)
        stats = real(screen)
        trainer.state.solved = False
        return stats

    return test


def test_screened_tests_stop_early_when_the_first_episodes_fall_short() -> None:
    class Screens(Recorder):
        @hookimpl
        def rlblocks_episodes_end(self, returns, lengths, env_step, namespace):
            self.calls.append(("episodes", {"namespace": namespace, "n": len(returns)}))

    class Asked(Screens):
        @hookimpl
        def rlblocks_should_stop(self, state):
            self.calls.append(("asked", dict(state)))

    # an unreachable stop reward: every scheduled test is a 2-episode screen, logged as
    # test_screen; only the test that ends the run plays all 4 episodes and sets the best
    # return. Screens are tests for the hooks: test_end (marked screened) and should_stop
    rec = Asked()
    trainer = build(rec, stop_reward=1e9, max_env_steps=600, test_screen_episodes=2,
                    test_in_training=False)
    result = trainer.run()
    screens = [c[1]["step"] for c in rec.calls if c == ("log", c[1])
               and c[1]["namespace"] == "test_screen"]
    assert screens == [200, 400]
    ends = [c[1] for c in rec.calls if c[0] == "test_end"]
    assert [e["env_step"] for e in ends] == [200, 400, 600]
    assert [e["stats"]["screened"] for e in ends] == [True, True, False]
    assert [e["stats"]["n_episode"] for e in ends] == [2, 2, 4]
    asked = [(a["env_step"], a["screened"], a["screened_tests"]) for n, a in rec.calls
             if n == "asked"]
    assert asked[:2] == [(200, True, 1), (400, True, 2)]
    assert result.screened_tests == 2
    assert [c[1]["n"] for c in rec.calls if c[0] == "episodes" and
            c[1]["namespace"] == "test"] == [4]
    assert trainer.state.tests == 1 and math.isfinite(result.best_test_return)

    # a reachable one: the screen passes and the test goes on to all 4 episodes
    rec = Screens()
    result = build(rec, stop_reward=5.0, max_env_steps=600, test_screen_episodes=2,
                   test_in_training=False).run()
    assert result.solved
    assert [c[1]["n"] for c in rec.calls if c[0] == "episodes" and
            c[1]["namespace"] == "test"] == [4]
    assert not [c for c in rec.calls if c[0] == "log" and c[1]["namespace"] == "test_screen"]


def _poison_targets(policy, *, after: int = 0, every: int = 0) -> None:
    """Make the TD targets NaN from the update after ``after`` on, or every ``every``-th."""
    process = policy.process_fn
    calls = itertools.count(1)

    def poisoned(batch, buffer, indices):
        batch = process(batch, buffer, indices)
        n = next(calls)
        if (after and n > after) or (every and n % every == 0):
            batch.returns = batch.returns * float("nan")
        return batch

    policy.process_fn = poisoned


def test_a_nan_loss_stops_the_run_naming_the_step_and_the_last_good_checkpoint(tmp_path) -> None:
    written: list[int] = []

    def checkpoint(trainer) -> None:
        path = tmp_path / "checkpoints" / "latest.pt"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"weights")
        written.append(trainer.state.env_step)

    trainer = build(Recorder(), max_env_steps=2_000, checkpoint_fn=checkpoint,
                    checkpoint_interval=100)
    trainer.run_dir = tmp_path
    _poison_targets(trainer.policy, after=40)
    # 64 warm-up steps, then 8 env steps and 4 gradient steps per iteration: step 41 is in the
    # iteration that ends at env step 64 + 11 * 8
    with pytest.raises(NonFiniteError) as caught:
        trainer.run()
    assert str(caught.value).startswith(
        "the loss of optimizer 'q' is nan at gradient step 41 (env step 152); last good "
        f"checkpoint: {tmp_path / 'checkpoints' / 'latest.pt'}; lower the learning rate"
    )
    assert written == [104]  # nothing was written after the NaN step
    assert "\n" not in str(caught.value)


def test_skip_update_trains_on_with_finite_weights_and_logs_the_skips() -> None:
    skipped: list[int] = []

    class UpdateLog:
        @hookimpl
        def rlblocks_update_end(self, stats, env_step, gradient_step):
            skipped.append(stats["skipped_steps"])

    trainer = build(UpdateLog(), max_env_steps=600, on_nonfinite="skip_update")
    _poison_targets(trainer.policy, every=5)
    result = trainer.run()
    assert result.env_steps >= 600 and result.gradient_steps > 200
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())
    assert sum(skipped) == result.gradient_steps // 5


def test_unknown_on_nonfinite_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="on_nonfinite"):
        build(Recorder(), on_nonfinite="ignore")


def test_train_fn_and_test_fn_run_before_each_collect_and_test_with_epoch_and_env_step() -> None:
    log: list[tuple] = []
    training_at_test_fn: list[bool] = []

    def test_fn(epoch, step):
        log.append(("test_fn", epoch, step))
        training_at_test_fn.append(trainer.policy.training)

    trainer = build(Recorder(), max_env_steps=400, test_fn=test_fn,
                    train_fn=lambda epoch, step: log.append(("train_fn", epoch, step)))  # fmt: skip
    policy, train, test = trainer.policy, trainer.train_collector, trainer.test_collector
    set_env_step, train_collect, test_collect = policy.set_env_step, train.collect, test.collect

    def told(step):
        log.append(("set_env_step", step))
        set_env_step(step)

    def collected(**kw):
        log.append(("train", trainer.state.env_step))
        return train_collect(**kw)

    def tested(**kw):
        log.append(("test", trainer.state.env_step))
        return test_collect(**kw)

    policy.set_env_step, train.collect, test.collect = told, collected, tested
    trainer.run()
    # the warm-up collect (random actions) gets no train_fn; every later collect gets one,
    # after the policy heard the env step (so train_fn overrides the schedules) and right
    # before the collect
    assert log[0] == ("train", 0)
    collects = [i for i, e in enumerate(log) if e[0] == "train"][1:]
    assert collects
    for i in collects:
        step = log[i][1]
        assert log[i - 2 : i] == [("set_env_step", step), ("train_fn", step // 200 + 1, step)]
    # each test right after its test_fn; the test at k * test_interval gets epoch k
    tests = [i for i, e in enumerate(log) if e[0] == "test"]
    assert [log[i][1] for i in tests] == [200, 400]
    assert [log[i - 1] for i in tests] == [("test_fn", 1, 200), ("test_fn", 2, 400)]
    assert training_at_test_fn == [False, False]  # already in eval mode, as in Tianshou
    assert sum(e[0] == "train_fn" for e in log) == len(collects)


def test_unscheduled_tests_get_the_epoch_in_progress_and_callables_may_be_set_later() -> None:
    seen: list[tuple[int, int]] = []
    trainer = build(Recorder(), max_env_steps=300)  # the run ends on a test at 304, mid-block
    trainer.test_fn = lambda epoch, step: seen.append((epoch, step))
    trainer.run()
    assert seen == [(1, 200), (2, trainer.state.env_step)]
    assert trainer.epoch_of(0) == trainer.epoch_of(199) == 1 and trainer.epoch_of(200) == 2


def test_result_splits_wall_time_into_collect_update_and_test_phases() -> None:
    import time

    trainer = build(Recorder(), max_env_steps=400)
    update, test_collect = trainer.policy.update, trainer.test_collector.collect

    def slow_update(*args, **kwargs):
        time.sleep(0.002)
        return update(*args, **kwargs)

    def slow_test(**kw):
        time.sleep(0.05)
        return test_collect(**kw)

    trainer.policy.update, trainer.test_collector.collect = slow_update, slow_test
    result = trainer.run()
    assert result.update_seconds >= 0.002 * result.gradient_steps
    assert result.test_seconds >= 0.05 * trainer.state.tests
    assert 0 < result.collect_seconds < result.update_seconds
    phases = result.collect_seconds + result.update_seconds + result.test_seconds
    assert phases <= result.wall_seconds + 1e-6
    assert result.other_seconds == pytest.approx(result.wall_seconds - phases, abs=1e-9)
    assert result.collect_speed == pytest.approx(result.env_steps / result.collect_seconds)
    assert result.update_speed == pytest.approx(result.gradient_steps / result.update_seconds)
    assert result.test_speed == pytest.approx(trainer.state.test_steps / result.test_seconds)
    assert trainer.state.test_steps > 0
    # result.json holds them (to_dict), and they survive a checkpoint of the counters
    saved = result.to_dict()
    for key in ("collect_seconds", "update_seconds", "test_seconds", "collect_speed",
                "update_speed", "test_speed"):  # fmt: skip
        assert saved[key] == getattr(result, key) > 0
    # a single-agent run counts one kind of step: no agent_steps beside its env steps
    assert result.agent_steps is None and "agent_steps" not in saved
    assert saved["env_steps"] == trainer.state.env_step == 400
    other = build(Recorder())
    other.load_state_dict(trainer.state_dict())
    assert other.result().update_seconds == result.update_seconds
    assert other.result().test_speed == result.test_speed


def test_test_at_start_tests_the_untrained_policy_before_the_first_env_step() -> None:
    rec = Recorder()
    epochs: list[tuple[int, int]] = []
    trainer = build(rec, test_at_start=True, test_fn=lambda e, s: epochs.append((e, s)))
    trainer.run()
    tests = [c[1]["env_step"] for c in rec.calls if c[0] == "test_end"]
    assert tests == [0, 200, 400]  # the point at 0, then the schedule as without it
    assert rec.names()[0] == "log" and rec.calls[0][1] == {"namespace": "test", "step": 0}
    assert rec.names().index("test_end") < rec.names().index("rollout_end")  # before the warm-up
    assert epochs[0] == (0, 0)  # Tianshou's epoch 0
    assert trainer.state.tests == 3


def test_test_at_start_does_not_test_the_same_policy_again_at_the_warm_ups_end() -> None:
    rec = Recorder()
    build(rec, warmup_steps=200, test_at_start=True).run()
    # the warm-up reaches the test step at 200 with the policy tested at 0: no second test there
    assert [c[1]["env_step"] for c in rec.calls if c[0] == "test_end"] == [0, 400]


def test_test_at_start_stops_before_any_step_when_the_untrained_policy_meets_the_rule() -> None:
    rec = Recorder()
    saved: list[int] = []
    trainer = build(rec, stop_reward=1.0, test_at_start=True)  # every CartPole episode scores >= 1
    trainer.checkpoint_fn = lambda t: saved.append(t.state.env_step)
    result = trainer.run()
    assert result.solved and result.stop_reason.startswith("mean test return")
    assert result.env_steps == 0 and result.gradient_steps == 0  # no warm-up, no collect
    assert "rollout_end" not in rec.names() and rec.names().count("test_end") == 1
    assert saved == [0]  # the finished run is checkpointed like any other


class _KeepGoing:
    @hookimpl
    def rlblocks_should_stop(self, state):
        return False


def test_test_at_start_respects_a_plugin_that_keeps_the_run_going() -> None:
    rec = Recorder()
    trainer = build(rec, stop_reward=1.0, test_at_start=True)
    trainer.hook = make_plugin_manager([rec, _KeepGoing()]).hook
    result = trainer.run()
    assert result.env_steps >= 400 and result.stop_reason.startswith("reached max_env_steps")


def test_a_resumed_run_does_not_test_at_the_start_again() -> None:
    trainer = build(Recorder(), max_env_steps=200, test_at_start=True)
    trainer.run()
    rec = Recorder()
    other = build(rec, max_env_steps=400, test_at_start=True)
    other.load_state_dict(trainer.state_dict())
    other.run()
    assert [c[1]["env_step"] for c in rec.calls if c[0] == "test_end"] == [400]
