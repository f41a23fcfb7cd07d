"""Conformance checks for vector-env backends (the :class:`rlblocks.contracts.VectorEnv` contract).

A backend's test suite calls::

    from rlblocks.testing import check_vector_env
    from rlblocks_env_mybackend import MyVectorEnv

    def test_conforms():
        check_vector_env(MyVectorEnv)

The checks run the backend on small probe envs whose observations reveal which env produced them,
how many steps it took, which action it last received, how often it was reset and its seed, so a
wrong order, a lost action, a hidden autoreset or a shared seed shows up as a plain assert.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.contracts import AsyncVectorEnv, EnvWorkerError, VectorEnv

# Observation layout of a probe env: one float64 vector of these fields.
_INDEX, _T, _RESETS, _LAST_ACTION, _NOISE = range(5)
_NUM_ACTIONS = 7


class ProbeEnv(gym.Env):
    """Env ``index`` of a probe batch; its episode ends after ``2 + index`` steps, terminated for an
    even ``index`` and truncated for an odd one.

    Observation ``[index, t, resets, last_action, noise]``: ``t`` counts steps in the episode,
    ``resets`` counts resets over the env's life, ``noise`` is drawn from the env's RNG at reset (so
    it identifies the seed). Reward is ``10 * index + t``. ``render()`` gives a 2x2 RGB frame
    filled with ``10 * index + t``; ``tag`` is a plain attribute for ``get_attr``/``set_attr``.
    Module-level so subprocess backends can pickle its factories.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012 (gymnasium's)
    render_mode = "rgb_array"
    tag = 0.0

    def __init__(self, index: int) -> None:
        self.index = index
        self.length = 2 + index
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(5,), dtype=np.float64)
        self.action_space = gym.spaces.Discrete(_NUM_ACTIONS)
        self._state = np.zeros(5, dtype=np.float64)
        self._state[_INDEX] = index
        self._resets = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._resets += 1
        self._state[_T] = 0
        self._state[_RESETS] = self._resets
        self._state[_LAST_ACTION] = -1
        self._state[_NOISE] = self.np_random.random()
        return self._state.copy(), {"index": self.index}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._state[_T] += 1
        self._state[_LAST_ACTION] = int(action)
        t = int(self._state[_T])
        done = t >= self.length
        terminated = done and self.index % 2 == 0
        truncated = done and self.index % 2 == 1
        return self._state.copy(), float(10 * self.index + t), terminated, truncated, {}

    def render(self) -> np.ndarray:
        return np.full((2, 2, 3), 10 * self.index + int(self._state[_T]), dtype=np.uint8)

    def snapshot_state(self) -> dict[str, Any]:
        """Plain values a resumed run restores (see :mod:`rlblocks.collect`)."""
        return {"state": self._state.copy(), "resets": self._resets}

    def restore_state(self, state: dict[str, Any]) -> None:
        self._state = np.array(state["state"], dtype=np.float64)
        self._resets = int(state["resets"])


