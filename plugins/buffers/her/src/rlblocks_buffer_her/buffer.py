"""Hindsight experience replay (Andrychowicz et al., 2017) as a relabeller part of rlblocks buffers.

Goal-conditioned envs return Dict observations with ``observation``, ``achieved_goal`` (what the
agent reached) and ``desired_goal`` (what it was asked to reach), and a reward that is a function
of the two goals (gymnasium-robotics' ``GoalEnv.compute_reward(achieved_goal, desired_goal,
info)``). A failed episode still shows how to reach the goals it did achieve, so on ``sample`` a
fraction ``k / (k + 1)`` of the transitions gets a hindsight goal: the ``achieved_goal`` (of
``obs_next``) at a step chosen uniformly from the same episode at or after the sampled one
("future" strategy), up to the episode's newest stored step (unfinished episodes included).
``desired_goal`` in ``obs`` and ``obs_next`` becomes that goal and ``rew`` (and, with
``terminate_on_success``, ``terminated``) is recomputed with the reward function. The stored data
never changes.

n-step targets walk the buffer beyond the sampled slot and would read stored rewards there;
``buffer.batch_view(batch, indices)`` gives a :class:`RelabelledView` in which every read along a
sampled row's path sees that row's goal, so n-step returns of relabelled transitions use
relabelled rewards too (DQN uses it; any algorithm that walks the buffer for targets should).

Relabelling is one part of a composed buffer, :class:`HindsightRelabeller` (registered as
``"her"``), and works over any layout and sampler of single transitions:
``rlblocks.make_buffer("her", ...)`` puts it on the per-env layout, ``make_buffer("replay",
relabel="her", ...)`` on the shared ring. :class:`HERReplayBuffer` and
:class:`HERVectorReplayBuffer` are presets for building one by hand.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlblocks.contracts import Batch, ConfigError
from rlblocks.plugins import import_object
from rlblocks.replay import ReplayBuffer, Sampler, Writer
from rlblocks_buffer_vector.buffer import PerEnvLayout

if TYPE_CHECKING:
    from rlblocks_buffer_vector.buffer import PerEnvLayout

__all__ = ["HERReplayBuffer", "HERVectorReplayBuffer", "HindsightRelabeller", "RelabelledView"]

GoalFn = Callable[[np.ndarray, np.ndarray, Any], Any]
_STRATEGIES = ("future",)


def _resolve_fn(value: GoalFn | str | None, name: str) -> GoalFn | None:
    """A goal function given as a callable, an import path ``"package.module:function"`` or None."""
    if value is None or callable(value):
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"{name} must be a callable or an import path 'package.module:function', "
            f"got {type(value).__name__}"
        )
    try:
        fn = import_object(value)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(
            f"{name}={value!r} cannot be imported ({exc}); write it as 'package.module:function' "
            "naming an importable function"
        ) from exc
    if not callable(fn):
        raise ConfigError(f"{name}={value!r} names a {type(fn).__name__}, not a function")
    return fn


def _goal_fn(env: Any, name: str, fix: str) -> GoalFn:
    """The env's goal function ``name``, or a ConfigError that says ``fix``."""
    fn = getattr(env, name, None)
    if not callable(fn):
        raise ConfigError(
            f"{type(env).__name__} has no {name}(achieved_goal, desired_goal, info) {fix}"
        )
    return fn


