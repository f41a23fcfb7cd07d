"""The Ray backend: conformance, seeding, async stepping, faults, Ray's lifecycle, a whole run.

One local Ray (2 CPUs, no dashboard) serves the whole module, started once by a module-scoped
fixture: starting Ray costs seconds. The first test checks the backend's own start and shutdown
of a local Ray, so it runs before that fixture starts one.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray backend's tests need `pip install ray`")

import rlblocks  # noqa: E402
from rlblocks.contracts import ConfigError, EnvWorkerError  # noqa: E402
from rlblocks.testing.env_checks import ProbeEnv, check_vector_env, probe_env_fns  # noqa: E402
from rlblocks_env_ray.ray_env import RayVectorEnv  # noqa: E402
from rlblocks_env_ray.session import _running_local_address  # noqa: E402

# Ray's workers need not be able to import this test module: its env classes travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

RAY_INIT = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}


@pytest.fixture(scope="module")
def module_ray() -> Any:
    """One local Ray for the module (this test process owns it, not the backend)."""
    started = not ray.is_initialized()
    if started:
        ray.init(**RAY_INIT)
    yield ray
    if started and ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def local_ray(module_ray: Any) -> Any:
    """The module's Ray, started again if a test shut it down."""
    if not ray.is_initialized():
        ray.init(**RAY_INIT)
    return ray


def _pids_gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


# -- Ray's lifecycle ----------------------------------------------------------------------------
def test_starts_local_ray_when_none_runs_and_shuts_it_down_after_last_close() -> None:
    if _running_local_address(None) is not None:
        pytest.skip("a Ray from `ray start` or RAY_ADDRESS is up: the backend would use it")
    if ray.is_initialized():
        ray.shutdown()  # only when another module left one behind: this test needs none
    first = RayVectorEnv(probe_env_fns(2), init_kwargs={"num_cpus": 2})
    assert first.started_ray and ray.is_initialized()
    assert ray.cluster_resources()["CPU"] == 2
    second = RayVectorEnv(probe_env_fns(2), num_workers=1)  # shares the Ray the first started
    assert second.started_ray
    pids = first.worker_pids + second.worker_pids
    first.close()
    assert ray.is_initialized(), "the second vector env still runs on this Ray"
    obs, _ = second.reset()
    assert obs.shape == (2, 5)
    second.close()
    second.close()
    assert not ray.is_initialized(), "the Ray the backend started must stop with its last user"
    assert _pids_gone(pids), "actor processes outlived close()"


def test_uses_the_connected_ray_and_never_shuts_it_down(local_ray: Any) -> None:
    address = ray.get_runtime_context().gcs_address
    with RayVectorEnv(probe_env_fns(2), address=address) as envs:
        assert not envs.started_ray
        envs.reset()
    assert ray.is_initialized(), "a Ray the backend did not start belongs to its owner"
    with pytest.raises(ConfigError, match="already connected"):
        RayVectorEnv(probe_env_fns(2), address="10.255.255.1:6379")


def test_close_kills_every_actor(local_ray: Any) -> None:
    envs = RayVectorEnv(probe_env_fns(4), num_workers=2)
    envs.reset()
    pids = list(envs.worker_pids)
    actors = envs.actors
    assert len(set(pids)) == 2 and all(p is not None for p in pids)
    envs.close()
    deadline = time.monotonic() + 10  # ray.kill is asynchronous: a call may still slip in
    for actor in actors:
        while True:
            try:
                ray.get(actor.pid.remote(), timeout=10)
            except ray.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "an actor still answers 10 s after close()"
            time.sleep(0.1)
    assert _pids_gone(pids), "actor processes outlived close()"
    with pytest.raises(EnvWorkerError, match="closed"):
        envs.reset()


# -- protocol -----------------------------------------------------------------------------------
def test_ray_passes_conformance_kit(local_ray: Any) -> None:
    check_vector_env(functools.partial(RayVectorEnv, num_workers=2))


