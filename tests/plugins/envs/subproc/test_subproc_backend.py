"""The multi-process backends (subproc, and shmem which reuses its workers): conformance,
seeding, async stepping, faults and clean shutdown."""

from __future__ import annotations

import functools
import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.collect import AsyncCollector, Collector
from rlblocks.contracts import ConfigError, EnvWorkerError
from rlblocks.replay import ReplayBuffer
from rlblocks.testing.env_checks import ProbeEnv, check_vector_env, probe_env_fns
from rlblocks_env_shmem.shmem import ShmemVectorEnv
from rlblocks_env_subproc.subproc import SubprocVectorEnv, default_split

BACKENDS = {"subproc": SubprocVectorEnv, "shmem": ShmemVectorEnv}
#: Where 4 envs live: two workers, or envs 0-1 in the calling process and 2-3 in one worker.
LAYOUTS = {"workers": {"num_workers": 2, "local_envs": 0},
           "local": {"num_workers": 1, "local_envs": 2}}


@pytest.mark.parametrize(
    ("context", "num_workers"), [("fork", 2), ("spawn", 3), ("forkserver", 1)]
)
def test_subproc_passes_conformance_kit(context: str, num_workers: int) -> None:
    check_vector_env(
        functools.partial(SubprocVectorEnv, num_workers=num_workers, context=context)
    )


def test_subproc_with_local_envs_passes_conformance_kit() -> None:
    check_vector_env(functools.partial(SubprocVectorEnv, num_workers=1, local_envs=2))
    check_vector_env(functools.partial(SubprocVectorEnv, num_workers=2, local_envs=1))


def test_num_workers_defaults_to_cores_and_envs_share_workers() -> None:
    cores = len(os.sched_getaffinity(0))
    with SubprocVectorEnv(probe_env_fns(5), local_envs=0) as envs:
        assert envs.num_workers == min(5, cores) and envs.local_envs == 0
        assert len(set(envs.worker_pids)) == envs.num_workers
    with SubprocVectorEnv(probe_env_fns(5), num_workers=9) as envs:
        assert envs.num_workers == 5 and envs.local_envs == 0, "explicit workers: no local envs"
    with SubprocVectorEnv(probe_env_fns(5)) as envs:
        assert (envs.num_workers, envs.local_envs) == default_split(5, cores=cores)
        assert len(set(envs.worker_pids)) == envs.num_workers
        assert os.getpid() not in envs.worker_pids


def test_default_split_isolates_every_env_in_a_worker() -> None:
    assert default_split(8, cores=2) == (2, 0)
    assert default_split(3, cores=8) == (3, 0), "at most one worker per env"
    assert default_split(8, num_workers=1, cores=2) == (1, 0)
    with SubprocVectorEnv(probe_env_fns(3)) as envs:
        assert envs.local_envs == 0 and os.getpid() not in envs.worker_pids


def test_speed_split_gives_the_parent_one_cores_share() -> None:
    def split(n: int, **options: Any) -> tuple[int, int]:
        return default_split(n, local_envs=options.pop("local_envs", None), **options)

    assert split(8, cores=2) == (1, 5), "the workers' round trip counts as one env"
    assert split(7, cores=2) == (1, 4)
    assert split(16, cores=4) == (3, 5)
    assert split(8, cores=64) == (7, 1), "at most one worker per remaining env"
    assert split(2, cores=2) == (1, 1), "at least one env stays in a worker"
    assert split(1, cores=2) == (1, 0), "one env: it stays in a worker"
    assert split(8, cores=1) == (1, 0), "one core: nothing to overlap"
    assert split(8, num_workers=2, cores=2) == (2, 0), "explicit workers keep every env"
    assert default_split(8, local_envs=2, cores=4) == (3, 2)
    assert default_split(8, num_workers=1, local_envs=6, cores=2) == (1, 6)
    for bad in (8, 9, -1):
        with pytest.raises(ConfigError, match="local_envs"):
            default_split(8, local_envs=bad, cores=2)


def _rollout(backend: str, **options: Any) -> np.ndarray:
    envs = rlblocks.make_vector_env(backend, "CartPole-v1", num_envs=3, **options)
    assert getattr(envs, "local_envs", 0) == options.get("local_envs", 0)
    try:
        obs, _ = envs.reset(seed=7)
        out = [obs]
        rng = np.random.default_rng(0)
        for _ in range(40):
            obs, _, term, trunc, _ = envs.step(rng.integers(2, size=3))
            out.append(obs.copy())
            done = np.flatnonzero(term | trunc)
            if len(done):
                reset_obs, _ = envs.reset(done)
                obs[done] = reset_obs
        return np.stack(out)
    finally:
        envs.close()


