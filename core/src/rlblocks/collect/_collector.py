"""The Collector: runs a policy in a vector env and writes every transition into a buffer.

One ``collect`` call either gathers at least ``n_step`` env steps (RLlib's truncate-episodes
mode: episodes continue across calls) or exactly ``n_episode`` whole episodes (complete-episodes
mode: every env starts a fresh episode and no more than ``n_episode`` episodes are started). The
collector resets finished envs itself, so no transition ever spans two episodes.

Hot loop per vector step (N = number of active envs)::

    obs [N, ...] -> policy.forward -> act [N] -> exploration_noise -> map_action -> env.step
    -> buffer.add(obs, act, rew, terminated, truncated, obs_next[, policy, views, info])
    -> reset finished envs

A NaN or infinite reward or float observation stops the collect with NonFiniteError naming the
env and its index, before it reaches the buffer (one reduction over each of the step's arrays
finds it; only then are rows checked one by one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.collect._rows import (
    NO_IDS,
    reset_state_rows,
    restarted_rows,
    to_numpy,
    to_numpy_tree,
    vdot,
)
from rlblocks.collect._stats import CollectStats, EpisodeTally, count_outcome
from rlblocks.contracts import (
    ACTION_MASK_KEY,
    ActingViews,
    Batch,
    Buffer,
    BufferAbilities,
    ConfigError,
    NonFiniteError,
    PolicyAbilities,
    VectorEnv,
    VectorEnvAbilities,
    ViewingPolicy,
    acting_requirements,
    action_mask_of,
    check_action_mask_space,
    copy_history,
    describe_change,
    frame_stack_views,
    has_action_mask,
    put_rows,
    random_legal_actions,
    space_has_tuple,
    take_rows,
    tuples_as_dicts,
)
from rlblocks.plugins import get_registry

#: steps of every env whose random actions one generator call draws (see _random_actions)
_RANDOM_BLOCK = 256
_RANDOM_BLOCK_VALUES = 1 << 16  # and at most this many action values










def _info_keys(asked: Sequence[str], requirements: Mapping[str, Any]) -> tuple[str, ...]:
    """The step-info keys to store: ``asked`` (checked), then those ``info.<key>`` views read."""
    if isinstance(asked, str) or not all(isinstance(k, str) and k for k in asked):
        raise ConfigError(f"info_keys must be a list of non-empty strings, got {asked!r}")
    keys = list(asked)
    for name, req in requirements.items():
        top, _, rest = req.column(name).partition(".")
        if top == "info" and rest:
            keys.append(rest.partition(".")[0])
    return tuple(dict.fromkeys(keys))


def space_misfit(made_for: gym.Space, given: gym.Space, where: str = "") -> str | None:
    """Where ``given`` (an env's space) differs in structure from ``made_for`` (a policy's):
    another kind of space, shape, number of choices or set of keys, as a phrase; None when a
    policy made for one reads and acts on the other (bounds and dtypes may differ)."""
    at = f" at {where}" if where else ""
    if type(made_for) is not type(given):
        return f"{type(given).__name__} instead of {type(made_for).__name__}{at}"
    if isinstance(made_for, gym.spaces.Dict):
        if list(made_for.spaces) != list(given.spaces):
            return f"the keys {list(given.spaces)} instead of {list(made_for.spaces)}{at}"
        for key, sub in made_for.spaces.items():
            problem = space_misfit(sub, given.spaces[key], f"{where}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if isinstance(made_for, gym.spaces.Tuple):
        if len(made_for.spaces) != len(given.spaces):
            return f"{len(given.spaces)} entries instead of {len(made_for.spaces)}{at}"
        for i, (sub, other) in enumerate(zip(made_for.spaces, given.spaces)):
            problem = space_misfit(sub, other, f"{where}[{i}]")
            if problem is not None:
                return problem
        return None
    if isinstance(made_for, gym.spaces.Discrete):
        ours = (int(made_for.n), int(made_for.start))
        if ours != (int(given.n), int(given.start)):  # type: ignore[attr-defined]
            return f"{given} instead of {made_for}{at}"
        return None
    if isinstance(made_for, gym.spaces.MultiDiscrete):
        if not np.array_equal(made_for.nvec, given.nvec):  # type: ignore[attr-defined]
            return f"{given} instead of {made_for}{at}"
        return None
    if made_for.shape is not None and made_for.shape != given.shape:
        return f"the shape {given.shape} instead of {made_for.shape}{at}"
    return None


def _lanes_effect(lanes: int, num_envs: int) -> str:
    if lanes < num_envs:
        return "the steps of some envs would have nowhere to go"
    return "some of its lanes would never fill"


def _discrete_bounds(space: gym.Space) -> Callable[[Any], bool] | None:
    """For a Discrete or MultiDiscrete observation space: whether a batch of observations
    lies within it (one vectorised comparison); None for other spaces, whose out-of-range
    values break nothing rlblocks builds."""
    if isinstance(space, gym.spaces.Discrete):
        low, high = int(space.start), int(space.start) + int(space.n)
    elif isinstance(space, gym.spaces.MultiDiscrete):
        low, high = space.start, space.start + space.nvec
    else:
        return None

    def inside(obs: Any) -> bool:
        arr = np.asarray(obs)
        return bool(np.all((arr >= low) & (arr < high)))

    return inside


class Collector:
    """Collects transitions from ``envs`` with ``policy`` into ``buffer`` (which may be None,
    e.g. for test collection). ``exploration`` applies the policy's exploration noise while the
    policy is in training mode. ``frame_stack = k > 1``: the policy acts on the last ``k``
    observations of each env stacked on axis 1 (the first one repeated at an episode's start),
    while the buffer stores single observations; a buffer with ``stack_num = k`` gives training
    the same stacks. ``info_keys``: keys of the envs' step infos stored with each step (as
    ``info.<key>``, the info that came with ``obs_next``), besides any a policy's view
    requirements read (``ViewRequirement("info.cost")``); every step must report them.

    Action masks travel in the observation (a Dict's ``"action_mask"``, see
    ``rlblocks.contracts.has_action_mask``): random warm-up actions are drawn among the legal
    ones, and the buffer stores the mask with ``obs`` and ``obs_next`` for targets. Masks only
    in the infos are refused at the first reset, naming the wrapper that moves them."""

    def __init__(
        self,
        policy: Any,
        envs: VectorEnv | gym.Env,
        buffer: Buffer | None = None,
        exploration: bool = True,
        seed: int | None = None,
        frame_stack: int = 1,
        info_keys: Sequence[str] = (),
    ) -> None:
        self.policy = policy  # a property: its abilities are resolved once, when it is set
        if isinstance(envs, gym.Env | gym.vector.VectorEnv):
            envs = _vector_env_of_one(envs)
        # Tuple observations travel as dicts keyed "0", "1", ... (Batch turns tuples into arrays)
        self.envs = TupleObsAsDict(envs) if space_has_tuple(envs.observation_space) else envs
        self.buffer = buffer  # a property, like policy
        self.exploration = exploration
        self.num_envs = envs.num_envs
        self._check_fit(policy, envs, buffer, int(frame_stack))
        self.action_space: gym.Space = envs.action_space
        self._rng = np.random.default_rng(seed)
        #: env ids 0 .. num_envs - 1; ``active is self._all_ids`` marks a step of every env
        self._all_ids = np.arange(self.num_envs)
        self._all_ids.flags.writeable = False
        # random actions of steps of every env, drawn many steps at a time (_random_actions)
        self._random_block: np.ndarray | None = None
        self._random_next = 0
        space = self.action_space
        self._uniform_actions = isinstance(
            space, gym.spaces.Discrete | gym.spaces.MultiDiscrete
        ) or (
            isinstance(space, gym.spaces.Box)
            and bool(np.all(np.isfinite(space.low)))
            and bool(np.all(np.isfinite(space.high)))
        )
        action_size = (
            int(np.prod(space.shape))
            if isinstance(space, gym.spaces.Box | gym.spaces.MultiDiscrete)
            else 1
        )
        self._block_steps = max(
            1, min(_RANDOM_BLOCK, _RANDOM_BLOCK_VALUES // (self.num_envs * max(1, action_size)))
        )
        self._obs: Any = None  # current observation of every env [num_envs, ...]
        self._state: Any = None
        self._ep_return = np.zeros(self.num_envs)
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        #: steps each env has taken through this collector (exact collects step the envs that
        #: have taken fewest, so envs stay within one step of each other)
        self._env_steps = np.zeros(self.num_envs, dtype=np.int64)
        self._seed = seed
        self.total_steps = 0
        self.total_episodes = 0
        #: ``on_step(step, env_id, obs, act, rew, terminated, truncated, obs_next, info)``,
        #: called once per env step of every env (``step``: this collector's step count, this
        #: step included); None (the default) costs nothing. See :meth:`_call_on_step`.
        self.on_step: Callable[..., None] | None = None
        self._store_policy = True
        self._viewing = isinstance(policy, ViewingPolicy)
        requirements = dict(policy.view_requirements if self._viewing else {})
        #: the acting views built below; a later change to them is refused (_check_views)
        self._acting_views = acting_requirements(requirements)
        #: step-info keys stored with every step: the asked ones, then those views read
        self.info_keys: tuple[str, ...] = _info_keys(info_keys, requirements)
        self.frame_stack = int(frame_stack)
        if self.frame_stack > 1:
            requirements = frame_stack_views(self.frame_stack, requirements)
        views = ActingViews(requirements, self.num_envs, envs.observation_space, self.action_space)
        self._views: ActingViews | None = views if views else None
        #: what the envs can do beyond stepping (snapshots, restarts...), found once
        self.env_abilities = VectorEnvAbilities.of(envs)
        #: names the env in errors
        self.env_name = self.env_abilities.name
        #: obs -> the sum of its float entries (NaN or infinite when one of them is)
        self._obs_total = _float_total_of(envs.observation_space)
        #: the envs may come back with a made-up step of a restarted worker (_store_steps)
        self._may_restart = self.env_abilities.restarts
        #: Discrete / MultiDiscrete observations: whether a batch lies in the space (one-hot
        #: encoders index with them), checked at resets and on the first collect's first step
        self._obs_inside = _discrete_bounds(envs.observation_space)
        self._first_step_checked = self._obs_inside is None
        #: the observations carry an action mask (obs["action_mask"]): random warm-up actions
        #: are drawn among the legal ones, and the policy reads the mask from the observation
        self._masked = has_action_mask(envs.observation_space)
        check_action_mask_space(envs.observation_space, envs.action_space)

    @staticmethod
    def _check_fit(policy: Any, envs: Any, buffer: Any, frame_stack: int) -> None:
        """Refuse, before anything runs, a policy made for other spaces than the envs' (it
        would fail inside its networks) and a buffer made for another number of envs."""
        checks = [("action", "action_space")]
        if frame_stack <= 1:  # a stacked observation space is the policy's own business
            checks.insert(0, ("observation", "observation_space"))
        for what, attr in checks:
            made_for = getattr(policy, attr, None)
            given = getattr(envs, attr, None)
            if not isinstance(made_for, gym.Space) or not isinstance(given, gym.Space):
                continue
            problem = space_misfit(made_for, given)
            if problem is not None:
                raise ConfigError(
                    f"the policy was made for another {what} space than the envs have (they "
                    f"have {problem}); make the policy with the envs' spaces "
                    "(make_policy(name, envs.observation_space, envs.action_space))"
                )
        lanes = getattr(buffer, "num_envs", None)
        if isinstance(lanes, int) and lanes != envs.num_envs:
            raise ConfigError(
                f"the buffer was made for num_envs={lanes} and the collector steps "
                f"{envs.num_envs} env(s), so {_lanes_effect(lanes, envs.num_envs)}; "
                f"make it with num_envs={envs.num_envs} (make_buffer(name, size, "
                f"{envs.num_envs}))"
            )

    @property
    def policy(self) -> Any:
        """The policy that acts (None: only random actions)."""
        return self._policy

    @policy.setter
    def policy(self, policy: Any) -> None:
        self._policy = policy
        self._policy_abilities = PolicyAbilities.of(policy)

    @property
    def buffer(self) -> Buffer | None:
        """Where the steps go (None: nowhere)."""
        return self._buffer

    @buffer.setter
    def buffer(self, buffer: Buffer | None) -> None:
        self._buffer = buffer
        self._buffer_abilities = BufferAbilities.of(buffer)
        #: whether the policy returns a recurrent state, for a buffer of sequences (None: not
        #: known before the first random step): random steps then run the policy for its state
        #: (_state_of_random_step); False for every other buffer
        self._keeps_state: bool | None = None if self._buffer_abilities.sequences else False

    def _store_steps(
        self, data: dict[str, Any], ids: np.ndarray | None, infos: Any, cut: np.ndarray
    ) -> None:
        """``buffer.add(data, env_ids=ids)`` (``ids`` None: every env, in order) with the stored
        info keys read from ``infos``, leaving out rows ``cut``: the made-up steps of envs whose
        worker died and was restarted (``restart_failed``, see :func:`restarted_rows`); their
        infos, which lack the env's keys, are not read.

        Such a step (truncated, reward 0, the env's last observation again) never happened: it
        is not stored, and the env's stored episode ends, truncated, at its last real step, so
        the fresh episode after the restart does not link to it. A buffer that cannot end one
        env's episode (no ``env_ids`` in its ``truncate_unfinished``) stores the made-up step,
        which ends the episode as well."""
        buffer = self.buffer
        assert buffer is not None
        every = self._all_ids if ids is None else ids
        if not len(cut) or not self._buffer_abilities.cuts_some_envs:
            if self.info_keys:
                data["info"] = self._info_columns(infos, every)
            buffer.add(data, env_ids=ids)
            return
        keep = np.ones(len(every), dtype=bool)
        keep[cut] = False
        rows = np.flatnonzero(keep)
        if len(rows):
            kept = take_rows(data, rows)
            if self.info_keys:
                kept["info"] = self._info_columns([infos[j] for j in rows], every[rows])
            buffer.add(kept, env_ids=every[rows])
        buffer.truncate_unfinished(env_ids=every[cut])  # type: ignore[attr-defined]

    def _info_columns(self, infos: Sequence[Mapping[str, Any]], env_ids: np.ndarray) -> dict:
        """``{key: [N, ...] array}`` of the stored info keys from one step's infos."""
        out = {}
        for key in self.info_keys:
            try:
                out[key] = np.asarray([info[key] for info in infos])
            except (KeyError, TypeError):
                j = next((j for j, info in enumerate(infos)
                          if not isinstance(info, Mapping) or key not in info), None)  # fmt: skip
                if j is None:  # every step has the key: the values themselves failed
                    raise
                have = sorted(infos[j]) if isinstance(infos[j], Mapping) else infos[j]
                raise ConfigError(
                    f"info key {key!r} is missing from the step info of env {int(env_ids[j])} of "
                    f"{self.env_name} (its info: {have}); stored info keys (info_keys, "
                    "env.info_keys, views of info.<key>) must be reported by every step"
                ) from None
        return out

    def _check_views(self) -> None:
        """Refuse to collect when the policy's acting views are no longer those this collector
        was built with: the histories it keeps per env (and the ``view_`` columns of its
        buffer) are for those, so new ones would silently never reach ``forward``."""
        if not self._viewing:
            return
        requirements = self.policy.view_requirements
        if not requirements and not self._acting_views:
            return  # the common case, checked per collect: nothing declared then or now
        now = acting_requirements(requirements)
        if now != self._acting_views:
            raise ConfigError(
                "the policy's acting views changed after this collector was built ("
                f"{describe_change(self._acting_views, now)}); a collector keeps per-env "
                "histories for the views it was built with, so set policy.view_requirements "
                "before building the Collector (or build a new one). Views for training only "
                "(used_for_acting=False) may change at any time"
            )

    # -- episode bookkeeping ------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """Reset every env and forget partial episodes and recurrent state."""
        seed = self._seed if seed is None else seed
        # episodes cut here must not link to the fresh ones in the buffer: end them as
        # truncated, which is also what they are (their obs_next is still a valid bootstrap)
        if self._obs is not None and self._buffer_abilities.episode_cut:
            self.buffer.truncate_unfinished()
        self._obs, infos = self.envs.reset(seed=seed)
        if not self._masked and _info_has_mask(infos):
            raise ConfigError(
                f"env {self.env_name!r} reports action masks in its info['action_mask'], which "
                "the policy would not see; add the wrapper "
                "'rlblocks.contracts:ActionMaskFromInfo' to env.wrappers, which moves the mask "
                "into the observation where every masking algorithm reads it"
            )
        if not math.isfinite(self._obs_total(self._obs)):
            self._nonfinite(np.arange(self.num_envs), self._obs, None, "reset")
        if self._obs_inside is not None and not self._obs_inside(self._obs):
            self._outside(np.arange(self.num_envs), self._obs, "reset")
        if self._views is not None:
            self._views.begin_episode(np.arange(self.num_envs), self._obs)
        self._seed = None  # seed once; later resets continue the envs' own RNG streams
        self._state = None
        self._ep_return[:] = 0
        self._ep_len[:] = 0

    # -- resuming -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What continuing this collector exactly needs: its random stream, counters and the
        envs' snapshots with the episodes in progress (observations, partial returns,
        recurrent state, acting-view histories). When an env cannot be snapshotted, ``envs``
        is None and ``why`` says which layer: a resumed run then restarts the episodes.

        Values are numpy arrays and plain Python values (see ``checkpoint.to_plain``)."""
        out: dict[str, Any] = {
            "rng": self._rng.bit_generator.state,
            "seed": self._seed,
            "random_block": self._random_block,
            "random_next": self._random_next,
            "total_steps": self.total_steps,
            "total_episodes": self.total_episodes,
            "env_steps": self._env_steps,
            "envs": None,
            "why": "",
        }
        blocker = self._why_no_snapshot()
        snapshots = not blocker and self.env_abilities.snapshots
        entries = self.envs.snapshot() if snapshots else None
        if entries is None:
            backend = type(_unwrapped_venv(self.envs)).__name__
            out["why"] = blocker or f"the {backend} backend cannot snapshot its envs"
            return out
        missing = [e.get("why") or "no snapshot" for e in entries if e.get("env") is None]
        if missing:
            out["why"] = missing[0]
            return out
        out["envs"] = entries
        out["episodes"] = {
            "obs": self._obs,
            "state": to_numpy_tree(self._state) if self._state is not None else None,
            "state_is_tensor": _first_leaf_is_tensor(self._state),
            "ep_return": self._ep_return,
            "ep_len": self._ep_len,
            "views": dict(self._views.history) if self._views is not None else None,
        }
        return out

    def load_state_dict(self, state: dict[str, Any]) -> str:
        """Continue from :meth:`state_dict`: the random stream and counters always; the envs
        and their episodes when they were snapshotted. Returns "" when the episodes continue,
        else why they restart (from a seed drawn from the continued stream, so a resumed run
        is still reproducible)."""
        self._rng.bit_generator.state = dict(state["rng"])
        self._seed = state["seed"]
        block = state.get("random_block")
        self._random_block = None if block is None else np.asarray(block)
        self._random_next = int(state.get("random_next", 0))
        self.total_steps = int(state.get("total_steps", 0))
        self.total_episodes = int(state.get("total_episodes", 0))
        if state.get("env_steps") is not None:
            self._env_steps = np.asarray(state["env_steps"], dtype=np.int64).copy()
        entries = state.get("envs")
        if entries is not None:
            if not self.env_abilities.snapshots:
                entries = None
                why = f"the {type(_unwrapped_venv(self.envs)).__name__} backend cannot restore envs"
            else:
                self.envs.restore(entries)
        else:
            why = str(state.get("why") or "the envs were not snapshotted")
        if entries is None:
            self._restart_episodes()
            return why
        episodes = state["episodes"]
        self._obs = episodes["obs"]
        saved = episodes.get("state")
        if saved is not None and episodes.get("state_is_tensor", True):
            saved = _as_torch_tree(saved, self._policy_abilities.device)
        self._state = saved
        self._ep_return = np.asarray(episodes["ep_return"], dtype=np.float64).copy()
        self._ep_len = np.asarray(episodes["ep_len"], dtype=np.int64).copy()
        views = episodes.get("views")
        if self._views is not None and views:
            for column, hist in self._views.history.items():
                if column in views:
                    copy_history(hist, views[column])
        return ""

    def _why_no_snapshot(self) -> str:
        """Why the envs cannot be snapshotted right now ("" when they can)."""
        return ""

    def _restart_episodes(self) -> None:
        """Start every env afresh at the next collect, seeded from the collector's stream."""
        if self._obs is not None or self._seed is None:
            self._seed = int(self._rng.integers(2**31 - 1))
        self._obs = None
        self._state = None

    def restart_episodes(self, seed: int) -> None:
        """Start every env afresh at the next collect with ``seed`` (a resumed run whose
        checkpoint has no collector state)."""
        self._seed = int(seed)
        self._obs = None
        self._state = None

    def _random_actions(self, n: int, obs: Any = None) -> np.ndarray:
        """``n`` uniformly random actions for the observations ``obs``: among the legal ones
        when they carry an action mask. Otherwise a step of every env takes the next row of a
        block drawn for up to ``_RANDOM_BLOCK`` steps at once: one generator call per block
        instead of one per step (a call costs nearly a tenth of a CartPole step of 8 envs)."""
        if self._masked:
            return random_legal_actions(action_mask_of(obs), self.action_space, self._rng)
        if n != self.num_envs or not self._uniform_actions:
            return self._draw_actions((n,))
        i, block = self._random_next, self._random_block
        if block is None or i == len(block):
            block = self._random_block = self._draw_actions((self._block_steps, n))
            i = 0
        self._random_next = i + 1
        return block[i]  # each row is handed out once, so callers may keep or change it

    def _draw_actions(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniformly random actions ``[*shape, *action_shape]`` in env units (from each
        dimension's ``start`` for discrete spaces); other spaces than Discrete, MultiDiscrete and
        bounded Box sample one action at a time (``shape`` is then ``(n,)``)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return space.start + self._rng.integers(space.n, size=shape)
        if isinstance(space, gym.spaces.MultiDiscrete):
            pick = self._rng.integers(space.nvec, size=(*shape, *space.shape))
            return (pick + space.start).astype(space.dtype)
        if self._uniform_actions:  # a Box with finite bounds
            return self._rng.uniform(space.low, space.high, size=(*shape, *space.shape)).astype(
                space.dtype
            )
        return np.stack([space.sample() for _ in range(shape[0])])

    def _end_step(
        self,
        ids: np.ndarray,
        rew: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        obs_next: Any,
        tally: EpisodeTally,
        made_up: np.ndarray = NO_IDS,
        infos: Any = None,
    ) -> np.ndarray:
        """Book one step of envs ``ids``: episode sums; for finished episodes their return and
        length, a recurrent-state reset, and either an env reset (its first obs written into
        ``obs_next``) or, once enough episodes were started, retirement. Returns retired ids.

        ``ids`` may be ``self._all_ids`` (a step of every env in id order): the sums then
        update whole arrays instead of gathering and scattering rows. Rows ``made_up`` are a
        restarted worker's made-up steps (truncated): they never happened, so they are not
        counted as steps, and the episodes they cut short are not counted as finished (in
        ``n_episode`` mode another episode is started in their place). ``infos``: the step's
        infos (one per row), whose ``"outcome"`` at an episode's end is counted (games)."""
        every = ids is self._all_ids
        tally.steps += len(ids)
        if every:
            self._ep_return += rew
            self._ep_len += 1
            self._env_steps += 1
        else:
            self._ep_return[ids] += rew
            self._ep_len[ids] += 1
            self._env_steps[ids] += 1
        if len(made_up):
            self._uncount(ids[made_up], rew[made_up], tally)
        done = terminated | truncated
        if not np.count_nonzero(done):
            return NO_IDS
        rows = np.flatnonzero(done)
        finished = rows if every else ids[rows]
        counted = finished
        if len(made_up):
            counted = finished[~np.isin(rows, made_up)]
            if tally.n_episode is not None:  # cut short: another episode may start instead
                tally.started -= len(finished) - len(counted)
        tally.episodes += len(counted)
        if infos is not None and isinstance(infos, list | tuple):
            counted_rows = rows if len(made_up) == 0 else rows[~np.isin(rows, made_up)]
            for r in counted_rows:
                count_outcome(tally.outcomes, infos[r])
        tally.returns.append(self._ep_return[counted])  # fancy indexing copies
        tally.lengths.append(self._ep_len[counted])
        self._ep_return[finished] = 0
        self._ep_len[finished] = 0
        if self._state is not None:
            self._state = reset_state_rows(self._state, finished)
        if tally.n_episode is not None:
            # start no more episodes than were asked for: the rest of these envs retire
            restart = max(0, min(len(finished), tally.n_episode - tally.started))
            tally.started += restart
            keep_rows, retired = rows[:restart], finished[restart:]
        elif tally.closing:
            keep_rows, retired = rows[:0], finished
        else:
            keep_rows, retired = rows, NO_IDS
        if len(keep_rows):
            keep = ids[keep_rows] if len(keep_rows) < len(finished) else finished
            reset_obs, _ = self.envs.reset(keep)
            if not math.isfinite(self._obs_total(reset_obs)):
                self._nonfinite(keep, reset_obs, None, "reset")
            if type(obs_next) is np.ndarray:
                obs_next[keep_rows] = reset_obs
            else:
                put_rows(obs_next, keep_rows, reset_obs)
            if self._views is not None:
                self._views.begin_episode(keep, reset_obs)
        return retired

    def _call_on_step(
        self,
        ids: np.ndarray,
        obs: Any,
        env_act: Any,
        rew: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        obs_next: Any,
        infos: Any,
        made_up: np.ndarray,
        steps_before: int,
    ) -> None:
        """Call :attr:`on_step` for each env of one vector step, in env id order, with that
        env's row of every array (``obs_next`` is the step's own next observation, before an
        ended episode's reset replaces it); a restarted worker's made-up steps are left out."""
        on_step = self.on_step
        skip = set(made_up.tolist()) if len(made_up) else ()
        step = self.total_steps + steps_before
        for row, env_id in enumerate(ids.tolist()):
            if row in skip:
                continue
            step += 1
            info = infos[row] if isinstance(infos, Sequence) and row < len(infos) else {}
            on_step(  # type: ignore[misc]
                step, env_id, take_rows(obs, row), take_rows(env_act, row), rew[row],
                bool(terminated[row]), bool(truncated[row]), take_rows(obs_next, row), info,
            )  # fmt: skip

    def _uncount(self, env_ids: np.ndarray, rew: np.ndarray, tally: EpisodeTally) -> None:
        """Take back the booking of made-up steps of envs ``env_ids`` (see :meth:`_end_step`)."""
        tally.steps -= len(env_ids)
        self._ep_return[env_ids] -= rew
        self._ep_len[env_ids] -= 1
        self._env_steps[env_ids] -= 1

    def _state_of_random_step(
        self, obs: Any, views: Any, active: np.ndarray, all_active: bool
    ) -> Any:
        """For a recurrent policy (one whose ``forward`` returns a ``state``) filling a buffer of
        sequences, a random step (warm-up) still runs the policy on the observation, so the
        state goes on across the episode and what the policy stores with each step (R2D2's
        stored state) is there for random steps too; the action stays random. Returns the
        policy output to store (None for a policy without state, found on the first random
        step and not run again)."""
        state = (
            self._state if all_active or self._state is None else take_rows(self._state, active)
        )
        batch = Batch(obs=obs)
        if views is not None:
            batch.update(views)
        result = self.policy(batch, state)
        new_state = result.get("state", None)
        self._keeps_state = new_state is not None
        if new_state is None:
            return None
        if self._state is None or all_active:
            self._state = new_state
        else:
            put_rows(self._state, active, new_state)
        return result.get("policy", None)

    def _check_first_step(self, ids: np.ndarray, obs_next: Any) -> None:
        """The first step's observations must lie in a Discrete / MultiDiscrete space."""
        self._first_step_checked = True
        if self._obs_inside is not None and not self._obs_inside(obs_next):
            self._outside(ids, obs_next, "step")

    def _outside(self, ids: np.ndarray, obs: Any, call: str) -> None:
        """Raise ConfigError naming the env whose Discrete / MultiDiscrete observation lies
        outside its observation space (below its ``start``, or past its last value)."""
        space = self.envs.observation_space
        arr = np.asarray(obs).reshape(len(ids), -1)
        inside = _discrete_bounds(space)
        assert inside is not None
        row = next((j for j in range(len(ids)) if not inside(arr[j])), 0)
        raise ConfigError(
            f"env {self.env_name!r} at index {int(ids[row])} returned the observation "
            f"{arr[row].tolist()} from {call}(), outside its observation space {space}; fix the "
            "env (or its observation space's start and n) so that they agree"
        )

    def _nonfinite(self, ids: np.ndarray, obs: Any, rew: np.ndarray | None, call: str) -> None:
        """Raise NonFiniteError naming the env whose reward or float observation is NaN or
        infinite (called when the batch's sum is not finite)."""
        rows = ~_finite_rows(obs, len(ids))
        what = "observation"
        rew_ok = np.ones(len(ids), dtype=bool) if rew is None else _finite_rows(rew, len(ids))
        if not rew_ok.all():
            rows, what = ~rew_ok, "reward"
        if not rows.any():  # a sum or square of large values overflowed; every value is finite
            return
        bad = ids[rows].tolist()
        others = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        got = (
            f"the reward {rew[rows][0]}"  # type: ignore[index]
            if what == "reward"
            else "an observation with NaN or infinite values"
        )
        raise NonFiniteError(
            f"env {self.env_name!r} at index {bad[0]}{others} returned {got} from {call}(); "
            "fix the env or wrap it (env.wrappers) so that it returns finite values"
        )

    # -- the loop ----------------------------------------------------------------------------
    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        random: bool = False,
        render: float | None = None,
        *,
        exact: bool = False,
        fragment: int | None = None,
        complete_episodes: bool = False,
    ) -> CollectStats:
        """Collect env steps in one of RLlib's batch modes, or ``n_episode`` whole episodes.

        * ``n_step``: truncate-episodes mode. Every env steps each round, so this collects at
          least ``n_step`` steps (rounded up to whole rounds); ``exact=True`` collects exactly
          ``n_step``, the last round stepping only the envs that have stepped least.
          Episodes in progress continue into the next call.
        * ``fragment=L``: exactly ``L`` steps of every env (RLlib's ``rollout_fragment_length``;
          ``L * num_envs`` steps in all).
        * ``n_step`` with ``complete_episodes=True``: whole episodes only, at least ``n_step``
          steps: every env starts a fresh episode, and once ``n_step`` steps are reached no new
          episode starts while the running ones play to their ends.
        * ``n_episode``: exactly that many whole episodes.

        ``random`` uses uniformly random actions (warm-up). ``render`` renders every env and
        sleeps that many seconds per step.
        """
        for name, value in (("n_step", n_step), ("n_episode", n_episode), ("fragment", fragment)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | np.integer)
            ):
                unit = "episodes" if name == "n_episode" else "steps"
                raise ConfigError(
                    f"{name} must be a whole number of {unit} (an int), got {value!r}"
                )
        if fragment is not None:
            if n_step is not None or n_episode is not None:
                raise ValueError("pass fragment alone: it sets the number of steps itself")
            if fragment <= 0:
                raise ValueError(f"fragment must be positive, got {fragment}")
            n_step, exact = int(fragment) * self.num_envs, True
        if (n_step is None) == (n_episode is None):
            raise ValueError("pass exactly one of n_step, fragment or n_episode")
        if n_step is not None and n_step <= 0:
            raise ValueError(f"n_step must be positive, got {n_step}")
        if n_episode is not None and n_episode <= 0:
            raise ValueError(f"n_episode must be positive, got {n_episode}")
        if complete_episodes and (n_step is None or exact):
            raise ValueError(
                "complete_episodes takes n_step (the least number of steps) and collects whole "
                "episodes, so it cannot be exact; for a number of episodes pass n_episode"
            )
        self._check_views()
        start = time.perf_counter()
        if n_episode is not None or complete_episodes or self._obs is None:
            self.reset()
        policy, envs, buffer = self.policy, self.envs, self.buffer
        num_envs = self.num_envs

        # Complete-episodes mode: start at most n_episode episodes, one per env at first.
        # While every env is active, ``active`` is ``self._all_ids``: the env, the buffer and
        # _end_step then take whole-array fast paths.
        if n_episode is not None and n_episode < num_envs:
            active = np.arange(n_episode)
        else:
            active = self._all_ids
        tally = EpisodeTally(n_episode, started=len(active) if n_episode is not None else 0)
        all_active = active is self._all_ids
        obs_total = self._obs_total
        use_policy = not random
        explore = self.exploration and policy is not None and policy.training
        # random training steps still feed a policy's running observation statistics (SimBa's)
        observe = getattr(policy, "observe", None) if random and explore else None

        with torch.inference_mode():
            while True:
                left = -1 if n_step is None else n_step - tally.steps
                if exact and left < len(active):  # the last round: the envs that stepped least
                    fewest = np.argsort(self._env_steps[active], kind="stable")
                    active = np.sort(active[fewest[:left]])
                    all_active = False
                elif complete_episodes and left <= len(active):
                    tally.closing = True  # this round makes the steps: episodes ending retire
                obs = self._obs if all_active else take_rows(self._obs, active)
                views = None if self._views is None else self._views.build(active)
                policy_out = None
                if use_policy:
                    state = (
                        self._state
                        if all_active or self._state is None
                        else take_rows(self._state, active)
                    )
                    batch = Batch(obs=obs)
                    if views is not None:
                        batch.update(views)
                    result = policy(batch, state)
                    act = to_numpy(result.act)
                    if explore:
                        act = policy.exploration_noise(act, result)
                    env_act = policy.map_action(act)
                    new_state = result.get("state", None)
                    if new_state is not None:
                        if self._state is None or all_active:
                            self._state = new_state
                        else:
                            put_rows(self._state, active, new_state)
                    policy_out = result.get("policy", None)
                else:
                    env_act = self._random_actions(len(active), obs)
                    if observe is not None:
                        observe(obs)
                    if policy is not None and self._keeps_state is not False:
                        policy_out = self._state_of_random_step(obs, views, active, all_active)
                    act = policy.map_action_inverse(env_act) if policy is not None else env_act
                    if policy is not None and self._policy_abilities.quantized_actions:
                        env_act = policy.map_action(act)  # the grid action the buffer stores
                obs_next, rew, terminated, truncated, _info = envs.step(
                    env_act, None if all_active else active
                )
                # one reduction per array finds a NaN or inf reward or observation before the
                # buffer (see _array_total)
                if not math.isfinite(obs_total(obs_next) + vdot(rew, rew)):
                    self._nonfinite(active, obs_next, rew, "step")
                if not self._first_step_checked:
                    self._check_first_step(active, obs_next)
                made_up = restarted_rows(_info) if self._may_restart else NO_IDS
                if self.on_step is not None:  # before _end_step writes reset obs into obs_next
                    self._call_on_step(
                        active, obs, env_act, rew, terminated, truncated, obs_next, _info,
                        made_up, tally.steps,
                    )  # fmt: skip
                if buffer is not None:
                    data = {
                        "obs": obs,
                        "act": act,
                        "rew": rew,
                        "terminated": terminated,
                        "truncated": truncated,
                        "obs_next": obs_next,
                    }
                    if policy_out is not None and self._store_policy:
                        data["policy"] = to_numpy_tree(policy_out)
                    if views is not None:  # training reads back what acting saw
                        data.update(self._views.for_buffer(views))  # type: ignore[union-attr]
                    if self._may_restart:  # info keys read there, made-up steps left out
                        self._store_steps(data, None if all_active else active, _info, made_up)
                    else:
                        if self.info_keys:
                            data["info"] = self._info_columns(_info, active)
                        buffer.add(data, env_ids=None if all_active else active)
                if render:
                    envs.render(active)  # type: ignore[attr-defined]
                    time.sleep(render)
                if self._views is not None:
                    self._views.record(active, act, rew, obs_next)
                retired = self._end_step(
                    active, rew, terminated, truncated, obs_next, tally, made_up, _info
                )
                if all_active:
                    self._obs = obs_next
                else:
                    put_rows(self._obs, active, obs_next)
                if len(retired):
                    active = active[~np.isin(active, retired)]
                    all_active = False
                if complete_episodes:
                    if len(active) == 0:
                        break
                elif n_step is not None and tally.steps >= n_step:
                    break
                if n_episode is not None and (tally.episodes >= n_episode or len(active) == 0):
                    break

        if n_episode is not None or complete_episodes:
            # envs that sat idle hold stale observations: the next collect starts afresh
            self._obs = None
        self.total_steps += tally.steps
        self.total_episodes += tally.episodes
        return tally.stats(time.perf_counter() - start)