def _rollout(backend: str, **options: Any) -> np.ndarray:
    envs = rlblocks.make_vector_env(backend, "CartPole-v1", num_envs=3, **options)
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


def test_same_seed_gives_the_dummy_backends_trajectories(local_ray: Any) -> None:
    reference = _rollout("dummy")
    np.testing.assert_array_equal(_rollout("ray", num_workers=2), reference)
    # one actor: its reply is the whole result, which must still be an array the caller owns
    np.testing.assert_array_equal(_rollout("ray", num_workers=1), reference)
    assert not np.allclose(reference[:, 0], reference[:, 1]), "envs must get distinct seeds"


# -- async --------------------------------------------------------------------------------------
class SlowProbeEnv(ProbeEnv):
    """A probe env whose step sleeps ``delay`` seconds."""

    def __init__(self, index: int, delay: float) -> None:
        super().__init__(index)
        self.delay = delay

    def step(self, action: Any) -> Any:
        time.sleep(self.delay)
        return super().step(action)


def test_step_wait_returns_ready_envs_with_their_own_ids(local_ray: Any) -> None:
    fns = [functools.partial(SlowProbeEnv, i, 0.5 if i >= 2 else 0.0) for i in range(4)]
    with RayVectorEnv(fns, num_workers=2, wait_num=1) as envs:
        envs.reset()
        envs.step_async(np.array([1, 2, 3, 4]))
        ids, obs, _rew, _term, _trunc, _infos = envs.step_wait()
        assert sorted(ids.tolist()) == [0, 1], "the fast actor's envs come back first"
        assert obs[:, 0].astype(int).tolist() == ids.tolist(), "obs rows must match env ids"
        assert obs[:, 3].astype(int).tolist() == (ids + 1).tolist(), "each env got its action"
        assert envs.ready_env_ids.tolist() == [0, 1]
        with pytest.raises(EnvWorkerError, match="in flight"):
            envs.reset([2])
        # ready envs are stepped again while the slow ones still run
        envs.step_async(np.array([5, 6]), ids)
        got: dict[int, np.ndarray] = {}
        while len(got) < 4:
            ids, obs, *_ = envs.step_wait(wait_num=4)
            got.update(zip(ids.tolist(), obs))
        assert {i: int(o[0]) for i, o in got.items()} == {0: 0, 1: 1, 2: 2, 3: 3}
        assert int(got[0][1]) == 2 and int(got[2][1]) == 1, "envs 0, 1 stepped twice, 2, 3 once"
        with pytest.raises(EnvWorkerError, match="no step in flight"):
            envs.step_wait()


def test_step_wait_timeout_returns_what_is_ready(local_ray: Any) -> None:
    fns = [functools.partial(SlowProbeEnv, i, 1.0 if i == 1 else 0.0) for i in range(2)]
    with RayVectorEnv(fns, num_workers=2) as envs:
        envs.reset()
        envs.step_async(np.array([0, 0]))
        ids, *_ = envs.step_wait(timeout=0.2)
        assert ids.tolist() == [0]
        ids, *_ = envs.step_wait()
        assert ids.tolist() == [1]


class IndexPolicy:
    """Acts ``(index + t) % 7`` from a probe observation, so a misrouted action is visible."""

    training = False

    def __call__(self, batch: Any, state: Any = None) -> Any:
        from rlblocks.contracts import Batch

        obs = np.asarray(batch.obs)
        return Batch(act=(obs[:, 0] + obs[:, 1]).astype(np.int64) % 7)

    def map_action(self, act: Any) -> Any:
        return act

    def map_action_inverse(self, act: Any) -> Any:
        return act