def test_same_seed_gives_identical_trajectories_on_every_backend() -> None:
    reference = _rollout("dummy")
    np.testing.assert_array_equal(_rollout("subproc", num_workers=2), reference)
    np.testing.assert_array_equal(_rollout("shmem", num_workers=2), reference)
    np.testing.assert_array_equal(_rollout("subproc", num_workers=1, context="spawn"), reference)
    np.testing.assert_array_equal(_rollout("subproc", num_workers=1, local_envs=1), reference)
    np.testing.assert_array_equal(_rollout("shmem", num_workers=1, local_envs=2), reference)
    np.testing.assert_array_equal(_rollout("shmem", num_workers=2, local_envs=1), reference)
    assert not np.allclose(reference[:, 0], reference[:, 1]), "envs must get distinct seeds"


def test_lambda_factories_travel_to_spawned_workers() -> None:
    # make_env_fns builds lambdas over gym.make: plain pickle cannot send those
    with rlblocks.make_vector_env("shmem", "CartPole-v1", num_envs=2, context="spawn") as envs:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 4)


# -- async -------------------------------------------------------------------------------------
class SlowProbeEnv(ProbeEnv):
    """A probe env whose step sleeps ``delay`` seconds (module level: picklable)."""

    def __init__(self, index: int, delay: float) -> None:
        super().__init__(index)
        self.delay = delay

    def step(self, action: Any) -> Any:
        time.sleep(self.delay)
        return super().step(action)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_step_wait_returns_ready_envs_with_their_own_ids(backend: str, layout: str) -> None:
    fns = [functools.partial(SlowProbeEnv, i, 0.5 if i >= 2 else 0.0) for i in range(4)]
    with BACKENDS[backend](fns, **LAYOUTS[layout]) as envs:
        envs.reset()
        envs.step_async(np.array([1, 2, 3, 4]))
        ids, obs, _rew, _term, _trunc, _infos = envs.step_wait(wait_num=1)
        assert sorted(ids.tolist()) == [0, 1], "the fast envs come back first"
        assert obs[:, 0].astype(int).tolist() == ids.tolist(), "obs rows must match env ids"
        assert obs[:, 3].astype(int).tolist() == (ids + 1).tolist(), "each env got its action"
        assert envs.ready_env_ids.tolist() == [0, 1]
        with pytest.raises(EnvWorkerError, match="in flight"):
            envs.reset([2])
        # ready envs can be stepped again while the slow ones still run
        envs.step_async(np.array([5, 6]), ids)
        got: dict[int, np.ndarray] = {}
        while len(got) < 4:
            ids, obs, *_ = envs.step_wait()
            got.update(zip(ids.tolist(), obs))
        assert {i: int(o[0]) for i, o in got.items()} == {0: 0, 1: 1, 2: 2, 3: 3}
        assert int(got[0][1]) == 2 and int(got[2][1]) == 1, "envs 0, 1 stepped twice, 2, 3 once"


@pytest.mark.parametrize("local_envs", [0, 1])
def test_step_wait_timeout_returns_what_is_ready(local_envs: int) -> None:
    fns = [functools.partial(SlowProbeEnv, i, 3.0 if i == 1 else 0.0) for i in range(2)]
    with ShmemVectorEnv(fns, num_workers=2, local_envs=local_envs) as envs:
        envs.reset()
        envs.step_async(np.array([0, 0]))
        start = time.monotonic()
        ids, *_ = envs.step_wait(timeout=0.2)
        assert ids.tolist() == [0]
        assert time.monotonic() - start < 2.5


# -- faults ------------------------------------------------------------------------------------
class FaultyEnv(ProbeEnv):
    """Env 1 misbehaves on its second step: ``mode`` raise, segv, exit or hang."""

    def __init__(self, index: int, mode: str) -> None:
        super().__init__(index)
        self.length = 100
        self.mode = mode

    def step(self, action: Any) -> Any:
        out = super().step(action)
        if self.index == 1 and self._state[1] == 2:
            if self.mode == "raise":
                explode_in_env()
            elif self.mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif self.mode == "exit":
                os._exit(3)
            elif self.mode == "hang":
                time.sleep(60)
        return out


def explode_in_env() -> None:
    raise ValueError("the env broke")