# -- small array helpers (obs may be an array or a dict/tuple tree of arrays) -----------------
class TupleObsAsDict:
    """A vector env whose Tuple observations come back as dicts keyed ``"0"``, ``"1"``, ...;
    everything else is the wrapped env's."""

    def __init__(self, envs: Any) -> None:
        self.wrapped = envs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        obs, infos = self.wrapped.reset(*args, **kwargs)
        return tuples_as_dicts(obs), infos

    def step(self, *args: Any, **kwargs: Any) -> Any:
        obs, *rest = self.wrapped.step(*args, **kwargs)
        return (tuples_as_dicts(obs), *rest)

    def step_wait(self, *args: Any, **kwargs: Any) -> Any:
        ids, obs, *rest = self.wrapped.step_wait(*args, **kwargs)
        return (ids, tuples_as_dicts(obs), *rest)


def _info_has_mask(infos: Any) -> bool:
    """Whether reset infos (one dict per env, or a dict of per-env columns) carry an
    ``action_mask``."""
    if isinstance(infos, Mapping):
        return ACTION_MASK_KEY in infos
    if isinstance(infos, Sequence) and infos and isinstance(infos[0], Mapping):
        return ACTION_MASK_KEY in infos[0]
    return False


def _float_total_of(space: gym.Space) -> Callable[[Any], float]:
    """How to sum the float entries of observations of ``space``."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return _array_total
    if isinstance(space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return _no_floats
    return _float_sum


def _array_total(x: Any) -> float:
    """A number that is NaN or infinite when an entry of the float array ``x`` is: its dot
    product with itself, which BLAS computes in half the time of a sum. It also overflows for
    entries beyond about 1e19 (float32); the exact per-row check then finds nothing to report."""
    return vdot(x, x) if type(x) is np.ndarray else _float_sum(x)


def _no_floats(_x: Any) -> float:
    return 0.0


def _float_sum(x: Any) -> float:
    """The sum of every float entry of an array or a dict of arrays: NaN or infinite when one
    of them is (or, rarely, when a float32 sum overflows); other dtypes add nothing."""
    if isinstance(x, np.ndarray):
        return float(x.sum()) if x.dtype.kind == "f" else 0.0
    if isinstance(x, dict | Batch):
        return sum((_float_sum(v) for v in x.values()), 0.0)
    return 0.0


def _finite_rows(x: Any, n: int) -> np.ndarray:
    """Whether each of the ``n`` rows of an array or dict of arrays is all finite."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "fc":
        return np.isfinite(x.reshape(n, -1)).all(axis=1)
    ok = np.ones(n, dtype=bool)
    if isinstance(x, dict | Batch):
        for v in x.values():
            ok &= _finite_rows(v, n)
    return ok


