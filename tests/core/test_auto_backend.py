"""backend="auto": the choice follows the measured step cost, comes from the registry, and is
reported."""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks.plugins import get_registry
from rlblocks.run import choose_backend, measure_env, measure_vector_env
from rlblocks.testing.env_checks import ProbeEnv


def _spec(multiprocess: bool) -> types.SimpleNamespace:
    return types.SimpleNamespace(multiprocess=multiprocess)


INSTALLED = {"dummy": _spec(False), "subproc": _spec(True), "shmem": _spec(True)}


def test_cheap_env_stays_in_process() -> None:
    name, options, why = choose_backend(8, 10e-6, 32, INSTALLED, cores=2)
    assert name == "dummy" and options == {}
    assert "in-process" in why and "10 us" in why


def test_costly_env_goes_to_shmem_with_one_worker_per_core() -> None:
    name, options, why = choose_backend(8, 500e-6, 136, INSTALLED, cores=2)
    assert name == "shmem" and options == {"num_workers": 2}
    assert "2 workers" in why


def test_one_core_or_one_env_never_pays_for_processes() -> None:
    assert choose_backend(8, 1e-3, 136, INSTALLED, cores=1)[0] == "dummy"
    assert choose_backend(1, 1e-3, 136, INSTALLED, cores=4)[0] == "dummy"


def test_choice_is_among_installed_backends_only() -> None:
    only_subproc = {"dummy": _spec(False), "subproc": _spec(True)}
    assert choose_backend(8, 1e-3, 136, only_subproc, cores=2)[0] == "subproc"
    assert choose_backend(8, 1e-3, 136, {"dummy": _spec(False)}, cores=2)[0] == "dummy"
    with pytest.raises(ConfigError, match="no env backend"):
        choose_backend(8, 1e-3, 136, {"auto": _spec(False)}, cores=2)


def test_measure_env_reports_step_cost_and_obs_size() -> None:
    step_s, nbytes = measure_env(lambda: ProbeEnv(0), probe_seconds=0.01)
    assert 0 < step_s < 0.01 and nbytes == 5 * 8


def test_auto_backend_builds_by_name_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    envs = rlblocks.make_vector_env("auto", "CartPole-v1", num_envs=2, seed=0,
                                    probe_seconds=0.02)
    try:
        assert "backend='auto' chose" in envs.auto_choice
        assert envs.auto_choice in capsys.readouterr().err
        obs, *_ = envs.step(np.array([0, 1]))
        assert obs.shape == (2, 4)
    finally:
        envs.close()


@pytest.mark.parametrize("backend", ["dummy", "auto"])
@pytest.mark.parametrize("count", [0, -1, 2.0, True, "2"])
def test_a_count_of_envs_that_is_not_a_whole_number_from_one_is_refused_by_name(
    backend: str, count: object
) -> None:
    with pytest.raises(ConfigError, match=r"num_envs must be a whole number of at least 1"):
        rlblocks.make_vector_env(backend, "CartPole-v1", num_envs=count)


def test_a_numpy_integer_count_of_envs_is_taken() -> None:
    envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=np.int64(3), seed=0)
    try:
        assert envs.num_envs == 3
    finally:
        envs.close()


def test_backends_that_step_envs_here_get_a_shared_plan_when_it_pays() -> None:
    import attrs

    @attrs.define
    class SharedConfig:
        num_workers: int | None = None
        local_envs: int | None = None

    shared = types.SimpleNamespace(multiprocess=True, config=SharedConfig)
    installed = {"dummy": _spec(False), "shmem": shared}
    # 16 MuJoCo-like envs (30 us a step) on 2 cores: 9 here, 7 in one worker beat 16 here
    name, options, why = choose_backend(16, 30e-6, 136, installed, cores=2)
    assert name == "shmem" and options == {"num_workers": 1, "local_envs": 9}
    assert "9 envs here and 1 worker(s)" in why
    assert choose_backend(8, 30e-6, 136, installed, cores=2)[1] == {
        "num_workers": 1, "local_envs": 5}
    # 4 of them, or cheap envs: the round trip and the parent's bookkeeping eat the gain
    assert choose_backend(4, 30e-6, 136, installed, cores=2)[0] == "dummy"
    assert choose_backend(16, 5e-6, 16, installed, cores=2)[0] == "dummy"