def _faulty(mode: str, backend: str, **options: Any) -> SubprocVectorEnv:
    fns = [functools.partial(FaultyEnv, i, mode) for i in range(4)]
    options = {"num_workers": 2, "local_envs": 0, **options}
    return BACKENDS[backend](fns, **options)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_env_error_reaches_caller_with_env_id_and_worker_traceback(
    backend: str, layout: str
) -> None:
    with _faulty("raise", backend, **LAYOUTS[layout]) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match=r"env 1 raised in step: ValueError") as err:
            envs.step(np.zeros(4, dtype=int))
        assert "explode_in_env" in str(err.value), "the worker's traceback must be included"
        where = "the calling process" if layout == "local" else "env worker 0"
        assert f"traceback in {where} (pid" in str(err.value)
        # the worker survives: after a reset the envs step again
        envs.reset([0, 1])
        obs, *_ = envs.step(np.zeros(2, dtype=int), [0, 1])
        assert obs[:, 1].tolist() == [1, 1]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_step_leaves_no_stale_results_and_asks_for_resets(
    backend: str, layout: str
) -> None:
    with _faulty("raise", backend, **LAYOUTS[layout]) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match="env 1 raised"):
            envs.step(np.zeros(4, dtype=int))
        assert not any(w.pending for w in envs._workers), "every reply of the step is drained"
        # envs 2 and 3 (the other worker) stepped too, unseen: they must be reset first
        with pytest.raises(EnvWorkerError, match="reset"):
            envs.step(np.zeros(2, dtype=int), [2, 3])
        envs.reset()
        obs, *_ = envs.step(np.zeros(4, dtype=int))
        assert obs[:, 1].tolist() == [1, 1, 1, 1]
        envs.step_async(np.zeros(3, dtype=int), [0, 2, 3])  # env 1 would raise again at t=2
        ids, obs, *_ = envs.step_wait(timeout=10)
        assert sorted(ids.tolist()) == [0, 2, 3], "a stale reply from the failed step came back"
        assert obs[:, 1].tolist() == [2, 2, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_local_env_error_in_step_async_is_raised_by_step_wait(backend: str) -> None:
    with _faulty("raise", backend, **LAYOUTS["local"]) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        envs.step_async(np.zeros(4, dtype=int))  # env 1 (local) raises at once: kept for later
        with pytest.raises(EnvWorkerError, match=r"env 1 raised in step") as err:
            envs.step_wait()
        assert "explode_in_env" in str(err.value)
        # the worker's envs stepped normally and are still owed to the caller
        ids, obs, *_ = envs.step_wait(timeout=10)
        assert ids.tolist() == [2, 3] and obs[:, 1].tolist() == [2, 2]
        with pytest.raises(EnvWorkerError, match="no step in flight"):
            envs.step_wait()
        with pytest.raises(EnvWorkerError, match="reset"):
            envs.step(np.zeros(2, dtype=int), [0, 1])
        envs.reset([0, 1])
        obs, *_ = envs.step(np.zeros(4, dtype=int))
        assert obs[:, 1].tolist() == [1, 1, 3, 3]


@pytest.mark.parametrize(
    ("mode", "message"),
    [("segv", "killed by signal SIGSEGV"), ("exit", "exited with code 3")],
)
def test_dead_worker_is_reported_quickly(mode: str, message: str) -> None:
    with _faulty(mode, "subproc") as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match=message) as err:
            envs.step(np.zeros(4, dtype=int))
        assert "envs [0, 1]" in str(err.value) and "restart_failed" in str(err.value)
        assert time.monotonic() - start < 5
        with pytest.raises(EnvWorkerError, match="cannot use envs"):
            envs.reset()


def test_killed_worker_is_reported_by_shmem_async_wait() -> None:
    with ShmemVectorEnv(probe_env_fns(4), num_workers=2) as envs:
        envs.reset()
        os.kill(envs.worker_pids[1], signal.SIGKILL)
        envs.step_async(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match="SIGKILL"):
            envs.step_wait()


def test_hung_worker_is_killed_after_worker_timeout() -> None:
    with _faulty("hang", "shmem", worker_timeout=0.5) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match="did not answer step within worker_timeout"):
            envs.step(np.zeros(4, dtype=int))
        assert time.monotonic() - start < 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_failed_restarts_worker_and_truncates_its_envs(backend: str) -> None:
    with _faulty("segv", backend, restart_failed=True) as envs:
        envs.reset()
        old = envs.worker_pids
        envs.step(np.zeros(4, dtype=int))
        with pytest.warns(RuntimeWarning, match="SIGSEGV"):
            obs, rew, term, trunc, infos = envs.step(np.ones(4, dtype=int))
        assert trunc.tolist() == [True, True, False, False] and not term.any()
        assert "env_worker_restarted" in infos[0] and rew[:2].tolist() == [0.0, 0.0]
        assert obs[2:, 1].tolist() == [2, 2], "the healthy worker's envs stepped normally"
        assert envs.worker_pids[0] != old[0] and envs.worker_pids[1] == old[1]
        obs, _ = envs.reset([0, 1])
        assert obs[:, 2].tolist() == [1, 1], "fresh envs in the restarted worker"
        obs, *_ = envs.step(np.zeros(4, dtype=int))
        assert obs[:, 1].tolist() == [1, 1, 3, 3]


