"""Bad input of every kind, through the command line and the Python API: each case is a one-line
error naming the problem and the fix (``rlblocks`` exits with 2, the API raises an rlblocks
error), a warning where the input is legal but does nothing, or a run that now works; never a
traceback from deep inside, a hang, or a silent run. Ends with a property-based fuzz of what
envs return from ``step()`` and ``reset()``."""

from __future__ import annotations

import errno
import importlib
import json
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlblocks
import rlblocks.plugins
import rlblocks.run
import rlblocks.tools
from rlblocks import Collector, make_buffer, make_policy, make_vector_env
from rlblocks.cli import main as cli
from rlblocks.contracts import (
    ConfigError,
    EnvWorkerError,
    NonFiniteError,
    RlblocksError,
    writable_dir_problem,
    writable_file_problem,
)

QUIET = ["--no-progress", "--set", "run.loggers=[]"]
#: a short run with one env of each kind, tested only at its end
TINY = [
    "trainer.max_env_steps=200",
    "trainer.warmup_steps=20",
    "trainer.test_interval=10000",
    "trainer.test_episodes=1",
    "env.num_envs=1",
    "env.num_test_envs=1",
]


def _sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def _cli_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    """Run the command; it must exit with 2 and write exactly one line to stderr (warnings
    aside), an ``error: ...`` line without a traceback."""
    capsys.readouterr()
    code = cli(args)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if not ln.startswith("warning: ")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0].removeprefix("error: ")


def _usage_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    """A flag argparse refuses: exit 2 with its usage line and one error line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


# -- envs that return what they should not --------------------------------------------------------

ENV_MODULE = '''
import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register


class Base(gym.Env):
    """Three numbers, two actions, 20 steps; subclasses return something wrong."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), self._rew(), self._term(), self.t >= 20, {}

    def _obs(self):
        return np.zeros(3, np.float32)

    def _rew(self):
        return 1.0

    def _term(self):
        return False


class ArrayReward(Base):
    def _rew(self):
        return np.array([1.0, 2.0])


class ArrayTerm(Base):
    def _term(self):
        return np.array([False, True])


class StrReward(Base):
    def _rew(self):
        return "1.0"


class StrTerm(Base):
    def _term(self):
        return "no"


class TextObs(Base):
    """MiniGrid's raw observation: an image and a Text mission."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict(
            {"image": gym.spaces.Box(0, 255, (3,), np.uint8), "mission": gym.spaces.Text(20)}
        )

    def _obs(self):
        return {"image": np.zeros(3, np.uint8), "mission": "go"}


class CtorFails(Base):
    def __init__(self):
        raise RuntimeError("cannot open the simulator")


class NoSpaces(gym.Env):
    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 1.0, False, False, {}


for _name in ("ArrayReward", "ArrayTerm", "StrReward", "StrTerm", "TextObs", "CtorFails"):
    register(f"{_name}-v0", entry_point=f"{__name__}:{_name}", disable_env_checker=True)
'''


@pytest.fixture(scope="module")
def envs_module(tmp_path_factory: pytest.TempPathFactory):
    """The module above, importable; its env ids are ``MODULE:Name-v0``."""
    where = tmp_path_factory.mktemp("envs")
    name = f"bad_envs_{os.getpid()}"
    (where / f"{name}.py").write_text(ENV_MODULE)
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(where))
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run to evaluate and plot."""
    run = tmp_path_factory.mktemp("trained") / "run"
    rlblocks.train("dqn", overrides=[*TINY, "trainer.checkpoint_interval=100"], run_dir=run,
                   loggers=["csv"], progress=False, quiet=True)  # fmt: skip
    return run


# -- the config: values a run cannot take --------------------------------------------------------