def test_measure_vector_env_times_a_backend_and_closes_what_it_probed() -> None:
    closed = []

    def factory(fns):
        venv = get_registry("env").load("dummy")(fns)
        close = venv.close
        venv.close = lambda: (closed.append(True), close())  # type: ignore[method-assign]
        return venv

    fns = [lambda: gym.make("CartPole-v1")] * 3
    seconds = measure_vector_env(factory, fns, probe_seconds=0.05)
    assert closed == [True] and 0.0 < seconds < 0.05


def test_a_list_of_factories_with_another_num_envs_is_refused_by_name() -> None:
    import gymnasium as gym

    fns = [lambda: gym.make("CartPole-v1")] * 2
    with pytest.raises(ConfigError, match=r"num_envs=4 with a list of 2 env factories"):
        rlblocks.make_vector_env("dummy", fns, num_envs=4)
    for n in (1, 2):  # left out, or saying the same
        envs = rlblocks.make_vector_env("dummy", fns, num_envs=n)
        assert envs.num_envs == 2
        envs.close()


# -- observations shmem cannot carry -------------------------------------------------------------
class _SlowTextEnv(gym.Env):
    """Text observations, and a step costly enough (2 ms) that workers pay."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "r", {}

    def step(self, action):
        import time

        time.sleep(0.002)
        self.t += 1
        return f"s{self.t}", 1.0, self.t >= 50, False, {}


def test_auto_never_picks_a_backend_that_refuses_the_observation_space() -> None:
    from rlblocks.run._auto_backend import _space_problems

    installed = {n: get_registry("env").spec(n) for n in ("dummy", "subproc", "shmem")}
    load = get_registry("env").load
    problems = _space_problems(installed, gym.spaces.Text(8), load)
    assert list(problems) == ["shmem"] and "Text" in problems["shmem"]
    assert _space_problems(installed, gym.spaces.Box(-1, 1, (3,)), load) == {}
    # measured: 2 ms steps on 4 envs want workers; shmem (preferred) cannot carry Text
    envs = rlblocks.make_vector_env("auto", _SlowTextEnv, num_envs=4, probe_seconds=0.05,
                                    verbose=False)
    with envs:
        assert type(envs).__name__ != "ShmemVectorEnv", envs.auto_choice
        obs, _ = envs.reset()
        assert obs.tolist() == ["r"] * 4
        assert "not 'shmem'" in envs.auto_choice, "the choice says why shmem was left out"


# -- options passed on to the chosen backend ---------------------------------------------------
def test_auto_passes_worker_options_on_and_chooses_among_backends_that_take_them() -> None:
    envs = rlblocks.make_vector_env("auto", "CartPole-v1", num_envs=2, probe_seconds=0.02,
                                    verbose=False, worker_timeout=7.5, restart_failed=True,
                                    max_restarts=1)
    with envs:
        # CartPole is cheap (auto alone would step it here), but only workers take these
        assert envs.worker_timeout == 7.5 and envs.restart_failed and envs.max_restarts == 1
        assert envs.local_envs == 0, "restart_failed keeps every env in a worker"
        assert "worker_timeout" in envs.auto_choice
        obs, *_ = (envs.reset(seed=0), envs.step(np.array([0, 1])))
        assert obs[0].shape == (2, 4)


def test_auto_names_an_option_no_backend_takes_or_a_bad_value() -> None:
    from rlblocks.run._auto_backend import _forwarded_options

    with pytest.raises(ConfigError, match=r"given restart_failed, worker_timeout, which no "
                       r"backend it may choose takes"):
        _forwarded_options({"worker_timeout": 5.0, "restart_failed": True},
                           {"dummy": _spec(False)})
    assert _forwarded_options({}, {"dummy": _spec(False)}) == {"dummy": _spec(False)}
    with pytest.raises(ConfigError, match=r"worker_timeout"):
        rlblocks.make_vector_env("auto", "CartPole-v1", num_envs=2, worker_timeout=-1.0)
    with pytest.raises(ConfigError, match=r"\$\.context"):
        rlblocks.make_vector_env("auto", "CartPole-v1", num_envs=2, probe_seconds=0.02,
                                 verbose=False, context="telepathy")
    with pytest.raises(ConfigError, match=r"no_such_option"):
        rlblocks.make_vector_env("auto", "CartPole-v1", num_envs=2, no_such_option=1)