class HindsightRelabeller:
    """Relabels goals of sampled transitions (hindsight experience replay); a
    :class:`~rlblocks.replay.Relabeller` and :class:`~rlblocks.replay.EnvAttachedPart`
    registered as ``"her"``.

    Args:
        k: relabelled transitions per original one; a fraction ``k / (k + 1)`` of every sampled
            batch gets a hindsight goal (``k=4``: 80%; ``k=0``: plain replay).
        strategy: where hindsight goals come from; ``"future"`` (the only one so far).
        compute_reward: ``compute_reward(achieved_goal [R, *g], desired_goal [R, *g], info) ->
            rew [R]``, vectorised over ``R`` transitions (gymnasium-robotics' ``GoalEnv``
            convention; ``info`` is the stored ``info`` at those steps, or ``{}`` when the buffer
            stores none). A callable or an import path ``"package.module:function"``. When None,
            call ``buffer.attach_env(env)`` before the first sample.
        terminate_on_success: recompute ``terminated`` of relabelled transitions with
            ``compute_terminated`` (for envs whose episodes end when the goal is reached); False
            keeps the stored flags, right for envs that never end on success (Fetch, Hand).
        compute_terminated: ``compute_terminated(achieved_goal, desired_goal, info) -> bool
            [R]`` (callable or import path); used only with ``terminate_on_success``.

    The buffer must store Dict observations with ``achieved_goal`` and ``desired_goal`` entries
    and read single frames (``stack_num=1``; the buffer refuses others). ``buf[index]`` and
    ``get`` return what was stored; only ``sample`` relabels. Buffer files keep goal functions
    given as import paths; callables are not saved, so attach them again after loading.
    """

    name = "her"

    def __init__(
        self,
        k: int = 4,
        strategy: str = "future",
        compute_reward: GoalFn | str | None = None,
        terminate_on_success: bool = False,
        compute_terminated: GoalFn | str | None = None,
    ) -> None:
        if int(k) < 0:
            raise ConfigError(f"k must be >= 0 (relabelled transitions per original one), got {k}")
        if strategy not in _STRATEGIES:
            raise ConfigError(f"strategy={strategy!r} is not known; use one of {_STRATEGIES}")
        self.k = int(k)
        self.strategy = strategy
        self.future_p = self.k / (self.k + 1)
        self.terminate_on_success = bool(terminate_on_success)
        # import paths are kept so that buffer files rebuild the relabeller with its functions
        self._reward_path = compute_reward if isinstance(compute_reward, str) else None
        self._terminated_path = compute_terminated if isinstance(compute_terminated, str) else None
        self.compute_reward: GoalFn | None = _resolve_fn(compute_reward, "compute_reward")
        self.compute_terminated: GoalFn | None = _resolve_fn(
            compute_terminated, "compute_terminated"
        )
        self.buffer: ReplayBuffer | None = None

    # --- the part protocol --------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """Constructor options (goal functions as import paths; None where a callable was given,
        since callables are not saved)."""
        return {
            "k": self.k,
            "strategy": self.strategy,
            "compute_reward": self._reward_path,
            "terminate_on_success": self.terminate_on_success,
            "compute_terminated": self._terminated_path,
        }

    def bind(self, buffer: ReplayBuffer) -> None:
        """Belong to ``buffer`` (called once by the buffer); a buffer whose sampler draws
        windows instead of transitions is refused here, when it is built."""
        if buffer.abilities().sequences:
            raise ConfigError(
                f"hindsight relabelling works on single transitions, but the buffer's sampler "
                f"{buffer.sampler.name!r} draws windows; use a sampler of transitions (uniform, "
                "prioritized)"
            )
        self.buffer = buffer

    def attach_env(self, env: Any) -> HindsightRelabeller:
        """Take the goal functions the relabeller was not given from an env:
        ``env.unwrapped.compute_reward`` (and ``compute_terminated`` with
        ``terminate_on_success``). ``env`` is a gymnasium env (or any object with those
        methods). ``rlblocks.train`` calls ``buffer.attach_env`` with an instance of the run's
        env, so a run built from names (``--buffer her``) uses a goal env's own reward; functions
        passed to the relabeller (``compute_reward=``) win. Returns the relabeller."""
        base = getattr(env, "unwrapped", env)
        if self.compute_reward is None:
            self.compute_reward = _goal_fn(
                base, "compute_reward", "for hindsight relabelling; pass compute_reward= to the "
                "buffer (buffer.compute_reward=package.module:function) or use a goal env",
            )
        if self.terminate_on_success and self.compute_terminated is None:
            self.compute_terminated = _goal_fn(
                base, "compute_terminated", "(terminate_on_success is set); pass "
                "compute_terminated= to the buffer or set terminate_on_success=False",
            )
        return self

    def relabel(self, batch: Batch, indices: np.ndarray) -> None:
        """Give a random ``k / (k + 1)`` share of ``batch``'s rows future goals, in place:
        ``obs.desired_goal`` and ``obs_next.desired_goal`` set to a future achieved goal of the
        same episode, ``rew`` (and ``terminated`` / ``done`` with ``terminate_on_success``)
        recomputed. Draws from the buffer's generator."""
        if self.future_p == 0.0 or len(indices) == 0:
            return
        buf = self._bound()
        self.check_ready()
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1:
            raise ConfigError(
                f"hindsight relabelling works on single transitions (indices [B]), got indices "
                f"of shape {idx.shape}; use a sampler of transitions (uniform, prioritized), not "
                "windows"
            )
        rows = np.flatnonzero(buf.rng.random(len(idx)) < self.future_p)
        if len(rows) == 0:
            return
        idx = idx[rows]
        goal = self.achieved_goals(self._future_slots(idx))  # [R, *goal_shape]
        batch.obs.desired_goal[rows] = goal
        batch.obs_next.desired_goal[rows] = goal
        batch.rew[rows] = self.rewards(idx, goal)
        if self.terminate_on_success:
            term = self.successes(idx, goal)
            batch.terminated[rows] = term
            batch.done[rows] = term | batch.truncated[rows]

    def view(self, batch: Batch, indices: np.ndarray) -> Any:
        """A read-only view for targets that walk the buffer from a sampled batch (n-step
        returns): row ``j`` of every read sees ``batch.obs.desired_goal[j]`` as its goal, so
        rewards (and terminations) along the path are recomputed for it. See
        :class:`RelabelledView`; the buffer itself when nothing is relabelled (``k=0``)."""
        buf = self._bound()
        if self.future_p == 0.0:
            return buf
        self.check_ready()
        goals = np.asarray(batch.obs["desired_goal"])
        if goals.shape[:1] != np.shape(indices):
            raise ValueError(
                f"batch has {goals.shape[0]} goals for {len(indices)} indices; pass the batch "
                "and the indices that sample() returned together"
            )
        return RelabelledView(self, goals)

    # --- goal arithmetic (also what RelabelledView reads through) -----------------------------

    def _bound(self) -> ReplayBuffer:
        if self.buffer is None:
            raise RuntimeError("the HER relabeller is not part of a buffer yet (bind it first)")
        return self.buffer

    def check_ready(self) -> None:
        """Raise a ConfigError saying what is missing when relabelling cannot work: Dict
        observations with goal entries, a reward function (and ``compute_terminated`` with
        ``terminate_on_success``)."""
        obs = self._bound().storage_arrays.get("obs")
        if not isinstance(obs, dict) or not {"achieved_goal", "desired_goal"} <= obs.keys():
            stored = sorted(obs) if isinstance(obs, dict) else "an array"
            raise ConfigError(
                f"hindsight relabelling needs Dict observations with 'achieved_goal' and "
                f"'desired_goal' entries; this buffer stores obs as {stored}. Use a goal-"
                "conditioned env, or buffer 'vector' / 'replay' for other envs"
            )
        if self.compute_reward is None:
            raise ConfigError(
                "the HER buffer has no reward function: pass compute_reward= (a callable or "
                "'package.module:function'), or call buffer.attach_env(env) to use the env's "
                "compute_reward"
            )
        if self.terminate_on_success and self.compute_terminated is None:
            raise ConfigError(
                "terminate_on_success is set but the HER buffer has no compute_terminated: pass "
                "compute_terminated=, or call buffer.attach_env(env) with an env that has one"
            )

    def _future_slots(self, idx: np.ndarray) -> np.ndarray:
        """For each slot of ``idx`` ``[R]``, a slot drawn uniformly from the same episode at or
        after it, up to the episode's newest stored step (the layout counts and walks them)."""
        buf = self._bound()
        after = buf.steps_after(idx)
        pick = (buf.rng.random(len(idx)) * (after + 1)).astype(np.int64)
        return buf.advance(idx, pick)

    def achieved_goals(self, slots: np.ndarray) -> np.ndarray:
        """``obs_next.achieved_goal`` at ``slots`` (rebuilt from the next obs when not stored)."""
        buf = self._bound()
        data = buf.storage_arrays
        if buf.ignore_obs_next:
            return data["obs"]["achieved_goal"].take(np.asarray(buf.next(slots)), axis=0)
        return data["obs_next"]["achieved_goal"].take(slots, axis=0)

    def _info(self, slots: np.ndarray) -> Any:
        info = self._bound().get(slots, "info", None, 1)
        return {} if info is None else info

    def rewards(self, slots: np.ndarray, goals: np.ndarray) -> np.ndarray:
        """``compute_reward`` of the transitions at ``slots`` ``[R]`` for goals ``goals``."""
        assert self.compute_reward is not None
        rew = np.asarray(self.compute_reward(self.achieved_goals(slots), goals, self._info(slots)))
        if rew.shape[:1] != slots.shape:
            raise ConfigError(
                f"compute_reward returned shape {rew.shape} for {len(slots)} transitions; it must "
                "be vectorised: goals of shape [R, ...] in, rewards [R] out"
            )
        return rew

    def successes(self, slots: np.ndarray, goals: np.ndarray) -> np.ndarray:
        """``compute_terminated`` of the transitions at ``slots`` for goals ``goals`` (bool)."""
        assert self.compute_terminated is not None
        term = np.asarray(
            self.compute_terminated(self.achieved_goals(slots), goals, self._info(slots)), bool
        )
        if term.shape != slots.shape:
            raise ConfigError(
                f"compute_terminated returned shape {term.shape} for {len(slots)} transitions; "
                "it must be vectorised: goals of shape [R, ...] in, flags [R] out"
            )
        return term


