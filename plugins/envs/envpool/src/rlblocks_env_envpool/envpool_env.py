"""The EnvPool backend: EnvPool's C++ envs behind the VectorEnv protocol.

EnvPool resets a finished env by itself on the step after its episode ended. This backend never
lets that happen: stepping a finished env without ``reset(env_ids)`` is refused (as every
rlblocks backend does), so no transition can span two episodes. For speed it drives the pool's
C++ binding directly and starts each finished env's reset as the step that finished it returns
(see :class:`EnvPoolVectorEnv`); the caller's ``reset(env_ids)`` collects it.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from attrs import define

from rlblocks.collect import VectorEnvBase, as_env_ids
from rlblocks.contracts import ConfigError, EnvWorkerError

#: Wrappers ``gymnasium.make`` adds by itself; any other wrapper changes what the env returns,
#: which EnvPool's C++ env would not reproduce.
_MAKE_WRAPPERS = {"TimeLimit", "OrderEnforcing", "PassiveEnvChecker", "EnvCompatibility"}


def env_id_of(env_fn: Callable[[], gym.Env]) -> tuple[str, dict[str, Any]]:
    """The gymnasium id and ``make`` keyword arguments of the env ``env_fn`` builds; a
    ConfigError when the env has no id or carries wrappers of its own."""
    env = env_fn()
    try:
        spec = env.spec
        if spec is None or not spec.id:
            raise ConfigError(
                "the envpool backend needs envs made from a gymnasium id (gymnasium.make); this "
                "env has no spec; use the dummy or shmem backend for it"
            )
        extra = []
        layer: Any = env
        while isinstance(layer, gym.Wrapper):
            name = type(layer).__name__
            if name not in _MAKE_WRAPPERS:
                extra.append(name)
            layer = layer.env
        if extra:
            raise ConfigError(
                f"the envpool backend rebuilds {spec.id!r} in C++ and cannot apply the wrappers "
                f"{extra}; use the dummy or shmem backend, or drop the wrappers"
            )
        return spec.id, dict(spec.kwargs or {})
    finally:
        env.close()


def envpool_ids() -> set[str]:
    """Every env id EnvPool provides."""
    import envpool

    return set(envpool.list_all_envs())


def is_cheap(env_id: str) -> bool:
    """Whether ``env_id`` is one of gymnasium's classic-control envs, whose step costs well
    under a microsecond: there EnvPool's thread hand-off per call outweighs the stepping."""
    try:
        entry = str(gym.spec(env_id).entry_point)
    except gym.error.Error:
        return False
    return entry.startswith("gymnasium.envs.classic_control")


def provides(env_fn: Callable[[], gym.Env]) -> bool:
    """Whether ``auto`` should run the env ``env_fn`` builds on EnvPool: EnvPool has its id
    (made without extra wrappers) and it is not a classic-control env. For those, 8 CartPole
    envs stepped at about the same rate in-process as through EnvPool's own loop
    (contrib/benchmarks/env_backends.py), and the in-process backend skips the reset calls."""
    try:
        env_id, _ = env_id_of(env_fn)
    except ConfigError:
        return False
    return env_id in envpool_ids() and not is_cheap(env_id)


def default_threads(env_id: str, num_envs: int) -> int:
    """EnvPool threads when none are asked for: one for classic control (a second thread only
    adds hand-offs: 8 CartPole envs stepped at 37 us per call on one thread, 62 us on EnvPool's
    default), else one per env up to the cores this process may use."""
    if is_cheap(env_id):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(num_envs, cores))


@define(frozen=True)
class BindingLayout:
    """Where a pool's C++ binding puts what a step returns (positions in the list ``_recv()``
    returns), and the dtype and per-env shape of its one action array."""

    obs: int
    reward: int
    done: int
    trunc: int
    action_dtype: np.dtype
    action_shape: tuple[int, ...]


def binding_layout(pool: Any) -> BindingLayout | None:
    """The layout of ``pool``'s binding when the backend can drive it directly, else None.

    EnvPool's ``step`` and ``reset`` are its binding's ``_send``/``_reset`` and ``_recv`` wrapped
    in Python that converts the arrays to a gymnasium tuple. On cheap envs that wrapper costs as
    much as the C++ work (8 CartPole envs on one thread: 85 us a step through it, 44 us through
    the binding, measured here), so the backend calls the binding itself. It does so only for
    the layout it knows: action keys ``env_id, players.env_id, action``, one player per env, one
    ``obs`` array; any other pool, or an EnvPool without these names, goes through the public
    interface."""
    try:
        state = list(pool._state_keys)
        actions = list(pool._action_keys)
        action_spec = pool._spec._action_spec
        players = pool.config.get("max_num_players", 1)
        for name in ("_send", "_recv", "_reset"):
            getattr(pool, name)
    except (AttributeError, TypeError, KeyError):
        return None
    if actions != ["env_id", "players.env_id", "action"] or players != 1:
        return None
    if any(k.startswith("obs:") for k in state):
        return None
    try:
        pos = {k: state.index(k) for k in ("obs", "reward", "done", "trunc")}
        dtype = np.dtype(action_spec[2][0])
        shape = tuple(int(d) for d in action_spec[2][1])
    except (ValueError, IndexError, TypeError):
        return None
    if shape[:1] == (-1,):  # the batch axis
        shape = shape[1:]
    return BindingLayout(
        obs=pos["obs"], reward=pos["reward"], done=pos["done"], trunc=pos["trunc"],
        action_dtype=dtype, action_shape=shape,
    )