def test_dead_worker_next_to_local_envs_is_reported_and_restarted() -> None:
    with _faulty("segv", "shmem", num_workers=1, local_envs=1) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match=r"env worker 0 .*envs \[1, 2, 3\]\).*SIGSEGV"):
            envs.step(np.zeros(4, dtype=int))
    with _faulty("segv", "subproc", num_workers=1, local_envs=1, restart_failed=True) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.warns(RuntimeWarning, match="SIGSEGV"):
            obs, _, term, trunc, _ = envs.step(np.ones(4, dtype=int))
        assert trunc.tolist() == [False, True, True, True] and not term.any()
        assert obs[0, 1] == 2, "the local env stepped normally"
        envs.reset([1, 2, 3])
        obs, *_ = envs.step(np.zeros(4, dtype=int))
        assert obs[:, 1].tolist() == [3, 1, 1, 1]


def test_env_that_fails_to_build_is_reported() -> None:
    def broken() -> gym.Env:
        raise RuntimeError("no such asset")

    with pytest.raises(EnvWorkerError, match=r"env 1 raised in make: RuntimeError"):
        SubprocVectorEnv([functools.partial(ProbeEnv, 0), broken], num_workers=2)
    # a local env that fails to build: same report, and the workers already started are stopped
    with pytest.raises(EnvWorkerError, match=r"env 0 raised in make: RuntimeError") as err:
        SubprocVectorEnv([broken, functools.partial(ProbeEnv, 1)], num_workers=1, local_envs=1)
    assert "no such asset" in str(err.value) and "the calling process" in str(err.value)


# -- shutdown ----------------------------------------------------------------------------------
def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class ClosingProbeEnv(ProbeEnv):
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_closes_local_envs_and_stops_workers(backend: str) -> None:
    fns = [functools.partial(ClosingProbeEnv, i) for i in range(3)]
    with BACKENDS[backend](fns, num_workers=1, local_envs=2) as envs:
        local = list(envs._local.group.envs)
        pids = envs.worker_pids
        assert len(local) == 2 and len(pids) == 1
        envs.reset()
        envs.step_async(np.zeros(3, dtype=int))  # closing with a step in flight is fine too
    assert all(e.closed for e in local) and all(_gone(p) for p in pids)
    envs.close()
    with pytest.raises(EnvWorkerError, match="closed"):
        envs.step(np.zeros(3, dtype=int))


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_leaves_no_worker_processes(backend: str) -> None:
    envs = BACKENDS[backend](probe_env_fns(4), num_workers=2)
    pids = envs.worker_pids
    assert not any(_gone(p) for p in pids)
    envs.reset()
    envs.close()
    envs.close()
    assert all(_gone(p) for p in pids)
    with BACKENDS[backend](probe_env_fns(4), num_workers=2) as envs:
        pids = envs.worker_pids
        envs.reset()
        envs.step_async(np.zeros(4, dtype=int))  # closing with a step in flight is fine too
    assert all(_gone(p) for p in pids)
    with pytest.raises(EnvWorkerError, match="closed"):
        envs.reset()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_spinning_and_blocking_workers_step_the_same_trajectories(backend: str) -> None:
    cls = BACKENDS[backend]
    runs = []
    for spin in (0.0, 500.0):
        with cls(probe_env_fns(4), num_workers=1, local_envs=1, worker_spin_us=spin) as envs:
            assert envs.worker_spin_us == spin
            obs, _ = envs.reset(seed=3)
            trace = [obs]
            for t in range(12):
                obs, rew, term, trunc, _ = envs.step(np.full(4, t % 2))
                trace += [obs, rew]
                done = np.flatnonzero(term | trunc)
                if len(done):
                    trace.append(envs.reset(done)[0])
            runs.append(trace)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_worker_spin_defaults_to_on_only_when_workers_leave_a_core_each() -> None:
    cores = len(os.sched_getaffinity(0))
    with SubprocVectorEnv(probe_env_fns(2), num_workers=1) as envs:
        assert envs.worker_spin_us == (200.0 if cores > 1 else 0.0)
    with SubprocVectorEnv(probe_env_fns(cores), num_workers=cores, local_envs=0) as envs:
        assert envs.worker_spin_us == 0.0  # as many workers as cores: they block
    with pytest.raises(ConfigError, match="worker_spin_us"):
        SubprocVectorEnv(probe_env_fns(2), worker_spin_us=-1)


