"""The AsyncCollector: like :class:`~rlblocks.collect.Collector`, but never waits for the
slowest env.

It sends actions with ``envs.step_async(act, env_ids)`` and takes back whichever envs are ready
with ``envs.step_wait(wait_num, timeout) -> (env_ids, obs, rew, terminated, truncated, infos)``.
Only those envs' results are used: the observation each acted on, its action, policy output and
trajectory views are kept per env id from the moment the action was sent, so rows never mix envs.
Finished envs are reset by the collector itself (no transition spans two episodes), then act
again. Each env's view history (:class:`~rlblocks.contracts.ActingViews`) advances only when its own
step comes back, so a policy sees, per env, the same views as with the synchronous collector
whatever order the envs finish in.

Hot loop (R = envs ready this round, in ``step_wait``'s order)::

    obs[R], views[R] -> policy -> act[R] -> step_async(act, R) ... step_wait() -> ids [R'],
    obs_next [R'] -> buffer.add(obs[ids], act[ids], rew, ..., obs_next, views[ids], env_ids=ids)
    -> view histories of ids advance -> reset finished ids -> they are ready again

Backends without ``step_async`` (the in-process one) are collected synchronously, as by
:class:`~rlblocks.collect.Collector`.

Not bit-reproducible for a seed: which envs are back at each round depends on timing, and with
it the order of the stored steps and of the exploration draws (a run with
``trainer.async_collect`` warns once). What is exact is a checkpoint taken after :meth:`drain`.

An ``n_step`` collect returns with some envs' steps still in flight; the next collect takes them
back. :meth:`AsyncCollector.drain` takes them back now (storing their transitions), so the envs
can be reset or stepped by someone else, such as a synchronous collector.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlblocks.collect._collector import Collector
from rlblocks.collect._rows import (
    NO_IDS,
    restarted_rows,
    rows_like,
    rows_like_state,
    to_numpy,
    to_numpy_tree,
    vdot,
)
from rlblocks.collect._stats import CollectStats, EpisodeTally
from rlblocks.contracts import AsyncVectorEnv, Batch, Buffer, VectorEnv, put_rows, take_rows


class AsyncCollector(Collector):
    """Collects with asynchronous stepping: each round uses only the envs that are ready.

    ``wait_num`` and ``timeout`` are passed to ``step_wait`` (None: the backend's own defaults).
    Episodes finish in whatever order the envs run, so with ``n_step`` a call may return a
    little past ``n_step``, and envs still running stay in flight into the next call (or until
    :meth:`drain`).
    """

    def __init__(
        self,
        policy: Any,
        envs: VectorEnv,
        buffer: Buffer | None = None,
        exploration: bool = True,
        seed: int | None = None,
        wait_num: int | None = None,
        timeout: float | None = None,
        frame_stack: int = 1,
        info_keys: Sequence[str] = (),
    ) -> None:
        super().__init__(
            policy, envs, buffer, exploration=exploration, seed=seed, frame_stack=frame_stack,
            info_keys=info_keys,
        )  # fmt: skip
        self.wait_num = wait_num
        self.timeout = timeout
        self.is_async = isinstance(envs, AsyncVectorEnv)
        self._flying = np.zeros(self.num_envs, dtype=bool)  # sent, result not taken yet
        self._ready = np.arange(self.num_envs)  # may act now
        self._act_rows: Any = None  # [num_envs, ...] action each env was sent
        self._policy_rows: Any = None  # [num_envs, ...] policy output stored with it
        self._view_rows: dict[str, np.ndarray] | None = None  # [num_envs, ...] views stored

    def _discard_in_flight(self) -> None:
        """Take back (and drop) every step in flight, so all envs can be reset."""
        while self._flying.any():
            ids, *_ = self.envs.step_wait(wait_num=self.num_envs)  # type: ignore[attr-defined]
            self._flying[ids] = False

    @property
    def in_flight(self) -> np.ndarray:
        """Ids of the envs whose step was sent and not taken back yet."""
        return np.flatnonzero(self._flying)

    def drain(self) -> CollectStats:
        """Wait for every step still in flight and store it as a collect would: its transition
        goes into the buffer, its episode's return counts, an env whose episode ended is reset.
        Afterwards no env has a step in flight, so the envs can be reset, snapshotted or stepped
        by another collector; the next :meth:`collect` acts for every env from its latest
        observation. Returns what the drained steps did (also added to ``total_steps`` and
        ``total_episodes``; a trainer does not see them). Nothing in flight: empty stats."""
        start = time.perf_counter()
        tally = EpisodeTally(None, started=0)
        if self.is_async and self._flying.any():
            wait = self.envs.step_wait  # type: ignore[attr-defined]
            with torch.inference_mode():
                while self._flying.any():
                    ids, obs_next, rew, terminated, truncated, infos = wait(
                        int(np.count_nonzero(self._flying)), self.timeout
                    )
                    keep = self._take_back(ids, obs_next, rew, terminated, truncated, infos,
                                           tally, None)  # fmt: skip
                    self._ready = np.concatenate([self._ready, keep])
        self.total_steps += tally.steps
        self.total_episodes += tally.episodes
        return tally.stats(time.perf_counter() - start)

    def reset(self, seed: int | None = None) -> None:
        """Reset every env and forget partial episodes, recurrent state and steps in flight
        (dropped; :meth:`drain` first to keep them)."""
        if self.is_async:
            self._discard_in_flight()
        super().reset(seed)
        self._ready = np.arange(self.num_envs)

    def _why_no_snapshot(self) -> str:
        if np.count_nonzero(self._flying):
            return "steps were in flight when the checkpoint was taken"
        return ""

    def load_state_dict(self, state: dict[str, Any]) -> str:
        self._flying[:] = False
        self._ready = np.arange(self.num_envs)
        return super().load_state_dict(state)

    def _act(self, ready: np.ndarray, use_policy: bool, explore: bool) -> Any:
        """Choose actions for ``ready`` and remember them (and the policy output and the views
        the buffer stores) per env."""
        obs = take_rows(self._obs, ready)
        policy = self.policy
        policy_out = None
        views = None if self._views is None else self._views.build(ready)
        if views is not None and self._views.stored:  # type: ignore[union-attr]
            stored = self._views.for_buffer(views)  # type: ignore[union-attr]
            if self._view_rows is None:
                self._view_rows = {k: rows_like(v, self.num_envs) for k, v in stored.items()}
            for key, value in stored.items():
                self._view_rows[key][ready] = value
        if use_policy:
            state = None if self._state is None else take_rows(self._state, ready)
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
                if self._state is None:
                    self._state = rows_like_state(new_state, self.num_envs)
                put_rows(self._state, ready, new_state)
            policy_out = result.get("policy", None)
        else:
            env_act = self._random_actions(len(ready), obs)
            act = policy.map_action_inverse(env_act) if policy is not None else env_act
            if policy is not None and self._policy_abilities.quantized_actions:
                env_act = policy.map_action(act)  # the grid action the buffer stores
        act = np.asarray(act)
        if self._act_rows is None:
            self._act_rows = rows_like(act, self.num_envs)
        self._act_rows[ready] = act
        if policy_out is not None and self._store_policy:
            tree = to_numpy_tree(policy_out)
            if self._policy_rows is None:
                self._policy_rows = rows_like(tree, self.num_envs)
            put_rows(self._policy_rows, ready, tree)
        else:
            self._policy_rows = None
        return env_act

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
        """Collect at least ``n_step`` env steps, or exactly ``n_episode`` whole episodes,
        acting for each env as soon as its previous step is back. The other batch modes of
        :meth:`Collector.collect` (``exact``, ``fragment``, ``complete_episodes``) need
        envs that step together: they are the synchronous collector's."""
        if not self.is_async:
            return super().collect(
                n_step=n_step, n_episode=n_episode, random=random, render=render, exact=exact,
                fragment=fragment, complete_episodes=complete_episodes,
            )
        if exact or fragment is not None or complete_episodes:
            raise ValueError(
                "exact, fragment and complete_episodes collects step envs together; with "
                "asynchronous envs (wait_num / timeout) collect n_step or n_episode, or use the "
                "synchronous Collector"
            )
        if (n_step is None) == (n_episode is None):
            raise ValueError("pass exactly one of n_step or n_episode")
        if (n_step is not None and n_step <= 0) or (n_episode is not None and n_episode <= 0):
            raise ValueError(f"n_step / n_episode must be positive, got {n_step} / {n_episode}")
        self._check_views()
        start = time.perf_counter()
        if n_episode is not None or self._obs is None:
            self.reset()
        envs = self.envs
        ready = self._ready
        if n_episode is not None:
            ready = ready[: min(self.num_envs, n_episode)]
        tally = EpisodeTally(n_episode, started=len(ready) if n_episode is not None else 0)
        use_policy = not random
        explore = self.exploration and self.policy is not None and self.policy.training

        with torch.inference_mode():
            while True:
                if len(ready):
                    env_act = self._act(ready, use_policy, explore)
                    envs.step_async(env_act, ready)  # type: ignore[attr-defined]
                    self._flying[ready] = True
                    ready = ready[:0]
                ids, obs_next, rew, terminated, truncated, infos = envs.step_wait(  # type: ignore[attr-defined]
                    self.wait_num, self.timeout
                )
                ready = self._take_back(ids, obs_next, rew, terminated, truncated, infos, tally,
                                        render)  # fmt: skip
                if n_step is not None and tally.steps >= n_step:
                    break
                if n_episode is not None and not self._flying.any() and not len(ready):
                    break
                if n_episode is not None and tally.episodes >= n_episode:
                    break

        self._ready = ready
        if n_episode is not None:
            self._discard_in_flight()
            self._obs = None
        self.total_steps += tally.steps
        self.total_episodes += tally.episodes
        return tally.stats(time.perf_counter() - start)

    def _take_back(
        self,
        ids: np.ndarray,
        obs_next: Any,
        rew: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        infos: Any,
        tally: EpisodeTally,
        render: float | None,
    ) -> np.ndarray:
        """Store the steps of envs ``ids`` that ``step_wait`` returned, book them, reset envs
        whose episode ended; returns the ids that may act again (not retired)."""
        self._flying[ids] = False
        # the synchronous loop's check: a NaN or inf reward or observation is named
        if not math.isfinite(self._obs_total(obs_next) + vdot(rew, rew)):
            self._nonfinite(ids, obs_next, rew, "step")
        buffer = self.buffer
        made_up = restarted_rows(infos) if self._may_restart else NO_IDS
        if buffer is not None:
            data = {
                "obs": take_rows(self._obs, ids),
                "act": self._act_rows[ids],
                "rew": rew,
                "terminated": terminated,
                "truncated": truncated,
                "obs_next": obs_next,
            }
            if self._policy_rows is not None:
                data["policy"] = take_rows(self._policy_rows, ids)
            if self._view_rows is not None:
                data.update({k: v[ids] for k, v in self._view_rows.items()})
            if self._may_restart:  # info keys read there, made-up steps left out
                self._store_steps(data, ids, infos, made_up)
            else:
                if self.info_keys:
                    data["info"] = self._info_columns(infos, ids)
                buffer.add(data, env_ids=ids)
        if render:
            self.envs.render(ids)  # type: ignore[attr-defined]
            time.sleep(render)
        if self._views is not None:  # before _end_step restarts finished episodes
            self._views.record(ids, self._act_rows[ids], rew, obs_next)
        retired = self._end_step(
            ids, rew, terminated, truncated, obs_next, tally, made_up, infos
        )
        put_rows(self._obs, ids, obs_next)
        return ids[~np.isin(ids, retired)] if len(retired) else ids