_NO_ENVS = np.zeros(0, dtype=np.int32)


class EnvPoolVectorEnv(VectorEnvBase):
    """``len(env_fns)`` envs of one gymnasium id, stepped by EnvPool's thread pool.

    Where the pool's C++ binding has the layout :func:`binding_layout` knows, the backend calls
    it directly, and starts the reset of every env that ends an episode as the step that ended
    it returns: EnvPool's threads, still awake from the step, reset those envs while the caller
    works, and the caller's ``reset(env_ids)`` then only collects their first observations. A
    reset started this way is invisible to the caller: a finished env keeps refusing steps
    until ``reset(env_ids)``, and no transition spans two episodes. (EnvPool's threads sleep
    after a few microseconds without work, and waking them costs a round trip's worth again;
    a separate reset call per finished env is what made this backend 0.6x EnvPool's own loop
    on CartPole.) Any other pool goes through EnvPool's gymnasium interface.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_threads: int = 0,
        thread_affinity_offset: int = -1,
    ) -> None:
        import envpool

        if len(env_fns) == 0:
            raise ValueError("EnvPoolVectorEnv needs at least one env factory")
        env_id, kwargs = env_id_of(env_fns[0])
        if env_id not in envpool_ids():
            raise ConfigError(
                f"EnvPool {envpool.__version__} does not provide {env_id!r}; use another backend "
                "(rlblocks list env) or an id from envpool.list_all_envs()"
            )
        max_steps = kwargs.pop("max_episode_steps", None)
        self.env_id = env_id
        self.num_envs = len(env_fns)
        options: dict[str, Any] = dict(kwargs)
        if max_steps is not None:
            options["max_episode_steps"] = int(max_steps)
        options["num_threads"] = int(num_threads) or default_threads(env_id, self.num_envs)
        if thread_affinity_offset >= 0:
            options["thread_affinity_offset"] = int(thread_affinity_offset)
        self._options = options
        self._pool = self._make_pool(seed=None)
        with warnings.catch_warnings():  # EnvPool's float64 Box bounds become float32 here
            warnings.simplefilter("ignore", UserWarning)
            self.observation_space: gym.Space = self._pool.observation_space
            self.action_space: gym.Space = self._pool.action_space
        self._all_ids = np.arange(self.num_envs, dtype=np.int32)
        self._needs_reset = np.ones(self.num_envs, dtype=bool)
        self._resetting = _NO_ENVS  # envs whose reset was sent to EnvPool and not received yet
        self._fresh = np.zeros(self.num_envs, dtype=bool)  # reset, first obs in _fresh_obs
        self._fresh_obs: np.ndarray | None = None
        self._closed = False

    def _make_pool(self, seed: int | None) -> Any:
        """A new pool; EnvPool seeds env ``i`` with ``seed + i`` when the pool is made and
        takes no seed in ``reset``, so seeding means a new pool."""
        import envpool

        options = dict(self._options)
        if seed is not None:
            options["seed"] = int(seed)
        with warnings.catch_warnings():  # EnvPool's float64 Box bounds become float32 here
            warnings.simplefilter("ignore", UserWarning)
            try:
                pool = envpool.make_gymnasium(self.env_id, num_envs=self.num_envs, **options)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise ConfigError(
                    f"EnvPool could not build {self.env_id!r} with {options}: {exc}; EnvPool "
                    "takes other keyword arguments than gymnasium.make for some envs"
                ) from exc
        self._layout = binding_layout(pool)
        return pool

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
        if env_ids is None:
            return self._all_ids
        return as_env_ids(env_ids, self.num_envs).astype(np.int32)

    def _recv_started_resets(self) -> tuple[np.ndarray, np.ndarray]:
        """The envs whose reset the last step started, and their first observations."""
        resetting, self._resetting = self._resetting, _NO_ENVS
        try:
            return resetting, self._pool._recv()[self._layout.obs]
        except Exception as exc:
            raise EnvWorkerError(
                f"EnvPool raised in reset of envs {resetting.tolist()}: {exc!r}"
            ) from exc

    def _receive_resets(self) -> None:
        """Receive the resets started at the end of the last step; keep their observations."""
        resetting, obs = self._recv_started_resets()
        if self._fresh_obs is None:
            self._fresh_obs = np.empty((self.num_envs, *obs.shape[1:]), dtype=obs.dtype)
        self._fresh_obs[resetting] = obs
        self._fresh[resetting] = True

    def reset(
        self,
        env_ids: Sequence[int] | np.ndarray | None = None,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, list[dict]]:
        """Reset the given envs; an int ``seed`` seeds env ``i`` with ``seed + i``.

        EnvPool seeds only when a pool is made: a seeded reset of all envs makes a new pool
        (``seed`` an int, or the list ``[s, s + 1, ...]``); seeding a subset of the envs, or with
        other seeds, is refused with that reason."""
        ids = self._ids(env_ids)
        resetting = self._resetting
        if seed is None and len(resetting) == len(ids) and (resetting == ids).all():
            # what the collector does: reset the envs that the last step finished
            _, obs = self._recv_started_resets()
            self._needs_reset[ids] = False
            return obs, [{} for _ in range(len(ids))]
        if len(resetting):
            self._receive_resets()
        if seed is not None:
            base = int(seed) if isinstance(seed, int | np.integer) else int(next(iter(seed)))
            wanted = [base + int(i) for i in ids]
            given = wanted if isinstance(seed, int | np.integer) else [int(s) for s in seed]
            if given != wanted or len(ids) != self.num_envs or base < 0:
                raise EnvWorkerError(
                    f"EnvPool seeds a whole pool at once (env i gets seed + i), so it cannot seed "
                    f"envs {ids.tolist()} with {given}; reset all envs with one int seed"
                )
            self._pool.close()
            self._pool = self._make_pool(base)
            self._fresh[:] = False
        fresh = self._fresh[ids]
        n_fresh = np.count_nonzero(fresh)
        if n_fresh == len(ids):
            obs = self._fresh_obs[ids]
        elif n_fresh == 0:
            obs = self._reset_call(ids)
        else:
            called = self._reset_call(ids[~fresh])
            obs = np.empty((len(ids), *called.shape[1:]), dtype=called.dtype)
            obs[fresh] = self._fresh_obs[ids[fresh]]
            obs[~fresh] = called
        self._fresh[ids] = False
        self._needs_reset[ids] = False
        return obs, [{} for _ in range(len(ids))]

    def _reset_call(self, ids: np.ndarray) -> Any:
        """First observations of ``ids`` from one EnvPool reset call."""
        layout = self._layout
        try:
            if layout is None:
                return self._pool.reset(ids)[0]
            self._pool._reset(ids)
            return self._pool._recv()[layout.obs]
        except Exception as exc:
            raise EnvWorkerError(
                f"EnvPool raised in reset of envs {ids.tolist()}: {exc!r}"
            ) from exc

    def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Step the given envs with ``actions[j]`` for ``env_ids[j]``; no autoreset."""
        ids = self._ids(env_ids)
        acts = np.asarray(actions)
        if len(acts) != len(ids):
            raise ValueError(f"got {len(acts)} actions for {len(ids)} envs")
        waiting = self._needs_reset if ids is self._all_ids else self._needs_reset[ids]
        if np.count_nonzero(waiting):
            raise EnvWorkerError(
                f"envs {ids[waiting].tolist()} finished their episode or were never reset; "
                "call reset(env_ids) first"
            )
        layout = self._layout
        if layout is None:
            try:
                obs, rew, terminated, truncated, _ = self._pool.step(acts, ids)
            except Exception as exc:
                raise EnvWorkerError(
                    f"EnvPool raised in step of envs {ids.tolist()}: {exc!r}"
                ) from exc
            done = terminated | truncated
            if np.count_nonzero(done):
                self._needs_reset[ids[done]] = True
        else:
            if acts.shape[1:] != layout.action_shape:
                # the binding reads the buffer as it is: a wrong shape must never reach it
                raise ValueError(
                    f"actions of shape {acts.shape} for {len(ids)} envs; {self.env_id} takes "
                    f"actions of shape {layout.action_shape} each"
                )
            if len(self._resetting):
                self._receive_resets()
            try:
                self._pool._send([ids, ids, acts.astype(layout.action_dtype, copy=False)])
                state = self._pool._recv()
                obs, rew = state[layout.obs], state[layout.reward]
                done, truncated = state[layout.done], state[layout.trunc]
                if np.count_nonzero(done):
                    terminated = done & ~truncated
                    finished = ids[done]
                    self._needs_reset[finished] = True
                    self._pool._reset(finished)  # received by reset(), or by the next step
                    self._resetting = finished
                else:  # EnvPool's done is terminated or truncated: all False here
                    terminated = done
            except Exception as exc:
                raise EnvWorkerError(
                    f"EnvPool raised in step of envs {ids.tolist()}: {exc!r}"
                ) from exc
        return (
            obs,
            rew.astype(np.float64),
            np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool),
            [{} for _ in range(len(ids))],
        )

    def close(self) -> None:
        """Release the pool; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        if len(self._resetting):  # a batch EnvPool is still writing must not outlive the pool
            with contextlib.suppress(Exception):
                self._pool._recv()
        self._pool.close()