CONFIG_CASES = [
    # (algo, overrides, what the one line says)
    ("dqn", [f"run.seed={2**64}"], "$.run.seed: must be an int >= 0 and at most 2**63 - 1"),
    ("dqn", ["buffer.size=1"], "$.trainer.batch_size: 64 exceeds buffer.size=1"),
    ("dqn", ["trainer.batch_size=500", "buffer.size=100"], "500 exceeds buffer.size=100"),
    ("dqn", ["trainer.batch_size=1000000000"], "$.trainer.batch_size: 1000000000 exceeds"),
    ("dqn", ["buffer.size=1000000000000"], "lower buffer.size"),
    ("dqn", ["env.num_envs=200000"], "num_envs=200000"),
    ("dqn", ["buffer.sampler=sequence"], "$.buffer.sampler: 'sequence' samples windows of steps "
                                         "for recurrent algorithms"),
    ("dqn", ["trainer.update_per_step=1e9"], "$.trainer.update_per_step: must be a number from "
                                             "0 to 1000"),
    ("dqn", ["algo.n_step=5000", "trainer.max_env_steps=1000", "trainer.warmup_steps=0"],
     "$.algo.n_step: 5000 exceeds trainer.max_env_steps=1000"),
    ("dqn", ['env.policy_mapping={"a"="b"}'], "$.env.policy_mapping: maps the agents of a "
                                              "multi-agent env"),
    ("dqn", ["buffer.path=somewhere"], "$.buffer.path: 'somewhere' is where storage='memmap' "
                                       "keeps its array files"),
    ("dqn", ["buffer.stack_num=5000"], "$.buffer.stack_num: 5000 frames"),
    ("dqn", ["env.backend=subproc", "env.worker_timeout=nan"], "worker_timeout must be positive"),
]  # fmt: skip


@pytest.mark.parametrize(("algo", "overrides", "said"), CONFIG_CASES)
def test_a_config_a_run_cannot_take_is_one_line_from_the_cli_and_the_api(
    algo: str, overrides: list[str], said: str, capsys, tmp_path: Path
) -> None:
    started = time.monotonic()
    dry = _cli_error(capsys, ["train", algo, "--dry-run", *_sets(overrides)])
    assert said in dry
    run = _cli_error(capsys, ["train", algo, "--run-dir", str(tmp_path / "cli"), *QUIET,
                              *_sets(overrides)])  # fmt: skip
    assert said in run
    with pytest.raises(RlblocksError) as caught:
        rlblocks.train(algo, overrides=overrides, run_dir=tmp_path / "api", progress=False,
                       loggers=[])  # fmt: skip
    assert said in str(caught.value)
    assert not (tmp_path / "cli").exists() and not (tmp_path / "api").exists()
    assert time.monotonic() - started < 60, "refused before the envs and the training"