def test_async_collector_keeps_rows_per_env_on_ray(local_ray: Any) -> None:
    from rlblocks.collect import AsyncCollector

    fns = [functools.partial(SlowProbeEnv, i, 0.02 if i >= 2 else 0.0) for i in range(4)]
    with RayVectorEnv(fns, num_workers=2, wait_num=1) as envs:
        buf = rlblocks.make_buffer("replay", size=500, num_envs=4)
        collector = AsyncCollector(IndexPolicy(), envs, buf, seed=0)
        assert collector.is_async
        assert collector.collect(n_step=40).n_step >= 40
        stats = collector.collect(n_episode=5)
        assert stats.n_episode == 5 and not envs._in_flight.any()
        data = buf[np.arange(len(buf))]
        obs, nxt, act = np.asarray(data.obs), np.asarray(data.obs_next), np.asarray(data.act)
        assert (obs[:, 0] == nxt[:, 0]).all(), "obs and obs_next of a row from different envs"
        assert (nxt[:, 1] == obs[:, 1] + 1).all(), "a transition spans two episodes"
        assert (act == nxt[:, 3]).all(), "the stored action is not the one the env received"


# -- faults -------------------------------------------------------------------------------------
class FaultyEnv(ProbeEnv):
    """Env 1 misbehaves on its second step: ``mode`` raise, exit or hang."""

    def __init__(self, index: int, mode: str) -> None:
        super().__init__(index)
        self.length = 100
        self.mode = mode

    def step(self, action: Any) -> Any:
        out = super().step(action)
        if self.index == 1 and self._state[1] == 2:
            if self.mode == "raise":
                explode_in_env()
            elif self.mode == "exit":
                os._exit(3)
            elif self.mode == "hang":
                time.sleep(60)
        return out


def explode_in_env() -> None:
    raise ValueError("the env broke")


def _faulty(mode: str, **options: Any) -> RayVectorEnv:
    fns = [functools.partial(FaultyEnv, i, mode) for i in range(4)]
    return RayVectorEnv(fns, num_workers=2, **options)


def test_env_error_reaches_caller_with_env_id_and_actor_traceback(local_ray: Any) -> None:
    with _faulty("raise") as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match=r"env 1 raised in step: ValueError") as err:
            envs.step(np.zeros(4, dtype=int))
        assert "explode_in_env" in str(err.value), "the actor's traceback must be included"
        with pytest.raises(EnvWorkerError, match="reset"):
            envs.step(np.zeros(4, dtype=int))  # every env of the failed step must be reset
        # the actor survives: after a reset the envs step again
        envs.reset()
        obs, *_ = envs.step(np.zeros(2, dtype=int), [0, 1])
        assert obs[:, 1].tolist() == [1, 1]


def test_env_error_in_async_step_keeps_other_results(local_ray: Any) -> None:
    with _faulty("raise") as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        envs.step_async(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match="env 1 raised in step"):
            envs.step_wait(wait_num=4)
        ids, obs, *_ = envs.step_wait()
        assert ids.tolist() == [2, 3], "the healthy actor's results are not lost"
        assert obs[:, 1].tolist() == [2, 2]


def test_killed_actor_is_reported_with_its_envs(local_ray: Any) -> None:
    with RayVectorEnv(probe_env_fns(4), num_workers=2) as envs:
        envs.reset()
        ray.kill(envs.actors[1])
        # ray.kill is asynchronous: a step sent at once may still be served; wait until the
        # actor stops answering, so the step below meets a dead actor
        deadline = time.monotonic() + 10
        while True:
            try:
                ray.get(envs.actors[1].pid.remote(), timeout=10)
            except ray.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "the killed actor still answers after 10 s"
            time.sleep(0.1)
        with pytest.raises(EnvWorkerError, match=r"envs \[2, 3\].*ray\.kill") as err:
            envs.step(np.zeros(4, dtype=int))
        assert "restart_failed" in str(err.value)
        with pytest.raises(EnvWorkerError, match="cannot use envs"):
            envs.reset()


def test_actor_that_exits_is_reported_by_async_wait(local_ray: Any) -> None:
    with _faulty("exit") as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        envs.step_async(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match=r"envs \[0, 1\]\) died while running step"):
            while True:
                envs.step_wait()


