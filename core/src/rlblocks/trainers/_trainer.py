"""Trainer loops: the schedule around a collector, a buffer and a policy.

``OnPolicyTrainer``: collect ``step_per_collect`` env steps (or ``episode_per_collect`` whole
episodes) over all train envs, learn over all of it for ``repeat_per_collect`` passes in
minibatches of ``batch_size``, then clear the buffer; partial episodes continue across collects.

``OffPolicyTrainer``: collect ``step_per_collect`` env steps, then ``update_per_step`` gradient
steps per collected env step on samples of the replay buffer (after ``warmup_steps`` of random
actions); test every ``test_interval`` env steps, the first due test at the end of the warm-up
(before any gradient step) when the warm-up reaches it; stop when the mean test return reaches
``stop_reward``, a plugin's ``should_stop`` says so, or ``max_env_steps`` is spent. With
``test_in_training`` a test also runs as soon as the training episodes' recent mean return reaches
``stop_reward``, so a solved run stops without waiting for the next scheduled test; with
``test_screen_episodes`` a test whose first few episodes fall short of ``stop_reward`` ends there.
With ``test_at_start`` (any trainer) the untrained policy is tested before the first env step,
the learning curve's point at step 0 (Tianshou's epoch-0 test; ``test_fn`` gets epoch 0); a
policy that already meets the stop rule there ends the run before any step.

``OfflineTrainer``: gradient steps on samples of a fixed, pre-filled buffer (a dataset), with no
training collector and no env step; its schedules (``test_interval``, ``log_interval``,
``checkpoint_interval``) and its budget ``max_gradient_steps`` count gradient steps.

``BaseTrainer`` holds what every loop shares (testing, logging, checkpoints, stop rule, resumable
counters), so each loop only writes ``_iterate``; the counter the schedules follow is its
``progress_counter`` (env steps online, gradient steps offline).

Hooks fire once per collect, update round, test and run; the one exception,
``rlblocks_env_step``, fires once per env step of every training env, and only when a plugin
implements it (a run without one pays nothing for it). The plain
callables ``train_fn(epoch, env_step)`` and ``test_fn(epoch, env_step)`` (Tianshou's) run before
each training collect and each test; ``epoch`` is the 1-based index of the ``test_interval``
block of env steps (see :meth:`BaseTrainer.epoch_of`). The collect, update and test phases are
timed as wholes (``TrainResult.collect_seconds`` and so on), never per step.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np
import pluggy
from attrs import define

from rlblocks.collect import Collector, CollectStats
from rlblocks.contracts import (
    Buffer,
    BufferAbilities,
    ConfigError,
    FiniteWatchingPolicy,
    InFlightCollector,
    NonFiniteError,
)
from rlblocks.trainers._stats import StatsAccumulator

#: test_in_training looks at the mean return of this many latest training episodes.
TRAIN_RETURN_WINDOW = 10
#: A screened test goes on unless the screen's mean return is this many standard errors below
#: the stop reward.
SCREEN_Z = 2.0


@define
class TrainerState:
    """Counters that make a run resumable (all plain numbers, checkpoint-safe)."""

    env_step: int = 0
    gradient_step: int = 0
    train_episodes: int = 0
    #: full tests (they set the last and best test returns)
    tests: int = 0
    #: screened tests: tests that ended after ``test_screen_episodes`` episodes because those
    #: fell clearly short of ``stop_reward`` (they count as tests for the hooks, not for the
    #: best test return); ``tests + screened_tests`` is the number of rows of ``tests.csv``
    screened_tests: int = 0
    last_test_step: int = -1
    best_test_return: float = -math.inf
    last_test_return: float = math.nan
    next_test_step: int = 0
    next_checkpoint_step: int = 0
    next_log_step: int = 0
    update_credit: float = 0.0
    wall_seconds: float = 0.0
    #: wall time of the training collects (warm-up included), the updates and the tests
    collect_seconds: float = 0.0
    update_seconds: float = 0.0
    test_seconds: float = 0.0
    #: env steps taken by test collects (for the test speed)
    test_steps: int = 0
    solved: bool = False
    warmed_up: bool = False
    stop_reason: str = ""
    #: env steps and agent transitions of the training collects, counted apart from
    #: ``env_step`` (the progress, in what the collector counts) by collectors that report
    #: both (multi-agent ones, :attr:`CollectStats.env_steps`); None for single-agent runs,
    #: whose env steps are ``env_step``
    env_steps_taken: int | None = None
    agent_steps: int | None = None


@define
class TrainResult:
    """The outcome of a run; ``result.json`` in the run directory holds the same fields."""

    best_test_return: float
    last_test_return: float
    solved: bool
    env_steps: int
    gradient_steps: int
    wall_seconds: float
    train_episodes: int
    stop_reward: float | None
    stop_reason: str
    #: agent transitions (one per agent that acted) of a multi-agent run; None for
    #: single-agent runs (left out of ``result.json``), where one env step is one agent step.
    #: ``env_steps`` always counts env steps, whatever ``trainer.count_steps_by`` counts.
    agent_steps: int | None = None
    #: seconds spent collecting for training (warm-up included), updating and testing
    #: (``test_fn`` included); the rest of ``wall_seconds`` (logging, checkpoints, hooks,
    #: ``train_fn``) is :attr:`other_seconds`
    collect_seconds: float = 0.0
    update_seconds: float = 0.0
    test_seconds: float = 0.0
    #: env steps per second of the training collects, gradient steps per second of the
    #: updates, env steps per second of the tests (0.0 when the phase never ran)
    collect_speed: float = 0.0
    update_speed: float = 0.0
    test_speed: float = 0.0
    run_dir: str | None = None
    #: tests that ended on their screen (see :attr:`TrainerState.screened_tests`)
    screened_tests: int = 0
    #: the undiscounted return, the length and the env step at the end of the collect in which
    #: it ended, of every training episode that finished during this call (``train`` or
    #: ``resume``: a resumed run's earlier episodes are in its loggers' files), in the order they
    #: ended; not part of ``result.json``
    train_episode_returns: list[float] = attrs.field(factory=list, eq=False, repr=False)
    train_episode_lengths: list[int] = attrs.field(factory=list, eq=False, repr=False)
    train_episode_env_steps: list[int] = attrs.field(factory=list, eq=False, repr=False)
    #: the trained agent (``rlblocks.train`` fills it in; not part of ``result.json``)
    agent: Any = attrs.field(default=None, eq=False, repr=False)

    @property
    def other_seconds(self) -> float:
        """Wall time outside the three timed phases (Table 1's "Others" of the Tianshou paper)."""
        return max(
            0.0, self.wall_seconds - self.collect_seconds - self.update_seconds - self.test_seconds
        )

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, filter=lambda a, _v: a.name not in _NOT_IN_RESULT_FILE)
        if out["agent_steps"] is None:  # a single-agent run: its env steps are its agent steps
            del out["agent_steps"]
        for key in ("best_test_return", "last_test_return"):
            if not math.isfinite(out[key]):
                out[key] = None
        return out