def test_a_deeply_nested_config_is_refused_without_recursing(capsys, tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"algo": ' + '{"x": ' * 5000 + "1" + "}" * 5001)
    assert "nest more than 32 levels deep" in _cli_error(
        capsys, ["train", "dqn", "--config", str(deep), "--dry-run"]
    )
    nested = "[" * 3000 + "]" * 3000
    assert "nest more than 32 levels deep" in _cli_error(
        capsys, ["train", "dqn", "--set", f"algo.x={nested}", "--dry-run"]
    )
    with pytest.raises(ConfigError, match="nest more than 32 levels deep"):
        rlblocks.resolve_train_config("dqn", overrides=["algo" + ".x" * 500 + "=1"])
    data: dict = {}
    node = data
    for _ in range(100):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ConfigError, match="nest more than 32 levels deep"):
        rlblocks.resolve_train_config("dqn", config={"algo": data})


def test_a_huge_env_count_fails_before_any_env_is_made(capsys, tmp_path: Path) -> None:
    made = []

    def factory() -> gym.Env:
        made.append(1)
        return gym.make("CartPole-v1")

    with pytest.raises(ConfigError, match="make size >= num_envs"):
        rlblocks.train("dqn", env=factory, overrides=["env.num_envs=200000"],
                       run_dir=tmp_path / "run", loggers=[], progress=False)  # fmt: skip
    assert len(made) <= 1  # the probe that reads the env's id, not 200,000 envs


def test_seeds_out_of_range_are_refused_by_flag(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "is not a seed" in _usage_error(capsys, ["train", "dqn", "--seed", str(2**64)])
    assert "is not a seed" in _usage_error(capsys, ["eval", "runs/x", "--seed", "-5"])
    said = _cli_error(capsys, ["train", "dqn", "--seeds", "0-100000000", "--run-dir",
                               "unused-never-made", *QUIET])  # fmt: skip
    assert "100000001 seeds, and one command trains at most 1000" in said
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("flags", "field"),
    [(["--num-envs", "2", "--set", "env.num_envs=4"], "--num-envs"),
     (["--logger", "csv", "--set", "run.loggers=[]"], "--logger"),
     (["--env", "Acrobot-v1", "--set", "env.id=CartPole-v1"], "--env")],
)  # fmt: skip
def test_a_flag_and_a_set_of_the_same_field_are_refused(flags, field, capsys) -> None:
    said = _cli_error(capsys, ["train", "dqn", *flags, "--dry-run"])
    assert said.startswith(f"pass {field} or --set") and "would be ignored" in said


# -- settings that do nothing: a warning ---------------------------------------------------------


@pytest.mark.parametrize(
    ("algo", "overrides", "said"),
    [("dqn", ["trainer.repeat_per_collect=4"], "trainer.repeat_per_collect=4: it applies to "
                                               "on-policy algorithms"),
     ("dqn", ["trainer.episode_per_collect=4"], "'dqn' trains off-policy, so it does nothing"),
     ("ppo", ["trainer.warmup_steps=100"], "it applies to off-policy algorithms"),
     ("ippo", ["env.id=CartPole-v1"], "algo 'ippo' is made for multi-agent envs, and "
                                      "'CartPole-v1' has one agent")],
)  # fmt: skip
def test_a_setting_that_does_nothing_is_a_warning(algo, overrides, said, capsys) -> None:
    capsys.readouterr()
    assert cli(["train", algo, "--dry-run", *_sets(overrides)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("warning: ") and said in line for line in err), err
    with pytest.warns(UserWarning, match=re.escape(said)):
        rlblocks.run.preflight(rlblocks.resolve_train_config(algo, overrides=overrides))


def test_ippo_on_a_single_agent_env_says_which_algorithm_is_the_same() -> None:
    with pytest.warns(UserWarning, match="train ppo for the same result"):
        rlblocks.run.preflight(rlblocks.resolve_train_config("ippo", env="CartPole-v1"))


# -- paths: unwritable, too long, a file in the way -----------------------------------------------


def test_writable_dir_problem_names_what_is_in_the_way(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "afile").write_text("x")
    assert writable_dir_problem(tmp_path / "new" / "deeper") is None
    assert "is a file, not a directory" in writable_dir_problem(tmp_path / "afile" / "sub")
    assert "is a file" in writable_dir_problem(tmp_path / "afile")
    assert "longer than the 255" in writable_dir_problem(tmp_path / ("a" * 300) / "x")
    assert writable_file_problem(tmp_path) == f"{tmp_path} is a directory; name a file"
    # a read-only file system (or, for other users than root, a directory without write access)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: str(p) != str(tmp_path) and
                        real_access(p, mode))  # fmt: skip
    assert "is not writable (a read-only file system" in writable_dir_problem(tmp_path / "x")


@pytest.mark.parametrize("case", ["under-a-file", "long-name", "read-only"])
def test_an_unusable_run_directory_is_one_line_before_anything_is_written(
    case: str, capsys, tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "afile").write_text("x")
    run = {"under-a-file": tmp_path / "afile" / "run", "long-name": tmp_path / ("r" * 300),
           "read-only": tmp_path / "ro" / "run"}[case]  # fmt: skip
    if case == "read-only":
        (tmp_path / "ro").mkdir()
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: not str(p).endswith("/ro") and
                            real_access(p, mode))  # fmt: skip
    said = _cli_error(capsys, ["train", "dqn", "--run-dir", str(run), *QUIET, *_sets(TINY)])
    assert said.startswith(f"the run directory {run}")
    assert "pick" in said  # the fix
    assert _cli_error(capsys, ["train", "dqn", "--run-dir", str(run), "--dry-run"]) == said
    with pytest.raises(ConfigError, match="the run directory"):
        rlblocks.train("dqn", overrides=TINY, run_dir=run, loggers=[], progress=False)


@pytest.mark.parametrize("case", ["existing-file", "under-a-file", "read-only"])
def test_a_memmap_path_that_cannot_hold_the_buffer_is_one_line(
    case: str, capsys, tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "afile").write_text("x")
    path = {"existing-file": tmp_path / "afile", "under-a-file": tmp_path / "afile" / "buf",
            "read-only": tmp_path / "ro" / "buf"}[case]  # fmt: skip
    if case == "read-only":
        (tmp_path / "ro").mkdir()
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: not str(p).endswith("/ro") and
                            real_access(p, mode))  # fmt: skip
    overrides = [*TINY, "buffer.storage=memmap", f"buffer.path={path}"]
    said = _cli_error(capsys, ["train", "dqn", "--run-dir", str(tmp_path / "run"), *QUIET,
                               *_sets(overrides)])  # fmt: skip
    assert "buffer.path" in said and str(path) in said
    assert "buffer.path" in _cli_error(capsys, ["train", "dqn", "--dry-run", *_sets(overrides)])
    with pytest.raises(ConfigError, match=r"buffer\.path"):
        make_buffer("replay", 100, 1, storage="memmap", path=path)
    assert (tmp_path / "afile").read_text() == "x"  # nothing written over it