def test_hung_actor_is_killed_after_worker_timeout(local_ray: Any) -> None:
    with _faulty("hang", worker_timeout=2.0) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match="did not answer step within worker_timeout"):
            envs.step(np.zeros(4, dtype=int))


def test_restart_failed_replaces_actor_and_truncates_its_envs(local_ray: Any) -> None:
    with _faulty("exit", restart_failed=True) as envs:
        envs.reset()
        old = envs.worker_pids
        envs.step(np.zeros(4, dtype=int))
        with pytest.warns(RuntimeWarning, match="died while running step"):
            obs, rew, term, trunc, infos = envs.step(np.ones(4, dtype=int))
        assert trunc.tolist() == [True, True, False, False] and not term.any()
        assert "env_worker_restarted" in infos[0] and rew[:2].tolist() == [0.0, 0.0]
        assert obs[2:, 1].tolist() == [2, 2], "the healthy actor's envs stepped normally"
        assert envs.worker_pids[0] != old[0] and envs.worker_pids[1] == old[1]
        obs, _ = envs.reset([0, 1])
        assert obs[:, 2].tolist() == [1, 1], "fresh envs in the new actor"
        obs, *_ = envs.step(np.zeros(4, dtype=int))
        assert obs[:, 1].tolist() == [1, 1, 3, 3]


def test_restarts_are_reported_counted_and_limited(local_ray: Any) -> None:
    with _faulty("exit", restart_failed=True, max_restarts=1) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.warns(RuntimeWarning, match=r"envs \[0, 1\]\) died while running step.*"
                          r"restart 1 of max_restarts=1"):
            envs.step(np.ones(4, dtype=int))
        envs.reset()
        envs.step(np.zeros(4, dtype=int))
        with pytest.raises(EnvWorkerError, match=r"replaced 1 times \(max_restarts=1\)"):
            envs.step(np.zeros(4, dtype=int))


def test_env_that_fails_to_build_is_reported(local_ray: Any) -> None:
    def broken() -> Any:
        raise RuntimeError("no such asset")

    with pytest.raises(EnvWorkerError, match=r"env 1 raised in make: RuntimeError"):
        RayVectorEnv([functools.partial(ProbeEnv, 0), broken], num_workers=2)


# -- a whole run --------------------------------------------------------------------------------
def test_train_dqn_end_to_end_on_ray(local_ray: Any, tmp_path: Path) -> None:
    result = rlblocks.train(
        "dqn",
        seed=0,
        backend="ray",
        overrides=[
            "trainer.max_env_steps=300",
            "trainer.warmup_steps=64",
            "trainer.test_interval=300",
            "trainer.test_episodes=2",
            "env.num_envs=4",
            "env.num_test_envs=2",
            "env.num_workers=2",
        ],
        loggers=[],
        progress=False,
        run_dir=tmp_path / "run",
    )
    assert result.env_steps >= 300
    assert (tmp_path / "run" / "result.json").exists()
    assert ray.is_initialized(), "the run must not shut down a Ray it did not start"


# -- observations that do not fit their space, and observations that are not arrays -------------
class LeafOff(gym.Env):
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
_BOX_OFF = (r"env 3 returned an observation of shape \(3,\), but its observation space says "
            r"\(2,\); fix the env or a wrapper")


def _leaf_off(bad: str, nested: bool = True) -> RayVectorEnv:
    # env 3 is slot 1 of actor 1, so its own id differs from its place in its actor
    return RayVectorEnv([functools.partial(LeafOff, i, bad, nested) for i in range(4)],
                        num_workers=2)


