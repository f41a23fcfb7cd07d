"""The hooks a run calls: the contract between the trainer and loggers, callbacks and checkpoints.

Implement a hook by writing a function or method with the hook's name and any subset of its
arguments, marked with :data:`hookimpl` (unmarked ``rlblocks_*`` methods count too), and hand the
object to a run, which registers it on the run's plugin manager
(:func:`rlblocks.plugins.make_plugin_manager`).
Arguments are always passed by keyword; an implementation may omit the ones it does not need.

Hooks fire per rollout, update, test or run, so an implementation may do real work (write a file,
sync to a server); the one exception is :func:`rlblocks_env_step`, which fires per env step and
only for a run where something implements it. Unless a hook says otherwise, every
implementation is called and return values are ignored. Implementations run last-registered
first; order them with ``@hookimpl(tryfirst=True)`` / ``@hookimpl(trylast=True)``.

Every ``env_step`` argument is the run's step counter, the x axis of its logs and budget: env
steps, except in a multi-agent run with ``trainer.count_steps_by=agent_steps``, where it counts
agent steps (one per agent that acted), as RLlib's ``count_steps_by`` does; such a run's
result and ``tests.csv`` carry both counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import numpy as np

hookspec = pluggy.HookspecMarker("rlblocks")
"""Marks a hook specification (only this module defines them)."""

hookimpl = pluggy.HookimplMarker("rlblocks")
"""Marks a hook implementation: ``@hookimpl`` or ``@hookimpl(tryfirst=True)``."""


# -- run lifecycle ------------------------------------------------------------------------------


@hookspec(historic=True)
def rlblocks_configure(config: dict, run_dir: Path | None) -> None:
    """Set up once the run's plugin manager exists, before anything is built.

    Historic: a plugin registered later (a logger built from the config) is called as soon as it
    is registered, with the same arguments.

    :param config: the resolved run config as plain data (sections -> fields).
    :param run_dir: the run directory, or None when the run writes no files.
    """


@hookspec
def rlblocks_run_start(config: dict, run_dir: Path | None, resumed: bool) -> None:
    """Called once when training starts, after the policy, buffer and envs are built.

    :param config: the resolved run config as plain data.
    :param run_dir: the run directory, or None.
    :param resumed: True when the run continues from a checkpoint (counters are not zero).
    """


@hookspec
def rlblocks_run_end(result: Mapping[str, Any], run_dir: Path | None) -> None:
    """Called once when training ends normally (solved, stopped or out of budget).

    Not called when the run raises; see :func:`rlblocks_exception`. Flush and close files here.

    :param result: what ``result.json`` records: ``best_test_return``, ``solved``,
        ``env_steps``, ``gradient_steps``, ``wall_seconds``.
    :param run_dir: the run directory, or None.
    """


@hookspec
def rlblocks_exception(exc: BaseException, where: str) -> None:
    """Called when the run raises (including ``KeyboardInterrupt``), before the error propagates.

    Use it to flush logs or mark a run as failed; the exception is re-raised afterwards, whatever
    implementations return. An implementation that raises itself hides nothing: its error is
    chained to the original.

    :param exc: the exception.
    :param where: the phase that raised, such as ``"setup"``, ``"collect"``, ``"update"``,
        ``"test"`` or ``"checkpoint"``.
    """


# -- training progress --------------------------------------------------------------------------


@hookspec
def rlblocks_rollout_end(stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
    """Called after each training collect (one rollout of the collector).

    :param stats: the collect's statistics (steps, episodes, throughput); read-only.
    :param env_step: total env steps collected so far, this collect included.
    :param trainer: the live trainer (optional to accept): ``trainer.policy`` (its networks and
        ``optim_steps``, whose ``lr`` can be changed), ``trainer.buffer``, ``trainer.state``
        (counters), ``trainer.run_dir`` (None without one), ``trainer.test()`` to run a test of
        your own and ``trainer.request_stop(reason)`` to end the run after this iteration.
    """


@hookspec
def rlblocks_env_step(
    env_step: int,
    env_id: int,
    obs: Any,
    act: Any,
    rew: Any,
    terminated: bool,
    truncated: bool,
    obs_next: Any,
    info: Mapping[str, Any],
    trainer: Any,
) -> None:
    """Called once per env step of every training env (SB3's ``_on_step``, per env), during the
    collect, before the step reaches the replay buffer; test envs do not call it.

    Only for the users who need it: a run where no plugin implements it never calls it (the
    collector is handed no callback), while one implementation makes every env step pay for a
    call (about 10 µs on a loaded 2-core machine, on top of the implementation's own work; the
    docs' hooks page has the measurement). Per-collect work belongs in
    :func:`rlblocks_rollout_end`. Not available with an asynchronous collector
    (``trainer.async_collect``), which refuses it.

    :param env_step: the run's env step count, this step included (1 for the first step).
    :param env_id: the index of the env among the training envs.
    :param obs: the observation the env was in (that env's row).
    :param act: the action the env received (after ``map_action``: the env's own units).
    :param rew: the reward of the step (a number; an array for per-agent rewards).
    :param terminated: whether the episode ended in a terminal state.
    :param truncated: whether it was cut off (time limit).
    :param obs_next: the step's next observation (the final one when the episode ended, not the
        reset observation that follows).
    :param info: the env's info dict of the step (read-only).
    :param trainer: the live trainer (optional to accept; see :func:`rlblocks_rollout_end`).
    """


@hookspec
def rlblocks_episodes_end(
    returns: np.ndarray, lengths: np.ndarray, env_step: int, namespace: str
) -> None:
    """Called after a collect during which episodes finished; not called when none did.

    :param returns: undiscounted returns of the finished episodes, shape ``[E]``, float.
    :param lengths: their lengths in env steps, shape ``[E]``, int.
    :param env_step: total training env steps so far.
    :param namespace: ``"train"`` or ``"test"``.
    """


@hookspec
def rlblocks_update_end(
    stats: Mapping[str, float], env_step: int, gradient_step: int, trainer: Any
) -> None:
    """Called after the policy updates of each log interval (``trainer.log_interval`` env steps,
    1,000 by default; gradient steps for the offline trainer), with their statistics averaged,
    and once more at the end of the run.

    :param stats: the updates' losses and diagnostics, averaged, plus ``gradient_step`` and the
        current ``lr/<optimizer>`` of every optimizer (and an algorithm's own schedules).
    :param env_step: total env steps so far (0 for the offline trainer, which takes none).
    :param gradient_step: total gradient steps so far.
    :param trainer: the live trainer (optional to accept): ``trainer.policy`` (its networks and
        ``optim_steps``, whose ``lr`` can be changed), ``trainer.buffer``, ``trainer.state``
        (counters), ``trainer.run_dir`` (None without one), ``trainer.test()`` to run a test of
        your own and ``trainer.request_stop(reason)`` to end the run after this iteration.
    """


@hookspec
def rlblocks_test_end(stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
    """Called after each test collect (the periodic evaluation with the policy in test mode),
    screened tests included.

    A screened test (``trainer.test_screen_episodes``) is one that stopped after its first few
    episodes because their mean return fell clearly short of ``stop_reward``; ``stats`` then
    holds those episodes' statistics, ``stats["screened"]`` is True, and the best test return
    (``stats["best_return"]``) is left as it was.

    :param stats: the test collect's statistics, including ``return_mean``, ``return_std``,
        ``n_episode``, ``best_return`` and ``screened`` (True for a screened test).
    :param env_step: total training env steps at the time of the test (0 offline; the test's
        gradient step is ``trainer.state.gradient_step``).
    :param trainer: the live trainer (optional to accept): ``trainer.policy`` (its networks and
        ``optim_steps``, whose ``lr`` can be changed), ``trainer.buffer``, ``trainer.state``
        (counters), ``trainer.run_dir`` (None without one), ``trainer.test()`` to run a test of
        your own and ``trainer.request_stop(reason)`` to end the run after this iteration.
    """


@hookspec
def rlblocks_log(namespace: str, scalars: Mapping[str, float], step: int) -> None:
    """Record scalars; the one hook a logger needs.

    The trainer calls it with the scalars of each rollout, update and test, so a logger need
    not implement the progress hooks.

    :param namespace: the group of the scalars, such as ``"train"``, ``"update"`` or ``"test"``; a
        logger may prefix keys with it (``"test/return_mean"``).
    :param scalars: metric name -> value.
    :param step: the x axis, in env steps (in gradient steps for the offline trainer, whose
        env step stays 0: ``trainer.progress_counter`` says which).
    """


@hookspec(firstresult=True)
def rlblocks_should_stop(state: Mapping[str, Any]) -> bool | None:
    """Asked after each test, screened tests included (or each iteration when the run has no
    tests), whether to stop early.

    First result: the first implementation that returns a value other than None decides, and the
    rest are not called. Return True to stop, False to keep going (overriding the built-in reward
    threshold rule, which runs last), None to have no opinion.

    :param state: the trainer's progress, read-only: counters (``env_step``,
        ``gradient_step``, ``tests`` (full), ``screened_tests``), test returns, the
        ``stop_reward`` in effect and ``screened`` (whether the latest test was screened).
    """


# -- checkpoints --------------------------------------------------------------------------------


@hookspec
def rlblocks_checkpoint_save(checkpoint: dict, trainer: Any) -> None:
    """Add to a checkpoint before it is written.

    Store your state under one key of your own (``checkpoint["my_plugin"] = {...}``) and never
    overwrite others'. Values must be loadable with ``torch.load(weights_only=True)``: tensors,
    arrays, numbers, strings and containers of them. Return nothing.

    :param checkpoint: the checkpoint being assembled; mutate it in place.
    :param trainer: the live trainer (optional to accept): ``trainer.policy`` (its networks and
        ``optim_steps``, whose ``lr`` can be changed), ``trainer.buffer``, ``trainer.state``
        (counters), ``trainer.run_dir`` (None without one), ``trainer.test()`` to run a test of
        your own and ``trainer.request_stop(reason)`` to end the run after this iteration.
    """


@hookspec
def rlblocks_checkpoint_load(checkpoint: Mapping[str, Any], trainer: Any) -> None:
    """Restore from a checkpoint when a run resumes, before :func:`rlblocks_run_start`.

    Read the key you wrote in :func:`rlblocks_checkpoint_save`; it may be missing if the
    checkpoint was written without your plugin.

    :param checkpoint: the loaded checkpoint; read-only.
    :param trainer: the restored trainer (optional to accept), as in
        :func:`rlblocks_checkpoint_save`: its policy, buffer and counters are back; the envs
        (``trainer.train_collector.envs``) are built but their running episodes are restored
        only after this hook, so state sent to them here is in place before those continue.
    """