def test_a_memmap_path_in_a_missing_directory_is_made(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "deeper" / "buf"
    result = rlblocks.train(
        "dqn",
        overrides=[*TINY, "buffer.storage=memmap", f"buffer.path={path}"],
        run_dir=tmp_path / "run",
        loggers=[],
        progress=False,
        quiet=True,
    )
    assert result.env_steps >= 200 and any(path.glob("data.*.npy"))  # fmt: skip


def test_outputs_into_unusable_places_are_refused_before_the_work(
    trained: Path, capsys, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("x")
    blocked = tmp_path / "afile"
    said = _cli_error(capsys, ["eval", str(trained), "--json", str(blocked / "r.json")])
    assert said.startswith("--json: ") and "is a file, not a directory" in said
    said = _cli_error(capsys, ["eval", str(trained), "--video", str(blocked / "v.gif")])
    assert said.startswith("cannot write the video: ")
    said = _cli_error(capsys, ["plot", str(trained), "-o", str(blocked / "p.png")])
    assert said.startswith("cannot write the plot: ")
    said = _cli_error(capsys, ["tune", "dqn", "--trials", "1", "--max-env-steps", "200",
                               "--run-dir", str(tmp_path / "t"), "-o", str(blocked / "b.toml"),
                               *_sets(TINY[1:])])  # fmt: skip
    assert said.startswith("-o: ")
    assert not (tmp_path / "t").exists()  # refused before any trial
    agent = rlblocks.load(trained)
    with pytest.raises(ConfigError, match="cannot write the video"):
        agent.record(blocked / "v.gif")
    with pytest.raises(ConfigError, match="cannot write the plot"):
        rlblocks.tools.plot_runs([trained], blocked / "p.png")


def test_tune_refuses_a_study_file_that_is_no_database_and_fractional_int_bounds(
    capsys, tmp_path: Path
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("my notes, not a study")
    base = ["tune", "dqn", "--trials", "1", "--max-env-steps", "200", "--run-dir",
            str(tmp_path / "t"), *_sets(TINY[1:])]  # fmt: skip
    said = _cli_error(capsys, [*base, "--study", str(text)])
    assert said.startswith(f"--study {text} is not an SQLite database")
    assert text.read_text() == "my notes, not a study"
    said = _cli_error(capsys, [*base, "--param", "trainer.batch_size=int:1.5:3"])
    assert "int:LOW:HIGH searches whole numbers, and 1.5:3 has a fraction" in said


def test_eval_with_a_negative_seed_is_refused_by_the_api(trained: Path) -> None:
    agent = rlblocks.load(trained)
    with pytest.raises(ConfigError, match=r"seed must be a whole number >= 0 \(or None\), got -5"):
        agent.evaluate(episodes=1, seed=-5)


# -- a full disk -----------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["checkpoint", "buffer"])
def test_a_full_disk_is_one_line_and_the_last_checkpoint_stays(
    what: str, capsys, tmp_path: Path, monkeypatch
) -> None:
    """The second checkpoint runs out of space (torch's writer, or h5py's, which says it in a
    paragraph): one line, no temporary file left, the first checkpoint intact."""
    import h5py
    import torch

    saves = {"latest.pt": 0, "buffer.h5": 0}
    real_save, real_file = torch.save, h5py.File

    def full_save(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and "trainer" in obj:  # latest.pt, not best.pt
            saves["latest.pt"] += 1
            if what == "checkpoint" and saves["latest.pt"] == 2:
                f.write(b"partial")
                try:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                except OSError as exc:  # torch reports the failed write as its own error
                    raise RuntimeError("[enforce fail at inline_container.cc:672] . "
                                       "unexpected pos 236032 vs 235920") from exc  # fmt: skip
        return real_save(obj, f, *args, **kwargs)

    def full_file(name, mode="r", *args, **kwargs):
        if "w" in mode and "buffer.h5" in str(name):
            saves["buffer.h5"] += 1
            if saves["buffer.h5"] == 2:
                raise OSError("Can't close file (file write failed: time = now\n, filename = "
                              f"'{name}', errno = 28, error message = 'No space left on "
                              "device')")  # fmt: skip
        return real_file(name, mode, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_save)
    monkeypatch.setattr(h5py, "File", full_file)
    run = tmp_path / "run"
    overrides = [*TINY, "trainer.max_env_steps=400", "trainer.checkpoint_interval=150"]
    said = _cli_error(capsys, ["train", "dqn", "--run-dir", str(run), *QUIET, *_sets(overrides)])
    assert said.startswith(f"cannot write {run / 'checkpoints'}")
    assert "No space left on device; free space on that disk" in said
    gens = sorted((run / "checkpoints").glob("gen-*"))
    assert [g.name for g in gens] == ["gen-00000001"]
    assert not list(run.rglob("*.tmp")) and not list(run.rglob(".gen-*"))
    assert rlblocks.load(gens[0] / "latest.pt").policy is not None


# -- envs that return the wrong things -----------------------------------------------------------


@pytest.mark.parametrize(
    ("env_class", "said"),
    [("ArrayReward", "env 0 returned the reward array([1., 2.]) (ndarray) from step(); a reward "
                     "is one number"),
     ("ArrayTerm", "env 0 returned terminated=array([False, True]) (ndarray) from step(); it "
                   "must be a bool"),
     ("StrReward", "env 0 returned the reward '1.0' (str) from step()"),
     ("StrTerm", "env 0 returned terminated='no' (str) from step()")],
)  # fmt: skip
def test_a_reward_or_flag_of_the_wrong_type_is_one_line_naming_the_env(
    env_class: str, said: str, envs_module, capsys, tmp_path: Path
) -> None:
    env_id = f"{envs_module.__name__}:{env_class}-v0"
    line = _cli_error(capsys, ["train", "dqn", "--env", env_id, "--run-dir",
                               str(tmp_path / "cli"), *QUIET, *_sets(TINY)])  # fmt: skip
    assert line.startswith(f"{env_class}-v0 (step): ") and said in line
    with pytest.raises(EnvWorkerError, match=said.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):  # fmt: skip
        rlblocks.train("dqn", env=getattr(envs_module, env_class), overrides=TINY,
                       run_dir=tmp_path / "api", progress=False, loggers=[])  # fmt: skip


def test_the_process_backends_check_what_envs_return_too(envs_module, capsys, tmp_path) -> None:
    env_id = f"{envs_module.__name__}:StrReward-v0"
    line = _cli_error(
        capsys,
        [
            "train",
            "dqn",
            "--env",
            env_id,
            "--backend",
            "subproc",
            "--run-dir",
            str(tmp_path / "run"),
            *QUIET,
            *_sets(TINY),
        ],
    )
    assert "env 0 returned the reward '1.0' (str) from step()" in line  # fmt: skip


def test_an_env_whose_constructor_raises_is_one_line_in_a_dry_run_and_a_run(
    envs_module, capsys, tmp_path: Path
) -> None:
    env_id = f"{envs_module.__name__}:CtorFails-v0"
    said = f"env '{env_id}' could not be made: RuntimeError: cannot open the simulator"
    assert _cli_error(capsys, ["train", "dqn", "--env", env_id, "--dry-run"]).startswith(said)
    assert _cli_error(capsys, ["train", "dqn", "--env", env_id, "--run-dir",
                               str(tmp_path / "run"), *QUIET]).startswith(said)  # fmt: skip


def test_a_text_observation_is_refused_by_the_dry_run_as_by_the_run(
    envs_module, capsys, tmp_path: Path
) -> None:
    """MiniGrid's raw observation has a Text ``mission``: a dry run builds the policy a run
    builds, so it refuses what training would refuse, and says how to drop the entry."""
    env_id = f"{envs_module.__name__}:TextObs-v0"
    said = "the observation entry ['mission'] is a Text space: no built-in encoder for Text"
    dry = _cli_error(capsys, ["train", "dqn", "--env", env_id, "--dry-run"])
    assert dry.startswith(said) and "FilterObservation" in dry and "['image']" in dry
    run = _cli_error(capsys, ["train", "dqn", "--env", env_id, "--run-dir",
                              str(tmp_path / "run"), *QUIET, *_sets(TINY)])  # fmt: skip
    assert run == dry
    with pytest.raises(ConfigError, match=r"no built-in encoder for Text"):
        make_policy("dqn", envs_module.TextObs().observation_space, gym.spaces.Discrete(2))


class _NoSpaces(gym.Env):
    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 1.0, False, False, {}


class _Spaces(gym.Env):
    """An env with the given spaces that returns ``obs`` (20 steps)."""

    def __init__(self, observation_space, action_space, obs) -> None:
        self.observation_space, self.action_space, self.obs, self.t = (
            observation_space, action_space, obs, 0
        )  # fmt: skip

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.obs, {}

    def step(self, action):
        self.t += 1
        return self.obs, 0.0, False, self.t >= 20, {}


def _raises() -> gym.Env:
    raise RuntimeError("no simulator here")


BOX3 = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT2 = gym.spaces.Discrete(2)
ENV_CASES = [
    ("returns-none", lambda: None, ConfigError, "returned None, not a gymnasium env"),
    ("raises", _raises, EnvWorkerError, "raised RuntimeError: no simulator here while making"),
    ("no-spaces", _NoSpaces, ConfigError, "an env without an observation space"),
    ("empty-dict", lambda: _Spaces(gym.spaces.Dict({}), ACT2, {}), ConfigError,
     "observation space Dict() has an empty Dict, with no entries"),
    ("zero-box", lambda: _Spaces(gym.spaces.Box(-1, 1, (0,), np.float32), ACT2,
                                 np.zeros(0, np.float32)),
     ConfigError, "has a Box of shape (0,), which holds no value"),
    ("zero-action", lambda: _Spaces(BOX3, gym.spaces.Box(-1, 1, (0,), np.float32),
                                    np.zeros(3, np.float32)),
     ConfigError, "the env's action space"),
    ("below-start", lambda: _Spaces(gym.spaces.MultiDiscrete([3, 3], start=[5, 5]), ACT2,
                                    np.array([0, 0])),
     ConfigError, "returned the observation [0, 0] from reset(), outside its observation space"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "error", "said"), [c[1:] for c in ENV_CASES],
                         ids=[c[0] for c in ENV_CASES])  # fmt: skip
def test_an_env_factory_or_env_that_cannot_be_used_is_one_error(
    factory, error, said, tmp_path: Path
) -> None:
    algo = "sac" if "action" in said else "dqn"
    with pytest.raises(error) as caught:
        rlblocks.train(algo, env=factory, overrides=TINY, run_dir=tmp_path / "run",
                       progress=False, loggers=[])  # fmt: skip
    assert said in str(caught.value) and "\n" not in str(caught.value)
    if "reset()" not in said:  # refused while the run is built, before anything is written
        assert not (tmp_path / "run").exists()


def test_the_dummy_backend_names_a_factory_that_fails(tmp_path: Path) -> None:
    backend = rlblocks.plugins.get_registry("env").load("dummy")
    with pytest.raises(EnvWorkerError, match=r"env 1 raised while being made: RuntimeError"):
        backend([lambda: gym.make("CartPole-v1"), _raises])
    with pytest.raises(EnvWorkerError, match="env 0's factory returned NoneType, not a gymnasium"):
        backend([lambda: None])


# -- recurrent state from a random warm-up -------------------------------------------------------


def test_r2d2_with_a_random_warm_up_trains_and_stores_the_state_of_warm_up_steps(
    capsys, tmp_path: Path
) -> None:
    overrides = ["trainer.warmup_steps=200", "trainer.max_env_steps=400", "env.num_envs=2",
                 "env.num_test_envs=1", "trainer.test_episodes=1", "trainer.test_interval=10000",
                 "buffer.length=4"]  # fmt: skip
    capsys.readouterr()
    assert cli(["train", "r2d2", "--run-dir", str(tmp_path / "cli"), *QUIET,
                *_sets(overrides)]) == 0, capsys.readouterr().err  # fmt: skip
    result = rlblocks.train("r2d2", overrides=overrides, run_dir=tmp_path / "api", loggers=[],
                            progress=False, quiet=True)  # fmt: skip
    assert result.env_steps >= 400 and result.gradient_steps > 0
    import h5py

    gen = sorted((tmp_path / "api" / "checkpoints").glob("gen-*"))[-1]
    with h5py.File(gen / "buffer.h5", "r") as f:
        stored: list[str] = []
        f.visit(stored.append)
    assert any("policy/state" in name for name in stored), stored


# -- damaged log lines on resume -------------------------------------------------------------------


@pytest.mark.parametrize("log", ["train.csv", "update.csv"])
def test_a_damaged_log_line_does_not_stop_a_resume_and_nothing_logged_is_lost(
    log: str, capsys, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    overrides = [*TINY, "trainer.checkpoint_interval=100", "trainer.log_interval=50"]
    rlblocks.train("dqn", overrides=overrides, run_dir=run, loggers=["csv"], progress=False,
                   quiet=True)  # fmt: skip
    path = run / "logs" / log
    before = path.read_bytes()
    path.write_bytes(before + b"\xff\xfe\x00 torn line,1,2\n")
    capsys.readouterr()
    assert cli(["resume", str(run), "--max-env-steps", "400", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {path} has damaged lines" in err and "Traceback" not in err
    after = path.read_bytes()
    assert after.startswith(before[: before.index(b"\n")])  # the header
    kept = [ln for ln in before.decode().splitlines()[1:]]
    text = after.decode("utf-8", errors="replace")
    assert all(line in text for line in kept)  # every row logged before is still there
    assert len(text.splitlines()) > len(kept) + 1  # and the resumed run logged more


# -- the Python API -------------------------------------------------------------------------------


@pytest.fixture
def parts():
    envs = make_vector_env("dummy", "CartPole-v1", 2)
    policy = make_policy("dqn", envs.observation_space, envs.action_space)
    yield envs, policy
    envs.close()


def test_acting_on_a_nan_observation_is_refused(trained: Path) -> None:
    agent = rlblocks.load(trained)
    assert agent.act(np.zeros(4, np.float32)) in (0, 1)
    with pytest.raises(NonFiniteError, match=r"act\(\) got an observation with NaN"):
        agent.act(np.full(4, np.nan, np.float32))


@pytest.mark.parametrize("kwargs", [{"n_step": 2.5}, {"n_episode": 1.0}, {"fragment": "3"}])
def test_collect_counts_must_be_whole_numbers(parts, kwargs) -> None:
    envs, policy = parts
    collector = Collector(policy, envs, make_buffer("replay", 100, 2))
    with pytest.raises(ConfigError, match="must be a whole number"):
        collector.collect(**kwargs)
    assert collector.collect(n_step=4).n_step >= 4


def test_update_needs_a_buffer_with_steps_and_a_sample_size(parts) -> None:
    envs, policy = parts
    buffer = make_buffer("replay", 100, 2)
    with pytest.warns(UserWarning, match="update\\(\\) got an empty buffer, so it learned"):
        assert policy.update(8, buffer) == {}
    with pytest.raises(ConfigError, match="update\\(\\) needs the buffer to learn from"):
        policy.update(8, None)
    Collector(policy, envs, buffer).collect(n_step=20)
    with pytest.raises(ConfigError, match="sample_size must be a whole number >= 0"):
        policy.update(-1, buffer)
    assert policy.update(8, buffer)  # the statistics of a gradient step


def test_a_collector_refuses_a_buffer_or_policy_made_for_other_envs(parts) -> None:
    envs, policy = parts
    with pytest.raises(ConfigError, match="the buffer was made for num_envs=3 and the collector "
                                          "steps 2 env"):  # fmt: skip
        Collector(policy, envs, make_buffer("replay", 100, 3))
    pendulum = make_vector_env("dummy", "Pendulum-v1", 2)
    try:
        with pytest.raises(
            ConfigError,
            match=r"another observation space than the envs have "
            r"\(they have the shape \(3,\) instead of \(4,\)",
        ):
            Collector(policy, pendulum, None)  # fmt: skip
    finally:
        pendulum.close()


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [({"hooks": [object()]}, "implements no rlblocks hook, so it would never be called"),
     ({"hooks": 5}, "hooks must be a list of hook objects, got int 5"),
     ({"run_dir": 123}, "run_dir must be a path (a str or pathlib.Path), got int 123")],
)  # fmt: skip
def test_train_arguments_of_the_wrong_kind_are_refused(kwargs, said, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kwargs.setdefault("run_dir", tmp_path / "run")
    with pytest.raises(ConfigError) as caught:
        rlblocks.train("dqn", overrides=TINY, loggers=[], progress=False, **kwargs)
    assert said in str(caught.value)
    assert not (tmp_path / "run").exists() and not (tmp_path / "123").exists()
    with pytest.raises(ConfigError, match="cannot tell which algorithm a int is"):
        rlblocks.train(123, overrides=TINY)


# -- fuzz: whatever an env returns, a run ends well or in an rlblocks error -----------------------


class _Scripted(gym.Env):
    """Returns the steps of its script in turn, and ``first`` from ``reset``."""

    observation_space = BOX3
    action_space = ACT2

    def __init__(self, script, first=None) -> None:
        self.script, self.t = script, 0
        self.first = np.zeros(3, np.float32) if first is None else first

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.first, {}

    def step(self, action):
        self.t += 1
        obs, rew, terminated, truncated = self.script[self.t % len(self.script)]
        if self.t % 20 == 0:  # episodes end, whatever the script says
            truncated = True
        return obs, rew, terminated, truncated, {}


def _made(make, value):
    """``make(value)``, or ``value`` when numpy refuses it (a number beyond the dtype)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make(value)
    except (OverflowError, ValueError, TypeError):
        return value


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**1100), 2**1100),
    st.booleans(),
)  # fmt: skip
junk = st.one_of(
    st.none(), st.text(max_size=4), st.lists(numbers, max_size=3),
    st.dictionaries(st.text(max_size=2), numbers, max_size=2),
)  # fmt: skip
numpy_scalars = st.tuples(
    st.sampled_from([np.float32, np.float64, np.int64, np.bool_, np.array]), numbers
).map(lambda fv: _made(*fv))
arrays = st.lists(numbers, max_size=4).map(lambda xs: _made(np.array, xs))
# what envs return most of the time, then anything at all
finite = st.floats(-1e6, 1e6)
rewards = st.one_of(finite, finite, finite, finite, numbers, numpy_scalars, arrays, junk)
flags = st.one_of(*[st.just(False)] * 6, st.booleans(), st.integers(-3, 3), numpy_scalars,
                  arrays, junk)  # fmt: skip
good_obs = st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3).map(
    lambda v: np.array(v, np.float32)
)
observations = st.one_of(
    good_obs, good_obs, good_obs, good_obs, good_obs, arrays, junk, numpy_scalars,
    st.lists(numbers, min_size=3, max_size=3).map(lambda v: _made(np.array, v)),
)  # fmt: skip
FUZZ_POLICY = None


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    script=st.lists(st.tuples(observations, rewards, flags, flags), min_size=1, max_size=3),
    first=st.one_of(*[good_obs] * 6, observations),
)
def test_whatever_an_env_returns_a_collect_and_update_finish_or_raise_an_rlblocks_error(
    script, first
) -> None:
    global FUZZ_POLICY
    if FUZZ_POLICY is None:
        FUZZ_POLICY = make_policy("dqn", BOX3, ACT2)
    finished = False
    try:
        envs = make_vector_env("dummy", lambda: _Scripted(script, first), num_envs=2)
    except RlblocksError:
        return
    try:
        buffer = make_buffer("replay", 64, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gymnasium's own notes on odd values
            Collector(FUZZ_POLICY, envs, buffer).collect(n_step=12)
            FUZZ_POLICY.update(8, buffer)
        finished = True
    except RlblocksError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip()
    finally:
        envs.close()
    if finished:  # what was stored is what a run learns from: finite numbers
        batch, _ = buffer.sample(0)
        assert np.isfinite(batch.rew).all() and batch.terminated.dtype == bool


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(step=st.tuples(observations, rewards, flags, flags))
def test_whatever_an_env_returns_a_whole_run_finishes_or_raises_an_rlblocks_error(
    step, tmp_path_factory
) -> None:
    run = tmp_path_factory.mktemp("fuzzrun") / "run"
    good = (np.zeros(3, np.float32), 1.0, False, False)
    try:
        result = rlblocks.train(
            "dqn", env=lambda: _Scripted([good, step]),
            overrides=[*TINY, "trainer.max_env_steps=60", "trainer.warmup_steps=10"],
            run_dir=run, loggers=[], progress=False, quiet=True,
        )  # fmt: skip
    except RlblocksError as exc:
        assert str(exc).strip()
        return
    assert result.env_steps >= 60 and math.isfinite(result.best_test_return)
    assert json.loads((run / "result.json").read_text())["env_steps"] == result.env_steps