class RelabelledView:
    """The buffer as the rows of one sampled batch see it: row ``j`` of every read belongs to
    sampled row ``j`` and has goal ``goals[j]``.

    Reads take ``[B]`` slot arrays aligned with the batch (row ``j`` on the path of sampled row
    ``j``, as :func:`rlblocks.algo.nstep_return` walks them). ``rew`` is recomputed with each
    row's goal (so for every row, relabelled or not: a goal env's stored reward is
    ``compute_reward`` of its own goal); ``obs`` / ``obs_next`` carry the row's goal; with
    ``terminate_on_success`` ``terminated`` / ``done`` are recomputed and ``next`` stops where a
    row's goal is reached. Everything else reads through to the buffer's public API.
    """

    def __init__(self, relabeller: HindsightRelabeller, goals: np.ndarray) -> None:
        if relabeller.buffer is None:
            raise RuntimeError("the HER relabeller is not part of a buffer yet (bind it first)")
        self.relabeller = relabeller
        self.buffer: ReplayBuffer = relabeller.buffer
        self.goals = goals  # [B, *goal_shape]

    def __len__(self) -> int:
        return len(self.buffer)

    @property
    def env_id(self) -> np.ndarray:
        return self.buffer.env_id

    def _rows(self, index: Any) -> np.ndarray:
        idx = np.asarray(index, dtype=np.int64)
        if idx.shape != self.goals.shape[:1]:
            raise ValueError(
                f"a relabelled view reads one slot per sampled row ({len(self.goals)}), got "
                f"index of shape {idx.shape}; read the buffer itself for other slots"
            )
        return idx

    def _terminated(self, idx: np.ndarray) -> np.ndarray:
        if self.relabeller.terminate_on_success:
            return self.relabeller.successes(idx, self.goals)
        return np.asarray(self.buffer.get(idx, "terminated"), bool)

    def prev(self, index: Any) -> np.ndarray:
        return self.buffer.prev(index)

    def next(self, index: Any) -> np.ndarray:
        """The buffer's ``next``, ending at steps where the row's goal is reached when success
        terminates episodes."""
        idx = self._rows(index)
        nxt = np.asarray(self.buffer.next(idx))
        if self.relabeller.terminate_on_success:
            nxt = np.where(self._terminated(idx), idx, nxt)
        return nxt

    def get(self, index: Any, key: str, default: Any = None, stack_num: int | None = None) -> Any:
        """Value of ``key`` at row-aligned slots ``index`` ``[B]``, with the rows' goals."""
        idx = self._rows(index)
        if key == "rew":
            return self.relabeller.rewards(idx, self.goals)
        if key == "terminated":
            return self._terminated(idx)
        if key == "done":
            truncated = np.asarray(self.buffer.get(idx, "truncated"), bool)
            return self._terminated(idx) | truncated
        value = self.buffer.get(idx, key, default, stack_num)
        if key in ("obs", "obs_next") and value is not default:
            value.desired_goal = self.goals.copy()
        return value

    def __getitem__(self, index: Any) -> Batch:
        idx = self._rows(index)
        batch = self.buffer[idx]
        batch.obs.desired_goal = self.goals.copy()
        batch.obs_next.desired_goal = self.goals.copy()
        batch.rew = self.get(idx, "rew")
        batch.terminated = self._terminated(idx)
        batch.done = batch.terminated | batch.truncated
        return batch


class HERReplayBuffer(ReplayBuffer):
    """A :class:`~rlblocks.replay.ReplayBuffer` on the shared ring (one circular storage for all
    envs) with a :class:`HindsightRelabeller` of the given options (see it for ``k`` ...
    ``compute_terminated``; the rest as for ``ReplayBuffer``)."""

    relabeller: HindsightRelabeller

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        k: int = 4,
        strategy: str = "future",
        compute_reward: GoalFn | str | None = None,
        terminate_on_success: bool = False,
        compute_terminated: GoalFn | str | None = None,
        ignore_obs_next: bool = False,
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
        *,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
    ) -> None:
        relabeller = HindsightRelabeller(
            k, strategy, compute_reward, terminate_on_success, compute_terminated
        )
        super().__init__(
            size, num_envs, 1, ignore_obs_next, seed, storage, path,
            sampler=sampler, relabel=relabeller, writer=writer,
        )


class HERVectorReplayBuffer(HERReplayBuffer):
    """The same on the per-env layout (one circular sub-buffer per env, so a fast env never
    pushes out another env's episodes): the make-up ``make_buffer("her", ...)`` builds."""

    layout: PerEnvLayout
    default_layout = PerEnvLayout