#: TrainResult fields kept out of ``result.json`` (live objects and per-episode lists)
_NOT_IN_RESULT_FILE = frozenset(
    {"agent", "train_episode_returns", "train_episode_lengths", "train_episode_env_steps"}
)


def _per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _env_steps_of(stats: CollectStats) -> int:
    """The env steps of a collect (a multi-agent collector's ``n_step`` may count agents)."""
    return int(stats.n_step if stats.env_steps is None else stats.env_steps)


#: The batch modes of training collects (RLlib's names; see BaseTrainer._collect_training_steps).
BATCH_MODES = ("truncate_episodes", "complete_episodes")


class BaseTrainer:
    """Shared trainer machinery; subclasses implement :meth:`_iterate` (one collect-and-learn).

    The schedules (``test_interval``, ``log_interval``, ``checkpoint_interval``), the budget and
    the ``step`` of ``rlblocks_log`` count :attr:`progress_counter`: env steps for the online
    loops, gradient steps for :class:`OfflineTrainer` (which takes no env step)."""

    #: the :class:`TrainerState` counter that the schedules and the budget count
    progress_counter: ClassVar[str] = "env_step"
    #: the budget's argument, as errors and the stop reason name it
    budget_name: ClassVar[str] = "max_env_steps"

    def __init__(
        self,
        policy: Any,
        train_collector: Collector,
        test_collector: Collector | None,
        buffer: Buffer | None,
        *,
        max_env_steps: int,
        batch_size: int = 64,
        test_interval: int = 5_000,
        test_episodes: int = 100,
        stop_reward: float | None = None,
        test_in_training: bool = False,
        test_screen_episodes: int = 0,
        checkpoint_interval: int = 0,
        log_interval: int = 1_000,
        plugin_manager: pluggy.PluginManager | None = None,
        checkpoint_fn: Callable[[BaseTrainer], None] | None = None,
        best_fn: Callable[[BaseTrainer], None] | None = None,
        on_nonfinite: str = "raise",
        batch_mode: str = "truncate_episodes",
        rollout_fragment_length: int | None = None,
        train_fn: Callable[[int, int], None] | None = None,
        test_fn: Callable[[int, int], None] | None = None,
        test_at_start: bool = False,
    ) -> None:
        if batch_mode not in BATCH_MODES:
            raise ConfigError(
                f"trainer.batch_mode={batch_mode!r}: use one of {', '.join(BATCH_MODES)}"
            )
        if rollout_fragment_length is not None and (
            batch_mode != "truncate_episodes" or rollout_fragment_length < 1
        ):
            raise ConfigError(
                "trainer.rollout_fragment_length is the exact number of steps per env of a "
                "truncate_episodes collect (an int >= 1); complete_episodes collects whole "
                "episodes of at least step_per_collect steps"
            )
        self.batch_mode = batch_mode
        self.rollout_fragment_length = rollout_fragment_length
        if max_env_steps <= 0:
            raise ValueError(f"{self.budget_name} must be positive, got {max_env_steps}")
        if on_nonfinite not in {"raise", "skip_update"}:
            raise ConfigError(
                f"trainer.on_nonfinite={on_nonfinite!r}; use 'raise' or 'skip_update'"
            )
        self.policy = policy
        self.train_collector = train_collector
        #: the collector may keep env steps in flight between calls (drained before checkpoints)
        self._drains = isinstance(train_collector, InFlightCollector)
        self.test_collector = test_collector
        self.buffer = buffer  # also finds its optional abilities, once
        #: the most :attr:`progress` the run takes (``max_env_steps`` online)
        self.budget = max_env_steps
        if self.progress_counter == "env_step":  # an offline loop has no env-step budget
            self.max_env_steps = max_env_steps
        self.batch_size = batch_size
        self.test_interval = test_interval
        self.test_episodes = test_episodes
        self.stop_reward = stop_reward
        self.test_in_training = test_in_training
        #: test the untrained policy before the first env step (Tianshou's epoch-0 test)
        self.test_at_start = test_at_start
        self.test_screen_episodes = test_screen_episodes
        self._last_attempt = -1  # progress at the latest test or screen
        # returns of the latest training episodes, for test_in_training
        self._train_returns: deque[float] = deque(maxlen=TRAIN_RETURN_WINDOW)
        self._new_train_episodes = 0
        # every training episode finished in this process: (returns, lengths, env steps)
        self._episode_log: tuple[list[float], list[int], list[int]] = ([], [], [])
        #: the latest test ended on its screen
        self._last_screened = False
        # env_step - train_collector.total_steps: turns the collector's step count into the
        # run's (set before each training collect while a per-env-step hook is registered)
        self._step_base = 0
        self.checkpoint_interval = checkpoint_interval
        self.log_interval = log_interval
        if plugin_manager is None:
            from rlblocks.plugins import make_plugin_manager

            plugin_manager = make_plugin_manager()
        self.pm = plugin_manager
        self.hook = plugin_manager.hook
        self.checkpoint_fn = checkpoint_fn
        #: called right after a test that beat every earlier one (writes best.pt in a run)
        self.best_fn = best_fn
        #: ``train_fn(epoch, env_step)``: before each training collect after the warm-up, once
        #: the policy has been told the env step (so what it sets is what the collect uses)
        self.train_fn = train_fn
        #: ``test_fn(epoch, env_step)``: before each test, the policy already in eval mode
        self.test_fn = test_fn
        #: the run directory (set by the experiment; None for a trainer without one)
        self.run_dir: Any = None
        self._stop_requested = ""
        self.state = TrainerState(
            next_test_step=test_interval,
            next_checkpoint_step=checkpoint_interval,
            next_log_step=log_interval,
        )
        self._update_stats = StatsAccumulator()
        #: "raise" or "skip_update": what a NaN or infinite loss or gradient does
        self.on_nonfinite = on_nonfinite
        # losses, gradients and parameters are checked once per iteration (one host sync)
        self._finite = (
            policy.watch_finite(skip=on_nonfinite == "skip_update")
            if isinstance(policy, FiniteWatchingPolicy)
            else None
        )
        #: the phase the loop is in, reported to rlblocks_exception
        self._phase = "setup"
        #: while a scheduled test runs: the epoch it closes (test_fn's first argument)
        self._closing_epoch: int | None = None
        #: a plugin's rlblocks_should_stop said False at its last answer
        self._plugins_keep_going = False

    @property
    def buffer(self) -> Buffer | None:
        """The replay buffer (replaced on resume by the one loaded from the run directory)."""
        return self._buffer

    @buffer.setter
    def buffer(self, buffer: Buffer | None) -> None:
        self._buffer = buffer
        self.buffer_abilities = BufferAbilities.of(buffer)

    @property
    def progress(self) -> int:
        """How far the run has come, in :attr:`progress_counter` units (env steps online)."""
        return int(getattr(self.state, self.progress_counter))

    # -- resumable state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The counters (:class:`TrainerState`) and, under ``"loop"``, what the stop and
        test-in-training rules remember between iterations."""
        out = attrs.asdict(self.state)
        out["loop"] = {
            "train_returns": list(self._train_returns),
            "new_train_episodes": int(self._new_train_episodes),
            "last_attempt": int(self._last_attempt),
            "plugins_keep_going": bool(self._plugins_keep_going),
        }
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        known = {a.name for a in attrs.fields(TrainerState)}
        self.state = TrainerState(**{k: v for k, v in state.items() if k in known})
        loop = state.get("loop")
        if isinstance(loop, Mapping):
            self._train_returns.clear()
            self._train_returns.extend(float(r) for r in loop.get("train_returns", ()))
            self._new_train_episodes = int(loop.get("new_train_episodes", 0))
            self._last_attempt = int(loop.get("last_attempt", -1))
            self._plugins_keep_going = bool(loop.get("plugins_keep_going", False))

    # -- pieces -------------------------------------------------------------------------------
    def test(self, screen: bool = True) -> CollectStats | None:
        """Run ``test_episodes`` greedy episodes on the test envs and record the result.

        With ``test_screen_episodes`` (and a stop reward) the first few episodes screen the
        policy: when their mean is clearly below the stop reward (by more than ``SCREEN_Z``
        standard errors) the test ends there, logged under the
        ``test_screen`` namespace (it does not count as a test: best and last test returns stay
        as they were); otherwise the rest of the episodes follow and the test counts as usual,
        over all ``test_episodes``. ``screen=False`` always runs the full test."""
        if self.test_collector is None or self.test_episodes <= 0:
            return None
        st = self.state
        k = self.test_screen_episodes
        screening = screen and self.stop_reward is not None and 0 < k < self.test_episodes
        started = time.perf_counter()
        self.policy.eval()
        try:
            if self.test_fn is not None:  # in eval mode, as in Tianshou
                closing = self._closing_epoch
                epoch = self.epoch_of(self.progress) if closing is None else closing
                self.test_fn(epoch, self.progress)
            if screening:
                first = self.test_collector.collect(n_episode=k)
                st.test_steps += _env_steps_of(first)
                if self._screened_out(first.returns):
                    self._last_attempt = self.progress
                    self._new_train_episodes = 0
                    st.screened_tests += 1
                    self._last_screened = True
                    self.hook.rlblocks_log(
                        namespace="test_screen", scalars=first.as_scalars(), step=self.progress
                    )
                    short = first.as_scalars()
                    short["best_return"] = st.best_test_return
                    self.hook.rlblocks_test_end(
                        stats={**short, "screened": True}, env_step=st.env_step, trainer=self
                    )
                    return first
                rest = self.test_collector.collect(n_episode=self.test_episodes - k)
                st.test_steps += _env_steps_of(rest)
                stats = CollectStats(
                    n_step=first.n_step + rest.n_step,
                    n_episode=first.n_episode + rest.n_episode,
                    returns=np.concatenate([first.returns, rest.returns]),
                    lengths=np.concatenate([first.lengths, rest.lengths]),
                    seconds=first.seconds + rest.seconds,
                    outcomes={
                        k: first.outcomes.get(k, 0) + rest.outcomes.get(k, 0)
                        for k in {**first.outcomes, **rest.outcomes}
                    },
                )
            else:
                stats = self.test_collector.collect(n_episode=self.test_episodes)
                st.test_steps += _env_steps_of(stats)
        finally:
            self.policy.train()
            st.test_seconds += time.perf_counter() - started
        st.tests += 1
        self._last_screened = False
        st.last_test_step = self._last_attempt = self.progress
        self._new_train_episodes = 0
        st.last_test_return = stats.mean_return
        improved = stats.mean_return > st.best_test_return
        if improved:
            st.best_test_return = stats.mean_return
            if self.best_fn is not None:
                self.best_fn(self)
        self.hook.rlblocks_episodes_end(
            returns=stats.returns, lengths=stats.lengths, env_step=st.env_step, namespace="test"
        )
        scalars = stats.as_scalars()
        scalars["best_return"] = st.best_test_return
        self.hook.rlblocks_log(namespace="test", scalars=scalars, step=self.progress)
        self.hook.rlblocks_test_end(
            stats={**scalars, "screened": False}, env_step=st.env_step, trainer=self
        )
        if self.stop_reward is not None and stats.mean_return >= self.stop_reward:
            st.solved = True
        return stats

    def _screened_out(self, returns: np.ndarray) -> bool:
        """Whether the screen's returns make reaching the stop reward unlikely: their mean
        plus ``SCREEN_Z`` standard errors is still below it (a policy right at the threshold
        often has a few bad episodes among ten, so the screen rejects only clear misses)."""
        r = np.asarray(returns, dtype=np.float64).reshape(len(returns), -1).sum(axis=1)
        if len(r) == 0:
            return False
        spread = r.std(ddof=1) / np.sqrt(len(r)) if len(r) > 1 else 0.0
        return bool(r.mean() + SCREEN_Z * spread < self.stop_reward)

    def _training_looks_solved(self) -> bool:
        """test_in_training: the latest training episodes' mean return reached stop_reward,
        episodes finished since the last test, and that test is at least a quarter of
        ``test_interval`` behind (a policy that plays well only while exploring is not tested
        after every collect)."""
        st = self.state
        if not (self.test_in_training and self.stop_reward is not None and self._train_returns):
            return False
        if not self._new_train_episodes:
            return False
        last = max(st.last_test_step, self._last_attempt)
        if last >= 0 and self.progress - last < self.test_interval / 4:
            return False
        return sum(self._train_returns) / len(self._train_returns) >= self.stop_reward

    def _collect_training_steps(self, n_step: int) -> CollectStats:
        """One training collect in the configured batch mode (RLlib's names):
        ``truncate_episodes`` collects ``n_step`` steps (exactly ``rollout_fragment_length``
        per env when that is set) and continues running episodes in the next collect;
        ``complete_episodes`` collects whole episodes until at least ``n_step`` steps."""
        if self.rollout_fragment_length is not None:
            return self._collect(fragment=self.rollout_fragment_length)
        if self.batch_mode == "complete_episodes":
            return self._collect(n_step=n_step, complete_episodes=True)
        return self._collect(n_step=n_step)

    def _wire_env_step_hook(self) -> None:
        """Hand the training collector a per-step callback when a plugin implements
        ``rlblocks_env_step``, and none otherwise (so a run without one pays nothing)."""
        collector = self.train_collector
        if collector is None or not hasattr(collector, "on_step"):
            return
        wanted = bool(self.hook.rlblocks_env_step.get_hookimpls())
        if wanted and self._drains:
            raise ConfigError(
                "rlblocks_env_step is called once per env step, and the asynchronous collector "
                "(trainer.async_collect) steps envs in the background; turn it off, or "
                "do the work per collect in rlblocks_rollout_end"
            )
        collector.on_step = self._on_env_step if wanted else None

    def _on_env_step(self, step: int, env_id: int, obs: Any, act: Any, rew: Any,
                     terminated: bool, truncated: bool, obs_next: Any, info: Any) -> None:
        self.hook.rlblocks_env_step(
            env_step=self._step_base + step, env_id=env_id, obs=obs, act=act, rew=rew,
            terminated=terminated, truncated=truncated, obs_next=obs_next, info=info,
            trainer=self,
        )  # fmt: skip

    def _collect(self, **kwargs: Any) -> CollectStats:
        """One training collect (``train_collector.collect(**kwargs)``), its wall time added to
        ``state.collect_seconds``."""
        if getattr(self.train_collector, "on_step", None) is not None:
            self._step_base = self.state.env_step - self.train_collector.total_steps
        started = time.perf_counter()
        stats = self.train_collector.collect(**kwargs)
        self.state.collect_seconds += time.perf_counter() - started
        return stats

    def _record_collect(self, stats: CollectStats) -> None:
        st = self.state
        st.env_step += stats.n_step
        if stats.env_steps is not None:
            st.env_steps_taken = (st.env_steps_taken or 0) + stats.env_steps
        if stats.agent_steps is not None:
            st.agent_steps = (st.agent_steps or 0) + stats.agent_steps
        st.train_episodes += stats.n_episode
        if stats.n_episode:
            self._train_returns.extend(float(r) for r in np.ravel(stats.returns))
            # one number per episode (per-agent returns summed)
            per_episode = np.asarray(stats.returns).reshape(stats.n_episode, -1).sum(axis=1)
            returns = [float(r) for r in per_episode]
            self._new_train_episodes += stats.n_episode
            log_r, log_l, log_s = self._episode_log
            log_r.extend(returns)
            log_l.extend(int(n) for n in np.ravel(stats.lengths))
            log_s.extend([int(st.env_step)] * stats.n_episode)
        self.hook.rlblocks_rollout_end(stats=stats.as_scalars(), env_step=st.env_step, trainer=self)
        if stats.n_episode:
            self.hook.rlblocks_episodes_end(
                returns=stats.returns,
                lengths=stats.lengths,
                env_step=st.env_step,
                namespace="train",
            )
            self.hook.rlblocks_log(namespace="train", scalars=stats.as_scalars(), step=st.env_step)

    def _take_back_in_flight(self) -> CollectStats | None:
        """Before a checkpoint and at the end of the run, take back the training steps an
        asynchronous collector still has in flight (``drain``): their transitions reach the
        buffer and count as env steps of the run, and with nothing in flight the checkpoint
        can snapshot the envs, so a resumed run continues their episodes. None when nothing
        was in flight (always, for the synchronous collector)."""
        collector = self.train_collector
        if not self._drains or not len(collector.in_flight):  # type: ignore[union-attr]
            return None
        stats = collector.drain()  # type: ignore[union-attr]
        self.state.collect_seconds += stats.seconds
        self._record_collect(stats)
        return stats

    def _record_update(self, stats: Mapping[str, Any], gradient_steps: int = 1) -> None:
        """Keep one update's statistics (floats or 0-d tensors, read at the next log)."""
        self._update_stats.add(stats)
        if self._finite is not None:
            self._finite.end_update(gradient_steps)

    def _check_updates(self) -> None:
        """Stop with NonFiniteError when a loss, gradient or parameter of this iteration's
        updates is NaN or infinite (skipped steps only count with ``skip_update``)."""
        if self._finite is None:
            return
        st = self.state
        problem = self._finite.check(st.gradient_step)
        if not problem:
            return
        advice = (
            "lower the learning rate"
            if self.on_nonfinite == "skip_update"
            else "lower the learning rate or clip gradients (max_grad_norm), or set "
            "trainer.on_nonfinite=skip_update to skip such steps"
        )
        where = self.progress_counter.replace("_", " ")
        raise NonFiniteError(
            f"{problem} ({where} {self.progress}); {self._last_checkpoint()}; {advice}"
        )

    def _last_checkpoint(self) -> str:
        """Where the latest checkpoint of the run directory is (written before any
        non-finite value: every iteration is checked before checkpointing)."""
        if self.run_dir is None:
            return "no run directory, so no checkpoint"
        root = Path(self.run_dir) / "checkpoints"
        # a generation directory per checkpoint, or one file (rlblocks 0.1); not temporaries
        found = [*root.glob("*/latest.pt"), *root.glob("latest.pt")]
        found = [p for p in found if not p.parent.name.startswith(".")]
        if not found:
            return f"no checkpoint in {root} yet"
        newest = max(found, key=lambda p: p.stat().st_mtime)
        return f"last good checkpoint: {newest}"

    def _flush_update_stats(self, force: bool = False) -> None:
        st = self.state
        if not self._update_stats or (self.progress < st.next_log_step and not force):
            return
        while st.next_log_step <= self.progress:
            st.next_log_step += self.log_interval
        means = self._update_stats.means()
        means["gradient_step"] = int(st.gradient_step)
        if self._finite is not None and self._finite.skip:
            means["skipped_steps"] = self._finite.pop_skipped()
        means.update(self.policy.schedule_stats())
        self.hook.rlblocks_update_end(
            stats=means, env_step=st.env_step, gradient_step=st.gradient_step, trainer=self
        )
        self.hook.rlblocks_log(namespace="update", scalars=means, step=self.progress)

    @property
    def stop_requested(self) -> bool:
        """Whether :meth:`request_stop` was called."""
        return bool(self._stop_requested)

    def request_stop(self, reason: str = "stop requested by a hook") -> None:
        """End the run after the current iteration (the last checkpoint and test still run)."""
        self._stop_requested = reason or "stop requested by a hook"

    def _should_stop(self, ask_plugins: bool) -> str:
        """The stop reason, or "". ``ask_plugins`` (after a test, or every iteration of a run
        without tests) asks ``rlblocks_should_stop`` first: True stops, False keeps going past
        the reward threshold until the next answer, None leaves it to the built-in rules.
        The budget (``max_env_steps``; ``max_gradient_steps`` offline) always stops."""
        st = self.state
        if self._stop_requested:
            return self._stop_requested
        if ask_plugins:
            verdict = self.hook.rlblocks_should_stop(
                state={
                    **attrs.asdict(self.state),
                    "stop_reward": self.stop_reward,
                    "screened": self._last_screened,
                }
            )
            self._plugins_keep_going = verdict is False
            if verdict:
                return "a plugin's rlblocks_should_stop returned True"
        if st.solved and not self._plugins_keep_going:
            return f"mean test return {st.last_test_return:.1f} >= stop_reward {self.stop_reward}"
        if self.progress >= self.budget:
            return f"reached {self.budget_name}={self.budget}"
        return ""

    def epoch_of(self, env_step: int) -> int:
        """The 1-based index of the block of ``test_interval`` env steps that ``env_step`` is
        in: ``env_step // test_interval + 1`` (for :class:`OfflineTrainer`, whose schedules
        count gradient steps, of gradient steps). It stands in for Tianshou's epoch (we count an
        env-step budget, not epochs) as ``train_fn`` and ``test_fn``'s first argument: collects
        in the first ``test_interval`` env steps get 1; a scheduled test gets the index of the
        block it closes (the test at ``k * test_interval`` env steps gets ``k``, as Tianshou's
        test at the end of epoch ``k``); other tests (``test_in_training``, the final one) get
        the block in progress, and the ``test_at_start`` test gets 0."""
        return int(env_step) // max(1, int(self.test_interval)) + 1

    def _announce_env_step(self) -> None:
        """Tell the policy (epsilon, lr schedules) and a buffer that anneals with progress
        (prioritized replay's beta) how far training has come, once per collect; then call
        ``train_fn``, so what it sets overrides the schedules for this collect."""
        step = self.state.env_step
        self.policy.set_env_step(step)
        if self.buffer_abilities.annealed:
            self.buffer.set_env_step(step)  # type: ignore[union-attr]
        if self.train_fn is not None:
            self.train_fn(self.epoch_of(step), step)

    def _iterate(self) -> None:
        raise NotImplementedError

    def _before_loop(self) -> None:
        """Runs once before the loop (warm-up collection)."""

    def _scheduled_test(self) -> bool:
        """Run the test due at this env step, if one is (moving the schedule past it); the
        run's last test is always complete. Returns whether one was due."""
        st = self.state
        progress = self.progress
        if progress < st.next_test_step:
            return False
        while st.next_test_step <= progress:
            st.next_test_step += self.test_interval
        self._closing_epoch = max(1, self.epoch_of(progress) - 1)
        try:
            self.test(screen=progress < self.budget)
        finally:
            self._closing_epoch = None
        return True

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> TrainResult:
        """Train until the stop rule fires; return the result."""
        st = self.state
        started = time.perf_counter() - st.wall_seconds
        self.policy.train()
        has_tests = self.test_collector is not None and self.test_episodes > 0
        if self._finite is not None:
            self._finite.attach()
        self._wire_env_step_hook()
        try:
            tested_at_start = False
            if has_tests and self.test_at_start and self.progress == 0 and st.tests == 0:
                # the untrained policy, before any env or gradient step (a resumed run has
                # tested already); a full test: it sets the curve's first point and the best
                self._phase = "test"
                self._closing_epoch = 0
                try:
                    self.test(screen=False)
                finally:
                    self._closing_epoch = None
                tested_at_start = True
                reason = self._should_stop(ask_plugins=True)
                if reason:  # the untrained policy already meets the stop rule: nothing to train
                    st.stop_reason = reason
                    st.wall_seconds = time.perf_counter() - started
                    if self.checkpoint_fn is not None:
                        self._phase = "checkpoint"
                        self.checkpoint_fn(self)
                    self._flush_update_stats(force=True)
                    return self.result()
            self._phase = "collect"
            self._before_loop()
            if has_tests:
                # a warm-up that reaches a test step is tested there, before the first gradient
                # step: the curve's first point is the untrained policy, as in Tianshou's epoch
                # 0 (unless that policy was tested at the start: the warm-up does not change it)
                self._phase = "test"
                if tested_at_start and st.gradient_step == 0:
                    while st.next_test_step <= self.progress:
                        st.next_test_step += self.test_interval
                else:
                    self._scheduled_test()
                self._phase = "collect"
            while True:
                self._iterate()
                synced = time.perf_counter()  # the check waits for queued device updates
                self._check_updates()
                now = time.perf_counter()
                st.update_seconds += now - synced
                st.wall_seconds = now - started
                tests_before = st.tests + st.screened_tests
                self._phase = "test"
                if not self._scheduled_test() and self._training_looks_solved():
                    self.test()
                self._flush_update_stats()
                tested = st.tests + st.screened_tests > tests_before
                reason = self._should_stop(ask_plugins=tested or not has_tests)
                if reason.startswith("reached") and st.last_test_step != self.progress:
                    # end on a (full) test of the final policy unless one just ran here
                    self.test(screen=False)
                    if st.solved:
                        reason = self._should_stop(ask_plugins=True) or reason
                st.wall_seconds = time.perf_counter() - started
                self._phase = "checkpoint"
                due = self.checkpoint_fn is not None and (
                    reason
                    or (self.checkpoint_interval > 0 and self.progress >= st.next_checkpoint_step)
                )
                if due or reason:
                    self._take_back_in_flight()
                if due:
                    while self.checkpoint_interval > 0 and st.next_checkpoint_step <= self.progress:
                        st.next_checkpoint_step += self.checkpoint_interval
                    self.checkpoint_fn(self)  # type: ignore[misc]  # due: not None
                if reason:
                    st.stop_reason = reason
                    break
                self._phase = "collect"
        except BaseException as exc:
            try:
                self.hook.rlblocks_exception(exc=exc, where=self._phase)
            except Exception as hook_error:  # a failing handler hides nothing: chain both
                raise hook_error from exc
            raise
        finally:
            if self._finite is not None:  # the policy steps unwatched outside the loop
                self._finite.detach()
        self._flush_update_stats(force=True)
        return self.result()

    @property
    def env_steps(self) -> int:
        """Env steps of the training collects (:attr:`TrainerState.env_step` but for
        multi-agent collectors counting agent steps)."""
        st = self.state
        return st.env_step if st.env_steps_taken is None else int(st.env_steps_taken)

    def result(self) -> TrainResult:
        st = self.state
        return TrainResult(
            best_test_return=st.best_test_return,
            last_test_return=st.last_test_return,
            solved=st.solved,
            env_steps=self.env_steps,
            gradient_steps=st.gradient_step,
            wall_seconds=st.wall_seconds,
            train_episodes=st.train_episodes,
            stop_reward=self.stop_reward,
            stop_reason=st.stop_reason,
            agent_steps=st.agent_steps,
            collect_seconds=st.collect_seconds,
            update_seconds=st.update_seconds,
            test_seconds=st.test_seconds,
            collect_speed=_per_second(self.env_steps, st.collect_seconds),
            update_speed=_per_second(st.gradient_step, st.update_seconds),
            test_speed=_per_second(st.test_steps, st.test_seconds),
            screened_tests=st.screened_tests,
            train_episode_returns=list(self._episode_log[0]),
            train_episode_lengths=list(self._episode_log[1]),
            train_episode_env_steps=list(self._episode_log[2]),
        )


class OffPolicyTrainer(BaseTrainer):
    """Collect a few steps, then sampled gradient steps on the replay buffer (DQN, SAC, TD3...)."""

    def __init__(
        self,
        policy: Any,
        train_collector: Collector,
        test_collector: Collector | None,
        buffer: Buffer,
        *,
        step_per_collect: int = 8,
        update_per_step: float = 1.0,
        warmup_steps: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(policy, train_collector, test_collector, buffer, **kwargs)
        if buffer is None:
            raise ValueError("the off-policy trainer needs a replay buffer")
        self.step_per_collect = step_per_collect
        self.update_per_step = update_per_step
        self.warmup_steps = warmup_steps

    def _before_loop(self) -> None:
        st = self.state
        if not st.warmed_up and self.warmup_steps > 0:
            stats = self._collect(n_step=self.warmup_steps, random=True)
            self._record_collect(stats)
        st.warmed_up = True

    def _take_back_in_flight(self) -> CollectStats | None:
        stats = super()._take_back_in_flight()
        if stats is not None:  # their gradient steps come with the next collect's
            self.state.update_credit += self.update_per_step * stats.n_step
        return stats

    def _iterate(self) -> None:
        st = self.state
        self._announce_env_step()
        stats = self._collect_training_steps(self.step_per_collect)
        self._record_collect(stats)
        st.update_credit += self.update_per_step * stats.n_step
        n_updates = int(st.update_credit)
        st.update_credit -= n_updates
        self._phase = "update"
        if n_updates:
            started = time.perf_counter()
            for _ in range(n_updates):
                self._record_update(self.policy.update(self.batch_size, self.buffer))
                st.gradient_step += 1
            st.update_seconds += time.perf_counter() - started


class OnPolicyTrainer(BaseTrainer):
    """Collect, learn over everything collected for ``repeat_per_collect`` passes, clear the
    buffer (REINFORCE, A2C, PPO, NPG, TRPO).

    The policy's ``update(0, buffer, batch_size=..., repeat=...)`` gets the whole buffer in time
    order; a ``gradient_steps`` entry in its returned statistics advances the gradient-step
    counter (one step per update otherwise). The buffer is cleared with its running episode
    statistics kept, so episodes cut by a collect continue in the next one; their last stored
    step before the cut has no successor in the buffer and is bootstrapped from ``V(obs_next)``.
    """

    def __init__(
        self,
        policy: Any,
        train_collector: Collector,
        test_collector: Collector | None,
        buffer: Buffer,
        *,
        step_per_collect: int | None = 2048,
        episode_per_collect: int | None = None,
        repeat_per_collect: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(policy, train_collector, test_collector, buffer, **kwargs)
        if buffer is None:
            raise ValueError("the on-policy trainer needs a buffer to collect into")
        if episode_per_collect is None and not step_per_collect:
            raise ConfigError("set trainer.step_per_collect or trainer.episode_per_collect")
        if repeat_per_collect < 1:
            raise ConfigError(f"trainer.repeat_per_collect must be >= 1, got {repeat_per_collect}")
        self.step_per_collect = step_per_collect
        self.episode_per_collect = episode_per_collect
        self.repeat_per_collect = repeat_per_collect
        maxsize = buffer.maxsize
        num_envs = train_collector.num_envs
        if (
            episode_per_collect is None
            and step_per_collect is not None
            and maxsize < step_per_collect + num_envs - 1
        ):
            raise ConfigError(
                f"buffer.size={maxsize} cannot hold one collect of step_per_collect="
                f"{step_per_collect} steps over {num_envs} envs; set buffer.size >= "
                f"{step_per_collect + num_envs - 1}"
            )

    def _iterate(self) -> None:
        st = self.state
        self._announce_env_step()
        if self.episode_per_collect is not None:
            stats = self._collect(n_episode=self.episode_per_collect)
        else:
            stats = self._collect_training_steps(self.step_per_collect)  # type: ignore[arg-type]
        self._record_collect(stats)
        maxsize = self.buffer.maxsize  # type: ignore[union-attr]
        if stats.n_step > maxsize:
            raise ConfigError(
                f"one collect took {stats.n_step} steps but buffer.size is {maxsize}: the oldest "
                "steps were overwritten before learning; raise buffer.size"
            )
        self._phase = "update"
        started = time.perf_counter()
        out = dict(
            self.policy.update(
                0, self.buffer, batch_size=self.batch_size, repeat=self.repeat_per_collect
            )
        )
        steps = int(out.pop("gradient_steps", 1))
        st.gradient_step += steps
        self._record_update(out, steps)
        reset = self.buffer.reset  # type: ignore[union-attr]
        try:
            reset(keep_statistics=True)
        except TypeError:  # a buffer whose reset takes no arguments
            reset()
        st.update_seconds += time.perf_counter() - started


class OfflineTrainer(BaseTrainer):
    """Gradient steps on samples of a fixed, pre-filled buffer: no training collector, no env
    step (offline RL: TD3+BC, and anything else whose spec says ``training="offline"``).

    Each iteration is a round of at most ``step_per_round`` gradient steps, cut short so that
    it ends exactly where a test, a log or a checkpoint is due or the budget is spent; a round
    is what an off-policy collect-and-update is to :class:`OffPolicyTrainer`: the finite check,
    the stop rule and ``request_stop`` act between rounds, ``rlblocks_update_end`` fires every
    ``log_interval`` gradient steps. Tests run every ``test_interval`` gradient steps (the
    first after ``test_interval`` of them, not before learning) with ``test_episodes`` episodes
    of the test collector, and a run that spends ``max_gradient_steps`` ends on a full test, as
    the online loops do.

    Progress is the gradient step: the schedules, the budget, ``epoch_of``, the ``step`` of
    ``rlblocks_log`` and the second argument of ``train_fn`` (called before each round) and
    ``test_fn`` count gradient steps. ``state.env_step`` and the hooks' ``env_step`` stay 0,
    and the policy and the buffer are never told an env step, so a schedule keyed on env steps
    (a learning-rate schedule, prioritized replay's beta) stays at its start value. The buffer
    is only sampled (a prioritized sampler still receives new priorities); nothing is added.
    """

    progress_counter: ClassVar[str] = "gradient_step"
    budget_name: ClassVar[str] = "max_gradient_steps"

    def __init__(
        self,
        policy: Any,
        test_collector: Collector | None,
        buffer: Buffer,
        *,
        max_gradient_steps: int,
        step_per_round: int = 100,
        **kwargs: Any,
    ) -> None:
        if "max_env_steps" in kwargs:
            raise ConfigError(
                "the offline trainer takes no env step, so it has no max_env_steps; give its "
                "budget in gradient steps as max_gradient_steps"
            )
        online = [k for k in ("batch_mode", "rollout_fragment_length") if k in kwargs]
        if kwargs.get("test_in_training"):
            online.append("test_in_training")
        if online:
            raise ConfigError(
                f"{', '.join(online)} shape(s) training collects, and the offline trainer has "
                "none: leave them out"
            )
        if buffer is None or len(buffer) == 0:
            raise ConfigError(
                f"the offline trainer learns from a fixed dataset, but the buffer "
                f"({type(buffer).__name__}) is empty: fill it before training (load one with "
                "rlblocks.ReplayBuffer.load_hdf5(path), or collect into it)"
            )
        if step_per_round < 1:
            raise ConfigError(f"step_per_round must be >= 1, got {step_per_round}")
        no_collector: Any = None  # no training collect, ever
        super().__init__(
            policy, no_collector, test_collector, buffer, max_env_steps=max_gradient_steps, **kwargs
        )
        self.max_gradient_steps = max_gradient_steps
        self.step_per_round = step_per_round

    def _round_length(self) -> int:
        """Gradient steps of the next round: ``step_per_round``, or fewer to stop exactly where
        the next test, log or checkpoint is due or the budget ends (at least 1)."""
        st = self.state
        ends = [st.gradient_step + self.step_per_round, self.budget, st.next_log_step]
        if self.test_collector is not None and self.test_episodes > 0:
            ends.append(st.next_test_step)
        if self.checkpoint_fn is not None and self.checkpoint_interval > 0:
            ends.append(st.next_checkpoint_step)
        return max(1, min(ends) - st.gradient_step)

    def _iterate(self) -> None:
        st = self.state
        self._phase = "update"
        n_updates = self._round_length()
        if self.train_fn is not None:
            self.train_fn(self.epoch_of(st.gradient_step), st.gradient_step)
        started = time.perf_counter()
        for _ in range(n_updates):
            self._record_update(self.policy.update(self.batch_size, self.buffer))
            st.gradient_step += 1
        st.update_seconds += time.perf_counter() - started