class FailingProbeEnv(ProbeEnv):
    """A probe env whose second step raises :class:`ProbeEnvFailure` (what a broken env does)."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._state[_T] >= 1:
            raise ProbeEnvFailure(f"probe env {self.index} failed on purpose")
        return super().step(action)


class ProbeEnvFailure(RuntimeError):
    """Raised inside :class:`FailingProbeEnv`; a backend reports it as ``EnvWorkerError``."""


def probe_env_fns(num_envs: int) -> list[Callable[[], gym.Env]]:
    """Picklable factories of ``num_envs`` probe envs (env ``i`` is ``ProbeEnv(i)``)."""
    return [functools.partial(ProbeEnv, i) for i in range(num_envs)]


def _obs_array(obs: Any, expected_rows: int, what: str) -> np.ndarray:
    array = np.asarray(obs)
    assert array.shape == (expected_rows, 5), (
        f"{what}: obs should be stacked as [len(env_ids), *obs_shape] = {(expected_rows, 5)}, "
        f"got shape {array.shape}"
    )
    return array


def _check_infos(infos: Any, expected: int, what: str) -> None:
    assert isinstance(infos, Sequence) and len(infos) == expected, (
        f"{what}: infos should be a list of {expected} dicts (one per env in env_ids order), got "
        f"{type(infos).__name__} of length {len(infos) if hasattr(infos, '__len__') else '?'}"
    )
    assert all(isinstance(i, dict) for i in infos), f"{what}: every info should be a dict"


def _check_rows(obs: np.ndarray, env_ids: Sequence[int], what: str) -> None:
    got = obs[:, _INDEX].astype(int).tolist()
    assert got == list(env_ids), (
        f"{what}: results must come back in env_ids order {list(env_ids)}, but the rows came from "
        f"envs {got}"
    )


def _check_step(
    result: Any, env_ids: Sequence[int], actions: np.ndarray | None, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    assert isinstance(result, tuple) and len(result) == 5, (
        f"{what}: step should return (obs, rew, terminated, truncated, infos), got "
        f"{type(result).__name__} of length {len(result) if hasattr(result, '__len__') else '?'}"
    )
    obs_raw, rew, terminated, truncated, infos = result
    n = len(env_ids)
    obs = _obs_array(obs_raw, n, what)
    _check_rows(obs, env_ids, what)
    rew = np.asarray(rew)
    assert rew.shape == (n,), f"{what}: rew should have shape ({n},), got {rew.shape}"
    assert np.issubdtype(rew.dtype, np.floating), f"{what}: rew should be float, got {rew.dtype}"
    for name, flags in (("terminated", terminated), ("truncated", truncated)):
        assert isinstance(flags, np.ndarray), (
            f"{what}: {name} should be a numpy array, got {type(flags).__name__}"
        )
        assert flags.dtype == np.bool_, f"{what}: {name} should have dtype bool, got {flags.dtype}"
        assert flags.shape == (n,), f"{what}: {name} should have shape ({n},), got {flags.shape}"
    _check_infos(infos, n, what)
    fresh = [int(i) for i in obs[obs[:, _T] == 0, _INDEX]]
    assert not fresh, (
        f"{what}: env(s) {fresh} returned the first observation of a new episode from step(); "
        "a backend must not autoreset (the caller resets finished envs)"
    )
    sent = None if actions is None else np.asarray(actions).tolist()
    got = obs[:, _LAST_ACTION].astype(int).tolist()
    assert sent is None or got == sent, (
        f"{what}: env_ids {list(env_ids)} were sent actions {sent} (in env_ids order) but "
        f"received {got}; actions[k] must go to env env_ids[k]"
    )
    expected_rew = (10 * obs[:, _INDEX] + obs[:, _T]).tolist()
    assert np.allclose(rew, expected_rew), f"{what}: rewards {rew.tolist()} != {expected_rew}"
    return obs, rew, terminated, truncated


def check_vector_env(
    make_env: Callable[[list[Callable[[], gym.Env]]], VectorEnv], num_envs: int = 4
) -> None:
    """Assert that the backend ``make_env(env_fns)`` builds follows the VectorEnv protocol.

    ``make_env`` receives a list of zero-argument env factories (picklable) and returns the
    backend, e.g. the backend class itself. Checks ``num_envs`` and the spaces; reset of all envs
    and of a subset (list or array ``env_ids``, results in ``env_ids`` order); step of all and of a
    subset; reward, ``terminated`` and ``truncated`` shapes and dtypes; no autoreset (a finished
    env keeps its terminal observation until the caller resets it); ``reset(seed=s)`` seeding env
    ``i`` with ``s + i``; ``close()`` twice; the context manager when the backend has one; that
    an env raising in ``step`` reaches the caller as :class:`~rlblocks.contracts.EnvWorkerError`
    naming the env and the env's own error; and the optional abilities the backend has: with
    ``snapshot``/``restore``, that a restored twin continues every episode exactly (the envs'
    ``needs_reset`` flags included); with ``step_async``/``step_wait``
    (:class:`~rlblocks.contracts.AsyncVectorEnv`), that ready envs come back with their own ids,
    each result once, and can step again while the others run; with ``render``, ``get_attr`` and
    ``set_attr``, that they reach the envs named by ``env_ids``, in that order.
    Stepping an env whose episode ended, without resetting it, may raise; it must not reset it.
    Raises AssertionError with a message saying which rule broke.
    """
    assert num_envs >= 4, "check_vector_env needs num_envs >= 4 to test subsets"
    env = make_env(probe_env_fns(num_envs))
    try:
        _check_basics(env, num_envs)
        _check_reset(env, num_envs)
        _check_step_and_no_autoreset(env, num_envs)
        _check_seeding(env, num_envs)
        _check_render_and_attributes(env, num_envs)
        _check_bad_env_ids(env, num_envs)
    finally:
        env.close()
    env.close()  # a second close must be harmless
    if callable(getattr(env, "snapshot", None)):
        _check_snapshots(make_env, num_envs)
    if isinstance(env, AsyncVectorEnv):
        _check_async(make_env, num_envs)
    _check_env_error(make_env, num_envs)

    if hasattr(env, "__enter__"):
        with make_env(probe_env_fns(num_envs)) as entered:
            assert entered is not None, "__enter__ should return the vector env"
            obs, _ = entered.reset()
            _obs_array(obs, num_envs, "reset inside a with block")
        entered.close()  # closing after __exit__ closed it must be harmless too


def _check_bad_env_ids(env: VectorEnv, num_envs: int) -> None:
    """Ids that would step an env twice, read a mask as ids, truncate floats, leave the range
    or name no env are refused (before any env moves), on every backend alike."""
    env.reset()
    bad = {
        "twice": ([1, 1], (ValueError,)),
        "a boolean mask": (np.arange(num_envs) % 2 == 0, (TypeError,)),
        "floats": (np.array([1.9]), (TypeError,)),
        "out of range": ([num_envs], (IndexError,)),
        "negative": ([-1], (IndexError,)),
        "empty": ([], (ValueError,)),
    }
    for what, (ids, errors) in bad.items():
        n = len(np.atleast_1d(ids)) if np.asarray(ids).dtype != bool else num_envs
        for call, args in (("step", (_actions(range(n), 1),)), ("reset", ())):
            try:
                getattr(env, call)(*args, env_ids=ids)
            except errors:
                continue
            except Exception as exc:  # the wrong kind of error is the finding
                raise AssertionError(
                    f"{call}(env_ids={ids!r}) ({what}) raised {type(exc).__name__}: {exc}; "
                    f"expected {errors[0].__name__} (rlblocks.collect.as_env_ids)"
                ) from exc
            raise AssertionError(f"{call}(env_ids={ids!r}) ({what}) was accepted")
    obs, *_ = env.step(_actions(range(num_envs), 1))  # nothing moved: every env at step 1
    assert (_obs_array(obs, num_envs, "step after refused ids")[:, _T] == 1).all(), (
        "a refused env_ids call moved an env"
    )


def _check_basics(env: VectorEnv, num_envs: int) -> None:
    assert env.num_envs == num_envs, f"num_envs is {env.num_envs}, built from {num_envs} env_fns"
    probe = ProbeEnv(0)
    assert env.observation_space == probe.observation_space, (
        f"observation_space should be the space of one env, {probe.observation_space}, "
        f"got {env.observation_space}"
    )
    assert env.action_space == probe.action_space, (
        f"action_space should be the space of one env, {probe.action_space}, got {env.action_space}"
    )


def _actions(env_ids: Sequence[int], offset: int) -> np.ndarray:
    """Distinct actions per env, so a misrouted action is visible."""
    return (np.asarray(env_ids, dtype=np.int64) + offset) % _NUM_ACTIONS


def _check_reset(env: VectorEnv, num_envs: int) -> None:
    all_ids = list(range(num_envs))
    obs_raw, infos = env.reset()
    obs = _obs_array(obs_raw, num_envs, "reset()")
    _check_rows(obs, all_ids, "reset()")
    _check_infos(infos, num_envs, "reset()")
    assert (obs[:, _T] == 0).all(), "reset(): every env should be at step 0"
    resets = obs[:, _RESETS].copy()

    subset = [num_envs - 1, 0]
    for ids in (subset, np.asarray(subset)):
        label = f"reset(env_ids={ids!r})"
        obs_raw, infos = env.reset(env_ids=ids)
        obs = _obs_array(obs_raw, len(subset), label)
        _check_rows(obs, subset, label)
        _check_infos(infos, len(subset), label)
        assert (obs[:, _RESETS] == resets[subset] + 1).all(), f"{label}: each env must reset once"
        resets[subset] += 1

    # Stepping everything shows every env's reset count: only the subset may have been reset.
    obs, *_ = _check_step(env.step(_actions(all_ids, 1)), all_ids, _actions(all_ids, 1), "step()")
    for i in all_ids:
        assert obs[i, _RESETS] == resets[i], (
            f"env {i} was reset {int(obs[i, _RESETS] - resets[i])} extra time(s); reset(env_ids) "
            "must reset only the envs in env_ids"
        )


def _check_step_and_no_autoreset(env: VectorEnv, num_envs: int) -> None:
    all_ids = list(range(num_envs))
    obs_raw, _ = env.reset()
    resets = _obs_array(obs_raw, num_envs, "reset()")[:, _RESETS].copy()

    # Env 0 ends (terminated) on its 2nd step, env 1 (truncated) on its 3rd, env i on step 2 + i.
    _, _, terminated, truncated = _check_step(
        env.step(_actions(all_ids, 2)), all_ids, _actions(all_ids, 2), "step() 1"
    )
    assert not (terminated.any() or truncated.any()), "step() 1: no probe episode ends this early"
    obs, _, terminated, truncated = _check_step(
        env.step(_actions(all_ids, 3)), all_ids, _actions(all_ids, 3), "step() 2"
    )
    expected_term = [i == 0 for i in all_ids]
    assert terminated.tolist() == expected_term and not truncated.any(), (
        f"step() 2: expected terminated={expected_term} and no truncation, got "
        f"terminated={terminated.tolist()} truncated={truncated.tolist()}"
    )
    assert obs[0, _T] == 2 and obs[0, _RESETS] == resets[0], (
        "step() 2: env 0 terminated, so its obs must be the terminal observation, not the first "
        "observation of a new episode: the backend must not autoreset"
    )

    # Subsets in a new order, as a list and as an array, leaving out the finished envs.
    ids = [2, 1]
    obs, _, terminated, truncated = _check_step(
        env.step(_actions(ids, 4), ids), ids, _actions(ids, 4), f"step(env_ids={ids})"
    )
    assert truncated.tolist() == [False, True] and not terminated.any(), (
        f"step(env_ids={ids}): env 1 (odd index) ends truncated on its 3rd step, env 2 goes on; "
        f"got terminated={terminated.tolist()} truncated={truncated.tolist()}"
    )
    ids_array = np.asarray([3, 2])
    obs, _, terminated, truncated = _check_step(
        env.step(_actions(ids_array, 5), ids_array), [3, 2], _actions(ids_array, 5),
        f"step(env_ids={ids_array!r})",
    )
    assert terminated.tolist() == [False, True] and not truncated.any(), (
        f"step(env_ids={ids_array!r}): env 2 ends terminated on its 4th step, env 3 goes on; got "
        f"terminated={terminated.tolist()} truncated={truncated.tolist()}"
    )

    # Stepping a finished env without resetting it: a backend may refuse (raise), but it must not
    # quietly start a new episode.
    try:
        result = env.step(_actions([0], 6), [0])
    except Exception:
        pass
    else:
        obs, *_ = _check_step(result, [0], _actions([0], 6), "step(env_ids=[0]) after env 0 ended")
        assert obs[0, _RESETS] == resets[0], (
            "step(env_ids=[0]) after env 0 ended: the env was reset without the caller asking; a "
            "backend must never reset an env behind the caller's back"
        )

    # The caller resets the finished envs: exactly one reset each, back to step 0.
    finished = [0, 1, 2]
    obs_raw, _ = env.reset(env_ids=finished)
    obs = _obs_array(obs_raw, 3, f"reset(env_ids={finished}) after their episodes ended")
    assert (obs[:, _T] == 0).all() and (obs[:, _RESETS] == resets[finished] + 1).all(), (
        f"reset(env_ids={finished}) after their episodes ended: each must have been reset exactly "
        f"once, now, back to step 0 (resets before {resets[finished].tolist()}, after "
        f"{obs[:, _RESETS].tolist()})"
    )


def _check_seeding(env: VectorEnv, num_envs: int) -> None:
    seed = 123
    obs_raw, _ = env.reset(seed=seed)
    noise = _obs_array(obs_raw, num_envs, f"reset(seed={seed})")[:, _NOISE].copy()
    assert len(set(noise.tolist())) == num_envs, (
        f"reset(seed={seed}) gave several envs the same RNG state; env i must get seed + i"
    )
    expected = [ProbeEnv(i).reset(seed=seed + i)[0][_NOISE] for i in range(num_envs)]
    assert noise.tolist() == expected, (
        f"reset(seed={seed}) must seed env i with {seed} + i (the VectorEnv protocol)"
    )
    env.step(_actions(range(num_envs), 6))
    obs_raw, _ = env.reset(seed=seed)
    again = _obs_array(obs_raw, num_envs, f"second reset(seed={seed})")[:, _NOISE]
    assert again.tolist() == noise.tolist(), (
        f"reset(seed={seed}) twice gave different observations; seeding must be reproducible"
    )


def _check_snapshots(
    make_env: Callable[[list[Callable[[], gym.Env]]], VectorEnv], num_envs: int
) -> None:
    env = make_env(probe_env_fns(num_envs))
    twin = make_env(probe_env_fns(num_envs))
    try:
        env.reset(seed=11)
        env.step(_actions(range(num_envs), 1))
        env.step(_actions(range(num_envs), 2))  # env 0 ends its episode here (2 steps)
        snaps = env.snapshot()  # type: ignore[attr-defined]
        assert len(snaps) == num_envs, f"snapshot() gave {len(snaps)} entries for {num_envs} envs"
        assert all(s.get("env") is not None for s in snaps), (
            f"snapshot() could not snapshot the probe envs: {[s.get('why') for s in snaps]}"
        )
        assert snaps[0]["needs_reset"] and not snaps[-1]["needs_reset"], (
            "snapshot() must report needs_reset for an env whose episode ended"
        )
        twin.restore(snaps)  # type: ignore[attr-defined]
        rest = list(range(1, num_envs))
        for offset in (3,):  # env 1 (3 steps long) ends here as well
            a = env.step(_actions(rest, offset), rest)
            b = twin.step(_actions(rest, offset), rest)
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), (
                "a restored twin must step exactly like the snapshotted envs"
            )
        a_obs, _ = env.reset([0])
        b_obs, _ = twin.reset([0])
        assert np.array_equal(a_obs, b_obs), "a restored env must continue its random stream"
        subset = [num_envs - 1, 1]
        part = env.snapshot(subset)  # type: ignore[attr-defined]
        assert [int(p["env"]["layers"][-1]["state"]["state"][_INDEX]) for p in part] == subset, (
            "snapshot(env_ids) must answer in env_ids order"
        )
    finally:
        env.close()
        twin.close()


def _check_render_and_attributes(env: VectorEnv, num_envs: int) -> None:
    """``render``/``get_attr``/``set_attr``, for a backend that has them."""
    subset = [num_envs - 1, 0]
    tagged = [num_envs - 1, 0, 1]
    if callable(getattr(env, "render", None)):
        env.reset()
        env.step(_actions(range(num_envs), 1))
        frames = env.render(subset)  # type: ignore[attr-defined]
        got = [int(np.asarray(f).reshape(-1)[0]) for f in frames]
        assert got == [10 * i + 1 for i in subset], (
            f"render({subset}) should give those envs' frames in env_ids order (probe frames "
            f"read 10 * index + t: {[10 * i + 1 for i in subset]}), got {got}"
        )
    if callable(getattr(env, "get_attr", None)):
        got = env.get_attr("index")  # type: ignore[attr-defined]
        assert list(got) == list(range(num_envs)), (
            f"get_attr('index') should read every env's attribute in env order, got {got}"
        )
    if callable(getattr(env, "set_attr", None)) and callable(getattr(env, "get_attr", None)):
        env.set_attr("tag", 1.5, [1])  # type: ignore[attr-defined]
        got = env.get_attr("tag", tagged)  # type: ignore[attr-defined]
        assert list(got) == [0.0, 0.0, 1.5], (
            f"set_attr('tag', 1.5, [1]) should change env 1 only: get_attr('tag', "
            f"{tagged}) gave {got}, expected [0.0, 0.0, 1.5]"
        )


def _check_async(
    make_env: Callable[[list[Callable[[], gym.Env]]], VectorEnv], num_envs: int
) -> None:
    """``step_async``/``step_wait``: every result once, with its own env id, whatever order the
    envs finish in; ready envs step again while the others are in flight."""
    env: Any = make_env(probe_env_fns(num_envs))
    try:
        env.reset()
        env.step_async(_actions(range(num_envs), 1))
        seen: dict[int, list[int]] = {i: [] for i in range(num_envs)}

        def take(result: Any, what: str) -> list[int]:
            assert isinstance(result, tuple) and len(result) == 6, (
                f"{what}: step_wait should return (env_ids, obs, rew, terminated, truncated, "
                f"infos), got {type(result).__name__} of length "
                f"{len(result) if hasattr(result, '__len__') else '?'}"
            )
            ids = [int(i) for i in np.asarray(result[0]).reshape(-1)]
            if not ids:
                return ids
            obs, *_ = _check_step(result[1:], ids, None, what)
            for i, t, a in zip(ids, obs[:, _T].astype(int), obs[:, _LAST_ACTION].astype(int)):
                assert a == (i + t) % _NUM_ACTIONS, (
                    f"{what}: env {i} at its step {t} received action {a}, not the one sent to "
                    "it; step_async's actions[k] must go to env_ids[k]"
                )
                assert t not in seen[i], f"{what}: env {i}'s step {t} came back twice"
                seen[i].append(int(t))
            return ids

        ready = take(env.step_wait(wait_num=1), "first")
        assert ready, "step_wait(wait_num=1) returned no env"
        ready = [i for i in ready if i != 0]  # env 0's episode ends at its 2nd step
        if ready:
            env.step_async(_actions(ready, 2), ready)
        expected = {i: [1, 2] if i in ready else [1] for i in range(num_envs)}
        for _ in range(1000):
            if seen == expected:
                break
            take(env.step_wait(), "step_wait")
        assert seen == expected, (
            f"after step_async of every env and then of the ready envs {ready}, step_wait gave "
            f"these steps per env: {seen}; expected {expected}"
        )
        env.reset()
        _check_step(
            env.step(_actions(range(num_envs), 3)), list(range(num_envs)),
            _actions(range(num_envs), 3), "step after step_wait",
        )  # fmt: skip
    finally:
        env.close()


def _check_env_error(
    make_env: Callable[[list[Callable[[], gym.Env]]], VectorEnv], num_envs: int
) -> None:
    """An env that raises in ``step`` is reported as ``EnvWorkerError`` naming it."""
    fns = probe_env_fns(num_envs)
    fns[1] = functools.partial(FailingProbeEnv, 1)
    env = make_env(fns)
    try:
        env.reset()
        env.step(_actions(range(num_envs), 1))
        try:
            env.step(_actions(range(num_envs), 2))
        except EnvWorkerError as err:
            text = str(err)
            assert re.search(r"\benv 1\b", text), (
                f"EnvWorkerError should name the env that raised ('env 1'): {text!r}"
            )
            assert "probe env 1 failed on purpose" in text, (
                f"EnvWorkerError should carry the env's own error message: {text!r}"
            )
        except Exception as err:  # the check reports what came instead
            raise AssertionError(
                f"an env raising in step should reach the caller as rlblocks.errors."
                f"EnvWorkerError (naming the env), got {type(err).__name__}: {err}"
            ) from err
        else:
            raise AssertionError("an env raised in step but step() returned without an error")
    finally:
        env.close()
