"""pluggy hooks: the spec set, firing order, firstresult, historic configure, checked plugins."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from rlblocks.contracts import ConfigError
from rlblocks.plugins import hook_names, hookimpl, hookspecs, make_plugin_manager

EXPECTED_HOOKS = {
    "rlblocks_configure",
    "rlblocks_run_start",
    "rlblocks_rollout_end",
    "rlblocks_env_step",
    "rlblocks_episodes_end",
    "rlblocks_update_end",
    "rlblocks_test_end",
    "rlblocks_log",
    "rlblocks_should_stop",
    "rlblocks_checkpoint_save",
    "rlblocks_checkpoint_load",
    "rlblocks_run_end",
    "rlblocks_exception",
}


class Recorder:
    """Appends ``(label, hook, kwargs)`` to a shared list for every progress hook it sees."""

    def __init__(self, label: str, calls: list) -> None:
        self.label = label
        self.calls = calls

    @hookimpl
    def rlblocks_update_end(self, stats, env_step, gradient_step):
        self.calls.append((self.label, "update_end", dict(stats), env_step, gradient_step))

    @hookimpl
    def rlblocks_log(self, namespace, scalars, step):
        self.calls.append((self.label, "log", namespace, dict(scalars), step))


def test_the_hook_set_is_exactly_the_documented_one():
    assert set(hook_names()) == EXPECTED_HOOKS
    for name in EXPECTED_HOOKS:
        assert inspect.getdoc(getattr(hookspecs, name)), f"{name} has no docstring"


def test_hookimpl_is_reexported_from_rlblocks_plugins():
    assert hookimpl is hookspecs.hookimpl
    assert hookimpl.project_name == "rlblocks"


def test_every_implementer_is_called_last_registered_first():
    calls: list = []
    manager = make_plugin_manager([Recorder("first", calls), Recorder("second", calls)])
    manager.hook.rlblocks_update_end(
        stats={"loss": 0.5}, env_step=100, gradient_step=10, trainer=None
    )
    assert calls == [
        ("second", "update_end", {"loss": 0.5}, 100, 10),
        ("first", "update_end", {"loss": 0.5}, 100, 10),
    ]


def test_tryfirst_runs_before_later_registered_plugins():
    calls: list = []

    class Early:
        @hookimpl(tryfirst=True)
        def rlblocks_log(self, namespace, scalars, step):
            calls.append(("early", "log", namespace, dict(scalars), step))

    manager = make_plugin_manager([Early(), Recorder("late", calls)])
    manager.hook.rlblocks_log(namespace="train", scalars={"rew": 1.0}, step=7)
    assert [c[0] for c in calls] == ["early", "late"]


def test_implementations_may_take_a_subset_of_the_arguments():
    seen = []

    class OnlyReturns:
        @hookimpl
        def rlblocks_episodes_end(self, returns):
            seen.append(returns.tolist())

    manager = make_plugin_manager([OnlyReturns()])
    manager.hook.rlblocks_episodes_end(
        returns=np.array([1.0, 2.0]), lengths=np.array([3, 4]), env_step=10, namespace="test"
    )
    assert seen == [[1.0, 2.0]]


def test_unmarked_rlblocks_methods_are_hook_implementations():
    seen = []

    class Plain:
        def rlblocks_run_end(self, result, run_dir):
            seen.append((dict(result), run_dir))

    manager = make_plugin_manager([Plain()])
    manager.hook.rlblocks_run_end(result={"solved": True}, run_dir=None)
    assert seen == [({"solved": True}, None)]


def test_should_stop_takes_the_first_non_none_answer():
    asked = []

    class NoOpinion:
        @hookimpl
        def rlblocks_should_stop(self, state):
            asked.append("no-opinion")
            return None

    class StopAt1000:
        @hookimpl
        def rlblocks_should_stop(self, state):
            asked.append("stop-at-1000")
            return state["env_step"] >= 1000

    class NeverAsked:
        @hookimpl(trylast=True)
        def rlblocks_should_stop(self, state):
            asked.append("never")
            return False

    manager = make_plugin_manager([NeverAsked(), StopAt1000(), NoOpinion()])
    assert manager.hook.rlblocks_should_stop(state={"env_step": 1000}) is True
    assert asked == ["no-opinion", "stop-at-1000"]
    assert make_plugin_manager([NoOpinion()]).hook.rlblocks_should_stop(state={}) is None


def test_checkpoint_save_lets_each_plugin_add_its_own_key():
    class Counter:
        @hookimpl
        def rlblocks_checkpoint_save(self, checkpoint):
            checkpoint["counter"] = {"count": 3}

    checkpoint = {"policy": {}}
    make_plugin_manager([Counter()]).hook.rlblocks_checkpoint_save(
        checkpoint=checkpoint, trainer=None
    )
    assert checkpoint == {"policy": {}, "counter": {"count": 3}}


def test_historic_configure_reaches_a_plugin_registered_later(tmp_path: Path):
    seen = []

    class Logger:
        @hookimpl
        def rlblocks_configure(self, config, run_dir):
            seen.append((config, run_dir))

    manager = make_plugin_manager()
    manager.hook.rlblocks_configure.call_historic(
        kwargs={"config": {"algo": {"lr": 1e-3}}, "run_dir": tmp_path}
    )
    assert seen == []
    manager.register(Logger())
    assert seen == [({"algo": {"lr": 1e-3}}, tmp_path)]


def test_misspelled_hook_is_a_config_error_with_a_suggestion():
    class Typo:
        @hookimpl
        def rlblocks_lgo(self, namespace, scalars, step):
            pass

    with pytest.raises(ConfigError) as info:
        make_plugin_manager([Typo()])
    message = str(info.value)
    assert "'rlblocks_lgo', which is not an rlblocks hook" in message
    assert "Did you mean: rlblocks_log?" in message
    assert "rlblocks_should_stop" in message  # the known hooks are listed


def test_misspelled_unmarked_method_is_caught_too():
    class Typo:
        def rlblocks_update_ends(self, stats):
            pass

    with pytest.raises(ConfigError, match="Did you mean: rlblocks_update_end"):
        make_plugin_manager([Typo()])


def test_late_registration_is_checked_and_leaves_nothing_registered():
    class Typo:
        def rlblocks_run_stat(self, config):
            pass

    manager = make_plugin_manager()
    plugin = Typo()
    with pytest.raises(ConfigError, match="rlblocks_run_start"):
        manager.register(plugin)
    assert not manager.is_registered(plugin)


def test_argument_the_hook_does_not_pass_is_a_config_error():
    class WrongArgs:
        @hookimpl
        def rlblocks_log(self, namespace, values, step):
            pass

    with pytest.raises(ConfigError) as info:
        make_plugin_manager([WrongArgs()])
    message = str(info.value)
    assert "rlblocks_log" in message and "'values'" in message
    assert "The hook is rlblocks_log(namespace: 'str', scalars:" in message


def test_optional_hooks_for_other_plugins_are_allowed():
    class Extension:
        @hookimpl(optionalhook=True)
        def rlblocks_something_else(self):
            pass

    make_plugin_manager([Extension()])