def test_a_nested_observation_leaf_of_the_wrong_shape_is_named_like_in_process(
    local_ray: Any,
) -> None:
    with _leaf_off("reset") as envs:
        with pytest.raises(EnvWorkerError, match=r"\(reset\): " + _LEAF_OFF):
            envs.reset()
        envs.reset([0, 1, 2])  # the well-shaped envs still reset and step
        obs, *_ = envs.step(np.zeros(2, dtype=np.int64), [2, 0])
        assert obs["id"].tolist() == [2, 0] and obs["parts"][1].shape == (2, 2)
        with pytest.raises(EnvWorkerError, match="never reset"):
            envs.step(np.zeros(1, dtype=np.int64), [3])


def test_a_nested_leaf_of_the_wrong_shape_in_step_asks_to_reset_that_steps_envs(
    local_ray: Any,
) -> None:
    with _leaf_off("step") as envs:
        envs.reset()
        with pytest.raises(EnvWorkerError, match=r"\(step\): " + _LEAF_OFF):
            envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match="reset"):  # they stepped, unseen
            envs.step(np.zeros(1, dtype=np.int64), [0])
        envs.reset()
        envs.step_async(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match=r"\(step\): " + _LEAF_OFF):
            envs.step_wait()
        # as after an env error: the envs of env 3's actor (2 and 3) must be reset, the other
        # actor's results are still owed to the caller
        assert np.flatnonzero(envs._in_flight).tolist() == [0, 1]
        ids, obs, *_ = envs.step_wait(timeout=10)
        assert ids.tolist() == [0, 1] and obs["id"].tolist() == [0, 1]
        assert not envs._in_flight.any()
        with pytest.raises(EnvWorkerError, match=r"envs \[2\] finished"):
            envs.step(np.zeros(1, dtype=np.int64), [2])
        envs.reset([2, 3])
        obs, *_ = envs.step(np.zeros(3, dtype=np.int64), [0, 1, 2])
        assert obs["id"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("phase", ["reset", "step"])
def test_a_box_observation_of_the_wrong_shape_names_the_env_by_its_own_id(
    local_ray: Any, phase: str
) -> None:
    with _leaf_off(phase, nested=False) as envs:
        if phase == "step":
            envs.reset()
        with pytest.raises(EnvWorkerError, match=rf"\({phase}\): " + _BOX_OFF) as err:
            envs.reset() if phase == "reset" else envs.step(np.zeros(4, dtype=np.int64))
        assert "Traceback" not in str(err.value), "the env's fault, said in one line"
        if phase == "step":  # every env of that step moved on unseen: all must be reset
            with pytest.raises(EnvWorkerError, match=r"envs \[0\] finished"):
                envs.step(np.zeros(1, dtype=np.int64), [0])
            envs.reset([0, 1, 2])
        obs, _ = envs.reset([2, 0])  # the well-shaped envs still reset
        assert obs.shape == (2, 2)


class TextEnv(gym.Env):
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
def test_text_observations_come_back_like_the_in_process_backend(
    local_ray: Any, nested: bool
) -> None:
    from rlblocks_env_dummy.dummy import DummyVectorEnv

    fns = [functools.partial(TextEnv, i, nested) for i in range(4)]
    results = []
    for envs in (DummyVectorEnv(fns), RayVectorEnv(fns, num_workers=2)):
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


class NestedFaulty(FaultyEnv):
    """FaultyEnv's misbehaviour with a Dict (``{"id", "obs"}``), Tuple (``(id, obs)``) or Text
    (``"<id>:<t>"``) observation space."""

    def __init__(self, index: int, mode: str, kind: str) -> None:
        super().__init__(index, mode)
        self.kind = kind
        box = self.observation_space
        self.observation_space = {
            "dict": gym.spaces.Dict({"id": gym.spaces.Discrete(8), "obs": box}),
            "tuple": gym.spaces.Tuple((gym.spaces.Discrete(8), box)),
            "text": gym.spaces.Text(16, charset="0123456789:."),
        }[kind]

    def _wrap(self, obs: np.ndarray) -> Any:
        if self.kind == "dict":
            return {"id": self.index, "obs": obs}
        if self.kind == "tuple":
            return (self.index, obs)
        return f"{self.index}:{int(obs[1])}"

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return self._wrap(obs), info

    def step(self, action: Any) -> Any:
        obs, *rest = super().step(action)
        return (self._wrap(obs), *rest)


def _ids_and_steps(obs: Any, kind: str) -> tuple[list[int], list[int]]:
    """Each env's id and step count in a batch of NestedFaulty observations."""
    if kind == "text":
        pairs = [tuple(map(int, s.split(":"))) for s in obs.tolist()]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    ids, box = (obs["id"], obs["obs"]) if kind == "dict" else obs
    return ids.tolist(), box[:, 1].astype(int).tolist()


@pytest.mark.parametrize("kind", ["dict", "tuple", "text"])
def test_restart_failed_truncates_the_envs_of_a_nested_or_text_observation_space(
    local_ray: Any, kind: str
) -> None:
    fns = [functools.partial(NestedFaulty, i, "exit", kind) for i in range(4)]
    with RayVectorEnv(fns, num_workers=2, restart_failed=True) as envs:
        envs.reset()
        before, *_ = envs.step(np.zeros(4, dtype=int))
        with pytest.warns(RuntimeWarning, match="died while running step"):
            obs, _, term, trunc, infos = envs.step(np.ones(4, dtype=int))
        assert trunc.tolist() == [True, True, False, False] and not term.any()
        assert "env_worker_restarted" in infos[1]
        # the replaced actor's envs repeat their last observation; the others stepped on
        assert _ids_and_steps(obs, kind) == ([0, 1, 2, 3], [1, 1, 2, 2])
        assert _ids_and_steps(before, kind) == ([0, 1, 2, 3], [1, 1, 1, 1])
        # the same through step_async / step_wait (the new actor's env 1 dies again)
        envs.reset([0, 1])
        envs.step(np.zeros(2, dtype=int), [1, 0])
        envs.step_async(np.ones(2, dtype=int), [0, 1])
        with pytest.warns(RuntimeWarning, match="restart 2 of max_restarts=3"):
            ids, obs, _, _, trunc, infos = envs.step_wait()
        assert ids.tolist() == [0, 1] and trunc.tolist() == [True, True]
        assert _ids_and_steps(obs, kind) == ([0, 1], [1, 1])


def _this_machines_address() -> str | None:
    """A non-loopback address of this machine (the one it would reach the world from)."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def test_the_head_named_by_another_address_of_this_machine_is_the_same_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `ray start --head` reports its node address; `address=127.0.0.1:PORT` reaches the same
    # head, and a run's second vector env (its test envs) must not be refused for it
    from types import SimpleNamespace

    from rlblocks_env_ray import session

    here = _this_machines_address()
    if here is None:
        pytest.skip("this machine has no non-loopback address")
    assert session.same_address("127.0.0.1:6411", f"{here}:6411")
    assert session.same_address("localhost:6411", "127.0.0.1:6411")
    assert not session.same_address("127.0.0.1:6411", f"{here}:6412")  # another head
    assert not session.same_address("127.0.0.1:6411", "203.0.113.7:6411")  # another machine
    monkeypatch.setattr(session.ray, "get_runtime_context",
                        lambda: SimpleNamespace(gcs_address=f"{here}:6411"))  # fmt: skip
    session._check_same_cluster("127.0.0.1:6411")
    with pytest.raises(ConfigError, match="already connected"):
        session._check_same_cluster("203.0.113.7:6411")
    # what this process connected with is that cluster, whatever name Ray gives it
    monkeypatch.setattr(session.ray, "get_runtime_context",
                        lambda: SimpleNamespace(gcs_address="203.0.113.7:6411"))  # fmt: skip
    monkeypatch.setattr(session, "_connected_as", ("headnode:6411", "203.0.113.7:6411"))
    session._check_same_cluster("headnode:6411")