def test_a_spinning_worker_that_dies_is_still_reported_at_once() -> None:
    with SubprocVectorEnv(probe_env_fns(2), num_workers=1, local_envs=0,
                          worker_spin_us=5e5) as envs:  # spins for half a second between steps
        envs.reset(seed=0)
        os.kill(envs.worker_pids[0], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match="killed by signal SIGKILL"):
            envs.step(np.zeros(2, dtype=np.int64))
        assert time.monotonic() - start < 5


def test_restart_failed_keeps_every_env_in_a_worker_by_default() -> None:
    with SubprocVectorEnv(probe_env_fns(4), restart_failed=True) as envs:
        assert envs.local_envs == 0  # only a worker's crash can be caught and restarted
    with SubprocVectorEnv(probe_env_fns(4), restart_failed=True, local_envs=1) as envs:
        assert envs.local_envs == 1  # unless asked for


class _EchoEnv(gym.Env):
    """obs = [t, last action]; each step takes ``delay`` seconds."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float64)
    action_space = gym.spaces.Discrete(10)

    def __init__(self, delay: float) -> None:
        self.delay, self.t = delay, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0, -1.0]), {}

    def step(self, action):
        time.sleep(self.delay)
        self.t += 1
        return np.array([self.t, float(action)]), 0.0, False, False, {"a": int(action)}


@pytest.mark.parametrize("backend", [SubprocVectorEnv, ShmemVectorEnv])
def test_a_step_interrupted_while_waiting_never_hands_its_answer_to_a_later_call(backend) -> None:
    # Ctrl-C inside step(): the workers still answer that step later; those answers must be
    # dropped, not returned by the next step_wait (which then ran one step behind for good)
    fns = [functools.partial(_EchoEnv, 0.3) for _ in range(2)]
    with backend(fns, num_workers=2, local_envs=0) as envs:
        envs.reset(seed=0)

        def interrupt(signum, frame):
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            with pytest.raises(KeyboardInterrupt):
                envs.step(np.zeros(2, dtype=np.int64))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        # the envs moved on unseen: they must be reset before stepping again
        with pytest.raises(EnvWorkerError, match="reset"):
            envs.step_async(np.full(2, 5, dtype=np.int64))
        obs, _ = envs.reset()
        assert obs[:, 0].tolist() == [0.0, 0.0]
        for k in (5, 6, 7):
            envs.step_async(np.full(2, k, dtype=np.int64))
            _, obs, _, _, _, infos = envs.step_wait()
            assert obs[:, 1].tolist() == [k, k] and [i["a"] for i in infos] == [k, k]
        obs, *_ = envs.step(np.full(2, 8, dtype=np.int64))
        assert obs.tolist() == [[4.0, 8.0], [4.0, 8.0]]


class _ResetFails(ProbeEnv):
    def reset(self, *, seed=None, options=None):
        raise RuntimeError("no reset today")


def test_a_seeded_make_vector_env_whose_reset_fails_leaves_no_workers() -> None:
    import multiprocessing

    fns = [functools.partial(ProbeEnv, 0), functools.partial(_ResetFails, 1)]
    for _ in range(2):
        with pytest.raises(EnvWorkerError, match="no reset today"):
            rlblocks.make_vector_env("subproc", fns, seed=0, num_workers=2, local_envs=0)
    assert not multiprocessing.active_children()


def test_step_wait_refuses_a_negative_timeout_or_no_env_to_wait_for() -> None:
    with SubprocVectorEnv(probe_env_fns(2), num_workers=2) as envs:
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, dtype=np.int64))
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            envs.step_wait(timeout=-1)
        with pytest.raises(ValueError, match="wait_num must be at least 1"):
            envs.step_wait(wait_num=0)
        ids, *_ = envs.step_wait()
        assert sorted(ids.tolist()) == [0, 1]


# -- observations that are not arrays ------------------------------------------------------------
class _TextEnv(gym.Env):
    """Text observations (``"r<index>"`` at reset, ``"s<index>x<t>"`` after a step), alone or in
    a Dict next to a Box."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int, nested: bool) -> None:
        self.index, self.t, self.nested = index, 0, nested
        text = gym.spaces.Text(8)
        self.observation_space = (
            gym.spaces.Dict({"text": text, "pos": gym.spaces.Box(-9, 9, (2,))}) if nested else text
        )

    def _obs(self, text: str) -> Any:
        if not self.nested:
            return text
        return {"text": text, "pos": np.full(2, self.t, dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(f"r{self.index}"), {}

    def step(self, action):
        self.t += 1
        return self._obs(f"s{self.index}x{self.t}"), 1.0, self.t >= 3, False, {}


def _leaves(obs: Any) -> list[np.ndarray]:
    return [obs["text"], obs["pos"]] if isinstance(obs, dict) else [obs]


@pytest.mark.parametrize("nested", [False, True], ids=["text", "dict"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_text_observations_come_back_like_the_in_process_backend(layout: str, nested: bool) -> None:
    from rlblocks_env_dummy.dummy import DummyVectorEnv

    fns = [functools.partial(_TextEnv, i, nested) for i in range(4)]
    results = []
    for envs in (DummyVectorEnv(fns), SubprocVectorEnv(fns, **LAYOUTS[layout])):
        with envs:
            got = [envs.reset()[0], envs.step(np.zeros(4, dtype=np.int64))[0]]
            got.append(envs.step(np.zeros(2, dtype=np.int64), [3, 0])[0])
            got.append(envs.reset([2])[0])
            results.append(got)
    for ours, theirs in zip(*results, strict=True):
        for a, b in zip(_leaves(ours), _leaves(theirs), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tolist() == b.tolist()
    text = _leaves(results[1][2])[0]
    assert text.dtype == object and text.tolist() == ["s3x2", "s0x2"]


# -- failures while building, and workers that are gone ------------------------------------------
def _dies_while_building(index: int) -> gym.Env:
    if index == 1:
        os._exit(4)
    return ProbeEnv(index)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_that_dies_while_building_does_not_suggest_restart_failed(backend: str) -> None:
    fns = [functools.partial(_dies_while_building, i) for i in range(2)]
    with pytest.raises(EnvWorkerError, match=r"exited with code 4 while running make") as err:
        BACKENDS[backend](fns, num_workers=2, restart_failed=True)
    assert "restart_failed" not in str(err.value), "restarts do not apply to building"
    assert "Fix what building these envs does" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_pids_say_none_for_a_worker_whose_restarts_ran_out(backend: str) -> None:
    with _faulty("segv", backend, restart_failed=True, max_restarts=0) as envs:
        envs.reset()
        pids = envs.worker_pids
        assert all(isinstance(p, int) for p in pids) and len(pids) == 2
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match=r"restarted 0 times \(max_restarts=0\)"):
            envs.step(np.zeros(4, dtype=int))
        assert envs.worker_pids == [None, pids[1]], "worker 0 is gone for good"
        with pytest.raises(EnvWorkerError, match=r"cannot use envs \[0, 1\]") as err:
            envs.reset()
        assert "pass restart_failed=True" not in str(err.value), "it is already on"
    assert envs.worker_pids == [None, None], "no worker runs once closed"


# -- observations that do not fit their space ----------------------------------------------------
class _LeafOff(gym.Env):
    """A Dict observation (``{"id", "parts": (Discrete, Box(2,))}``, or a plain Box(2,) with
    ``nested`` off) whose Box leaf has shape (3,) on env 3 in phase ``bad`` (reset or step)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int, bad: str, nested: bool = True) -> None:
        self.index, self.bad, self.nested = index, bad, nested
        box = gym.spaces.Box(-1, 1, (2,))
        self.observation_space = gym.spaces.Dict({
            "id": gym.spaces.Discrete(4),
            "parts": gym.spaces.Tuple((gym.spaces.Discrete(2), box)),
        }) if nested else box

    def _obs(self, phase: str) -> Any:
        leaf = np.zeros(3 if self.index == 3 and phase == self.bad else 2, dtype=np.float32)
        return {"id": self.index, "parts": (0, leaf)} if self.nested else leaf

    def reset(self, *, seed=None, options=None):
        return self._obs("reset"), {}

    def step(self, action):
        return self._obs("step"), 0.0, False, False, {}


_LEAF_OFF = (r"env 3 returned an observation\['parts'\]\[1\] of shape \(3,\), but its "
             r"observation space says \(2,\); fix the env or a wrapper")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nested_observation_leaf_of_the_wrong_shape_is_named_like_in_process(
    backend: str, layout: str
) -> None:
    fns = [functools.partial(_LeafOff, i, "reset") for i in range(4)]
    with BACKENDS[backend](fns, **LAYOUTS[layout]) as envs:
        with pytest.raises(EnvWorkerError, match=r"\(reset\): " + _LEAF_OFF):
            envs.reset()
        envs.reset([0, 1, 2])  # the well-shaped envs still reset and step
        obs, *_ = envs.step(np.zeros(2, dtype=np.int64), [2, 0])
        assert obs["id"].tolist() == [2, 0] and obs["parts"][1].shape == (2, 2)
        with pytest.raises(EnvWorkerError, match="never reset"):
            envs.step(np.zeros(1, dtype=np.int64), [3])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nested_leaf_of_the_wrong_shape_in_step_asks_to_reset_that_steps_envs(
    backend: str, layout: str
) -> None:
    fns = [functools.partial(_LeafOff, i, "step") for i in range(4)]
    with BACKENDS[backend](fns, **LAYOUTS[layout]) as envs:
        envs.reset()
        with pytest.raises(EnvWorkerError, match=r"\(step\): " + _LEAF_OFF):
            envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match="reset"):  # they stepped, unseen
            envs.step(np.zeros(1, dtype=np.int64), [0])
        envs.reset()
        envs.step_async(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match=r"\(step\): " + _LEAF_OFF):
            envs.step_wait()
        # as after an env error: the envs of env 3's worker (2 and 3 in both layouts) must be
        # reset, the others' results are still owed to the caller
        assert np.flatnonzero(envs._in_flight).tolist() == [0, 1]
        ids, obs, *_ = envs.step_wait(timeout=10)
        assert ids.tolist() == [0, 1] and obs["id"].tolist() == [0, 1]
        with pytest.raises(EnvWorkerError, match=r"envs \[2\] finished"):
            envs.step(np.zeros(1, dtype=np.int64), [2])
        envs.reset([2, 3])
        obs, *_ = envs.step(np.zeros(3, dtype=np.int64), [0, 1, 2])
        assert obs["id"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_box_observation_of_the_wrong_shape_names_the_env_by_its_own_id(
    backend: str, layout: str
) -> None:
    fns = [functools.partial(_LeafOff, i, "reset", nested=False) for i in range(4)]
    with BACKENDS[backend](fns, **LAYOUTS[layout]) as envs:  # env 3 is slot 1 of its worker
        with pytest.raises(EnvWorkerError, match=(
            r"env 3 returned an observation of shape \(3,\), but its observation space says "
            r"\(2,\)")):
            envs.reset()
        obs, _ = envs.reset([2, 0])  # the well-shaped envs still reset
        assert obs.shape == (2, 2)


class _DictFaulty(FaultyEnv):
    """FaultyEnv's misbehaviour, with Dict observations ``{"id", "obs"}``."""

    def __init__(self, index: int, mode: str) -> None:
        super().__init__(index, mode)
        self.observation_space = gym.spaces.Dict({
            "id": gym.spaces.Discrete(8), "obs": self.observation_space})

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return {"id": self.index, "obs": obs}, info

    def step(self, action: Any) -> Any:
        obs, *rest = super().step(action)
        return ({"id": self.index, "obs": obs}, *rest)


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_failed_truncates_the_envs_of_a_dict_observation_space(backend: str) -> None:
    fns = [functools.partial(_DictFaulty, i, "segv") for i in range(4)]
    with BACKENDS[backend](fns, num_workers=2, local_envs=0, restart_failed=True) as envs:
        first, _ = envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.warns(RuntimeWarning, match="SIGSEGV"):
            obs, _, term, trunc, infos = envs.step(np.ones(4, dtype=int))
        assert trunc.tolist() == [True, True, False, False] and not term.any()
        assert "env_worker_restarted" in infos[1]
        assert obs["id"].tolist() == [0, 1, 2, 3]
        assert obs["obs"][2:, 1].tolist() == [2, 2], "the healthy worker's envs stepped normally"
        assert obs["obs"].shape == first["obs"].shape


class _UncutBuffer(ReplayBuffer):
    """A buffer that can only end every env's episodes at once (no ``env_ids``)."""

    def truncate_unfinished(self) -> np.ndarray:  # type: ignore[override]
        return super().truncate_unfinished()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("collector", [Collector, AsyncCollector])
def test_a_restarted_workers_made_up_steps_are_not_stored(backend: str, collector: type) -> None:
    """Env 1's worker (envs 0 and 1) dies at their second step; the backend hands back a made-up
    truncated step for both (reward 0). The collector stores only real steps and ends envs 0
    and 1's stored episodes, truncated, at their first step; their fresh episodes after the
    restart start new chains."""
    with _faulty("segv", backend, restart_failed=True) as envs:
        buf = ReplayBuffer(100, num_envs=4)
        with pytest.warns(RuntimeWarning, match="SIGSEGV"):
            stats = collector(None, envs, buf, seed=0).collect(n_step=12, random=True)
        assert len(buf) == stats.n_step, "the made-up steps were neither stored nor counted"
        assert stats.n_episode == 0, "the episodes the restart cut short are not finished ones"
        rows = buf[np.arange(len(buf))]
        assert (np.asarray(rows.rew) > 0).all(), "every real ProbeEnv reward is positive"
        for env in (0, 1):
            slots = np.flatnonzero(buf.env_id[: len(buf)] == env)
            first, fresh = slots[0], slots[1]
            assert buf.truncated[first] and buf.next(first) == first
            assert buf.prev(fresh) == fresh and buf.obs_next[fresh][1] == 1  # t = 1 again
        for env in (2, 3):  # the healthy worker's envs: one episode, linked step to step
            slots = np.flatnonzero(buf.env_id[: len(buf)] == env)
            assert [int(buf.next(s)) for s in slots[:-1]] == slots[1:].tolist()
            assert not buf.truncated[slots].any()


class _InfoFaulty(FaultyEnv):
    """FaultyEnv whose steps report ``info["t"]`` (a restarted worker's made-up step does not)."""

    def step(self, action: Any) -> Any:
        obs, rew, term, trunc, info = super().step(action)
        return obs, rew, term, trunc, {**info, "t": int(obs[1])}


@pytest.mark.parametrize("collector", [Collector, AsyncCollector])
def test_stored_info_keys_are_read_from_real_steps_only(collector: type) -> None:
    """A made-up step lacks the env's info keys; it is left out before they are read, so a run
    storing ``info_keys`` goes on past a worker restart."""
    fns = [functools.partial(_InfoFaulty, i, "segv") for i in range(4)]
    with SubprocVectorEnv(fns, num_workers=2, local_envs=0, restart_failed=True) as envs:
        buf = ReplayBuffer(100, num_envs=4)
        with pytest.warns(RuntimeWarning, match="SIGSEGV"):
            stats = collector(None, envs, buf, seed=0, info_keys=("t",)).collect(
                n_step=12, random=True
            )
        assert len(buf) == stats.n_step
        rows = buf[np.arange(len(buf))]
        np.testing.assert_array_equal(rows.info.t, np.asarray(rows.obs_next)[:, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_buffer_that_cannot_cut_one_env_keeps_the_made_up_step(backend: str) -> None:
    """Without ``env_ids`` in ``truncate_unfinished`` the made-up truncated step is stored: it
    ends the episode, so the fresh one does not link to it."""
    with _faulty("segv", backend, restart_failed=True) as envs:
        buf = _UncutBuffer(100, num_envs=4)
        with pytest.warns(RuntimeWarning, match="SIGSEGV"):
            stats = Collector(None, envs, buf, seed=0).collect(n_step=12, random=True)
        made_up = np.flatnonzero(np.asarray(buf[np.arange(len(buf))].rew) == 0)
        assert len(made_up) and len(buf) == stats.n_step + len(made_up), "stored, not counted"
        assert set(buf.env_id[made_up].tolist()) == {0, 1} and buf.truncated[made_up].all()


class _DiesOnce(ProbeEnv):
    """A probe env whose episodes last 5 steps; env 1's worker dies at its second step, once
    over the test (``marker``, a file, remembers it across the restart)."""

    def __init__(self, index: int, marker: str) -> None:
        super().__init__(index)
        self.length = 5
        self.marker = marker

    def step(self, action: Any) -> Any:
        out = super().step(action)
        if self.index == 1 and self._state[1] == 2 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGSEGV)
        return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("collector", [Collector, AsyncCollector])
def test_episodes_a_restart_cut_short_are_not_counted(
    backend: str, collector: type, tmp_path: Any
) -> None:
    """A test collect of ``n_episode`` episodes reports that many whole episodes when a worker
    dies: the two it cut short (envs 0 and 1) are neither counted nor among the returns, and
    envs 0 and 1 play two more in their place."""
    fns = [functools.partial(_DiesOnce, i, str(tmp_path / "died")) for i in range(4)]
    envs = BACKENDS[backend](fns, num_workers=2, local_envs=0, restart_failed=True)
    with envs, pytest.warns(RuntimeWarning, match="SIGSEGV"):
        stats = collector(None, envs, None, seed=0).collect(n_episode=8, random=True)
    assert stats.n_episode == 8 and stats.lengths.tolist() == [5] * 8
    # env i's whole episode earns sum(10 i + t for t in 1..5) = 50 i + 15
    assert sorted(stats.returns.tolist()) == sorted([15.0, 65.0, 115.0, 165.0] * 2)


@pytest.mark.parametrize("backend", ["subproc", "shmem", "auto"])
def test_an_infinite_worker_timeout_is_no_limit(backend: str) -> None:
    """``inf`` means no time limit (the way to say so through ``auto``, whose None means "not
    given"); it used to fail at the first wait converting infinity to an integer."""
    inf = float("inf")
    envs = rlblocks.make_vector_env(
        backend, "CartPole-v1", num_envs=2, seed=0, worker_timeout=inf, start_timeout=inf
    )
    try:
        chosen = getattr(envs, "auto_choice", None)
        inner = getattr(envs, "env", envs) if chosen is not None else envs
        assert inner.worker_timeout is None and inner.start_timeout is None
        envs.reset(seed=0)
        _obs, rew, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert rew.shape == (2,)
    finally:
        envs.close()