def _unwrapped_venv(envs: Any) -> Any:
    return envs.wrapped if isinstance(envs, TupleObsAsDict) else envs


def _first_leaf_is_tensor(x: Any) -> bool:
    while isinstance(x, dict | Batch) and len(x):
        x = next(iter(x.values()))
    return isinstance(x, torch.Tensor)


def _as_torch_tree(x: Any, device: Any) -> Any:
    """A recurrent state saved as arrays, back as tensors on the policy's device."""
    if isinstance(x, dict):
        return {k: _as_torch_tree(v, device) for k, v in x.items()}
    return torch.as_tensor(x, device=device)


def _vector_env_of_one(env: gym.Env | gym.vector.VectorEnv) -> VectorEnv:
    """As in Tianshou, one gymnasium env is welcome: it runs as a ``dummy`` vector env of one
    (built through the registry like any backend). A gymnasium vector env is refused: it
    autoresets, so a transition could span two episodes."""
    if isinstance(env, gym.vector.VectorEnv):
        raise ConfigError(
            f"env is a gymnasium vector env ({type(env).__name__}); rlblocks' vector envs reset "
            "finished envs themselves instead of autoresetting, so pass what it was made from "
            "to rlblocks.make_vector_env (an env id, an env factory or a list of factories)"
        )
    return get_registry("env").load("dummy")([lambda: env])
