"""The command line and the after-training path on a real (small) run: messages name the flags
on the command line and the arguments in Python, flags that would be ignored are refused, damaged
run files are named by every reader alike, a failed start leaves no trace, and a stop signal
that lands after the budget is met records a finished run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.cli import build_parser
from rlblocks.cli import main as cli
from rlblocks.contracts import CheckpointError, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.run import verify_run

SMALL = [
    "trainer.max_env_steps=600",
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


def _train(run: Path, **kwargs) -> rlblocks.TrainResult:
    kwargs.setdefault("overrides", SMALL)
    return rlblocks.train("dqn", seed=0, run_dir=run, progress=False, loggers=[], **kwargs)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 600-step DQN run on CartPole-v1 (a few seconds); tests copy it to change it."""
    run = tmp_path_factory.mktemp("cli-runs") / "run"
    _train(run)
    return run


@pytest.fixture
def run(finished: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


# -- messages speak the language the reader typed --------------------------------------------------


def test_a_run_dir_holding_a_run_is_refused_with_the_flag_or_the_argument(run: Path, capsys):
    assert cli(["train", "dqn", "--run-dir", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "pass --overwrite to replace it" in err and "overwrite=True" not in err
    assert f"`rlblocks resume {run}`" in err
    with pytest.raises(ConfigError, match=r"pass overwrite=True to replace it") as info:
        _train(run)
    assert "--overwrite" not in str(info.value) and "rlblocks.resume(" in str(info.value)


def test_a_missing_best_pt_points_to_which_latest_in_the_words_typed(run: Path, capsys):
    (run / "checkpoints" / "best.pt").unlink()
    assert cli(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert "load it with --which latest" in err and "which='latest'" not in err
    with pytest.raises(CheckpointError, match=r"load it with which='latest'$"):
        rlblocks.load(run)


def test_a_missing_gpu_is_answered_with_a_flag_the_command_has(run: Path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    before = (run / "result.json").read_text()
    # resume has --device (a run trained on a GPU continues on a machine without one)
    assert cli(["resume", str(run), "--device", "cuda", "--max-env-steps", "1200"]) == 2
    err = capsys.readouterr().err
    assert "sees no CUDA GPU here; use --device cpu" in err
    # the failed resume left the finished run as it was (its result.json stays)
    assert (run / "result.json").read_text() == before
    with pytest.raises(ConfigError, match=r"use device='cpu'"):
        rlblocks.resume(run, overrides=["trainer.max_env_steps=1200", "run.device=cuda"])
    assert (run / "result.json").is_file()


def test_tune_refuses_a_setting_every_trial_would_refuse_before_the_study(
    tmp_path: Path, capsys, monkeypatch
):
    pytest.importorskip("optuna")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    root = tmp_path / "tune"
    assert cli(["tune", "dqn", "--trials", "1", "--run-dir", str(root),
                "--set", "run.device=cuda"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "use --set run.device=cpu" in err and "Traceback" not in err
    assert not root.exists()  # no study, no failed trial in it


def test_a_factory_run_is_evaluated_on_the_command_line_with_env(tmp_path: Path, capsys):
    run = tmp_path / "run"
    _train(run, env=lambda: gym.make("CartPole-v1"))
    assert cli(["eval", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "--env CartPole-v1" in err and "env=<the factory>" not in err
    assert cli(["eval", str(run), "--episodes", "1", "--env", "CartPole-v1"]) == 0
    assert "eval: 1 episodes" in capsys.readouterr().out


# -- resume --no-progress (and --device) -----------------------------------------------------------


def test_resume_takes_no_progress_and_device_as_changes_of_the_saved_config(monkeypatch):
    import rlblocks.run as experiment

    calls = []
    monkeypatch.setattr(experiment, "resume", lambda run_dir, overrides=(), **kw: calls.append(
        (run_dir, list(overrides))) or {"stop_reason": "reached max_env_steps=1"})  # fmt: skip
    assert cli(["resume", "runs/x", "--no-progress", "--device", "cpu"]) == 0
    assert calls == [(Path("runs/x"), ["run.device=cpu", "run.progress=false"])]
    args = build_parser().parse_args(["resume", "runs/x"])
    assert args.no_progress is False and args.device is None


def test_resume_no_progress_hides_the_bar_of_a_run_that_showed_one(tmp_path: Path, capsys):
    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, run_dir=run, loggers=[], overrides=SMALL, progress=True)
    assert "training dqn on CartPole-v1" in capsys.readouterr().err  # progress lines (no tty)
    assert cli(["resume", str(run), "--max-env-steps", "800", "--no-progress"]) == 0
    saved = json.loads((run / "config.json").read_text())
    assert saved["run"]["progress"] is False
    err = capsys.readouterr().err
    assert "resuming dqn" not in err and "test return" not in err.split("stopped:")[0]


# -- videos ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--video-episodes", "3"], ["--fps", "10"],
                                   ["--max-frames", "50", "--video-episodes", "2"]])
def test_video_settings_without_a_video_are_refused_by_name(run: Path, flags, capsys):
    assert cli(["eval", str(run), "--episodes", "1", *flags]) == 2
    err = capsys.readouterr().err
    named = err.removeprefix("error: ").split(" set")[0].split(", ")
    assert sorted(named) == sorted(f for f in flags if f.startswith("--"))
    assert "no video is recorded without --video FILE.mp4" in err


def test_a_video_cut_at_max_frames_says_so(run: Path, tmp_path: Path, capsys):
    pytest.importorskip("imageio")
    agent = rlblocks.load(run)
    video = tmp_path / "v.gif"
    with pytest.warns(UserWarning, match=r"cut at 20 frames \(max_frames=20\): 0 of 2 episode"):
        result = agent.record(video, episodes=2, seed=0, max_frames=20)
    assert len(result.returns) == 2 and video.is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole video says nothing
        agent.record(video, episodes=1, seed=0)
    assert cli(["eval", str(run), "--episodes", "1", "--video", str(video),
                "--video-episodes", "2", "--max-frames", "20"]) == 0  # fmt: skip
    assert "warning: the video" in capsys.readouterr().err


# -- an empty run directory ------------------------------------------------------------------------


def test_an_empty_run_dir_is_refused_by_its_field(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(["train", "dqn", "--no-progress", "--set", "run.run_dir="]) == 2
    assert "$.run.run_dir: must name a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["train", "dqn", "--run-dir", ""])
    assert "argument --run-dir: an empty run directory" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"\$\.run\.run_dir"):
        rlblocks.train("dqn", run_dir="", overrides=SMALL, progress=False, loggers=[])
    assert list(tmp_path.iterdir()) == []  # nothing was written into the current directory


# -- act on what env.reset() returns ---------------------------------------------------------------


def test_act_on_the_reset_pair_says_to_pass_the_observation(run: Path):
    agent = rlblocks.load(run)
    env = gym.make("CartPole-v1")
    with pytest.raises(ConfigError, match=r"obs, info = env\.reset\(\)"):
        agent.act(env.reset(seed=0))
    obs, _ = env.reset(seed=0)
    assert env.action_space.contains(agent.act(obs))


def test_the_reset_pair_check_leaves_tuple_observations_alone():
    from rlblocks.run._agent import _as_batch

    box = gym.spaces.Box(-1, 1, (3,), np.float32)
    x = np.zeros(3, np.float32)
    # a Tuple space whose second part is a Dict or a Tuple: a dict there is an observation
    with_dict = gym.spaces.Tuple((box, gym.spaces.Dict({"a": box})))
    batch, single = _as_batch((x, {"a": x}), with_dict)
    assert single and batch["1"]["a"].shape == (1, 3)
    with_tuple = gym.spaces.Tuple((box, gym.spaces.Tuple((box, box))))
    batch, single = _as_batch((x, {"0": x, "1": x}), with_tuple)
    assert single and batch["1"]["0"].shape == (1, 3)
    batch, single = _as_batch((x, 1), gym.spaces.Tuple((box, gym.spaces.Discrete(2))))
    assert single and batch["1"].shape == (1,)
    # where a dict cannot be the second part, the pair is what env.reset() returns
    with pytest.raises(ConfigError, match=r"env\.reset"):
        _as_batch((x, {}), gym.spaces.Tuple((box, gym.spaces.Discrete(2))))
    with pytest.raises(ConfigError, match=r"env\.reset"):
        _as_batch(((x, 1, 0), {}), gym.spaces.Tuple((box, gym.spaces.Discrete(2), box)))
    with pytest.raises(ConfigError, match=r"env\.reset"):
        _as_batch(({"a": x}, {}), gym.spaces.Dict({"a": box}))


# -- tune --param ranges ---------------------------------------------------------------------------


@pytest.mark.parametrize(("param", "named"), [
    ("algo.gamma=uniform:0.5:1.5", "the high end 1.5"),
    ("algo.lr=loguniform:1e-4:1e3", ""),  # lr has no upper limit: accepted
    ("algo.gamma=choice:0.9|2", "the choice 2"),
    ("algo.n_step=int:0:3", "the low end 0"),
])  # fmt: skip
def test_tune_checks_each_param_range_against_its_field_before_the_study(
    tmp_path: Path, param: str, named: str
):
    pytest.importorskip("optuna")
    from rlblocks.tools import check_space, parse_param, tune

    key, dist = parse_param(param)
    if not named:
        check_space("dqn", {key: dist})
        return
    with pytest.raises(ConfigError, match=rf"^--param {key}: {named} is refused by the field "
                                          rf"\(\$\.{key}: "):  # fmt: skip
        tune("dqn", trials=1, params=[param], run_dir=tmp_path / "t", report=print)
    assert not (tmp_path / "t").exists()  # refused before the study file was made


def test_tune_never_searches_a_field_fixed_with_set(tmp_path: Path):
    pytest.importorskip("optuna")
    from rlblocks.tools import tune

    fixed = ["algo.hidden_sizes=[32, 32]", "trainer.batch_size=48"]
    lines: list[str] = []
    out = tune("dqn", trials=1, run_dir=tmp_path / "t", max_env_steps=200, report=lines.append,
               overrides=[*fixed, *SMALL[1:]])  # fmt: skip
    assert "not searching algo.hidden_sizes: fixed by --set" in lines
    assert "not searching trainer.batch_size: fixed by --set" in lines
    assert "algo.hidden_sizes" not in out["best_params"] and "algo.lr" in out["best_params"]
    trial = json.loads((tmp_path / "t" / "trial-0" / "config.json").read_text())
    assert trial["algo"]["hidden_sizes"] == [32, 32] and trial["trainer"]["batch_size"] == 48
    with pytest.raises(ConfigError, match=r"^algo\.lr: both searched \(--param\) and fixed"):
        tune("dqn", trials=1, params=["algo.lr=loguniform:1e-4:1e-2"], overrides=["algo.lr=1e-3"],
             run_dir=tmp_path / "u")  # fmt: skip


# -- a failed start leaves nothing behind ----------------------------------------------------------


def test_a_train_that_fails_while_building_leaves_no_files(tmp_path: Path):
    bad = [*SMALL, 'env.make_kwargs={"bad": 1}']
    fresh = tmp_path / "fresh"
    with pytest.raises(ConfigError, match="cannot be made"):
        rlblocks.train("dqn", run_dir=fresh, overrides=bad, progress=False, loggers=["csv"])
    assert not fresh.exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="cannot be made"):
        rlblocks.train("dqn", run_dir=mine, overrides=bad, progress=False, loggers=["csv"])
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    _train(mine)  # and the directory takes a run afterwards
    assert (mine / "result.json").is_file()


def test_an_overwrite_whose_start_fails_keeps_the_run_it_would_replace(tmp_path: Path):
    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, run_dir=run, progress=False, loggers=["csv"], overrides=SMALL)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    bad = [*SMALL, 'env.make_kwargs={"bad": 1}']
    with pytest.raises(ConfigError, match="cannot be made"):
        rlblocks.train(
            "dqn", run_dir=run, overrides=bad, overwrite=True, progress=False, loggers=["csv"]
        )
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # every file of the old run, as it was; nothing of the failed start
    assert verify_run(run) == []  # and reads whole
    again = _train(run, overwrite=True, overrides=[*SMALL, "trainer.max_env_steps=400"])
    assert again.env_steps == 400
    assert json.loads((run / "result.json").read_text())["env_steps"] == 400
    assert not any(p.name.startswith(".replaced") for p in run.iterdir())
    assert not (run / "logs").exists()  # the replaced run's csv logs went with it


def test_a_kill_while_the_replaced_run_is_deleted_leaves_nothing_to_put_back(
    tmp_path: Path, monkeypatch
):
    """The old run goes once the new one has started; a kill halfway through deleting it must
    not leave a half-deleted ``.replaced-run``, which the next ``--overwrite`` would put back
    as if it were the old run whole."""
    import shutil

    run = tmp_path / "run"
    _train(run)
    real_rmtree = shutil.rmtree

    def killed_halfway(path, *args, **kwargs):
        victim = next(p for p in Path(path).rglob("*") if p.is_file())
        victim.unlink()  # part of the deletion happened, then the process dies
        raise KeyboardInterrupt("killed while deleting")

    monkeypatch.setattr(shutil, "rmtree", killed_halfway)
    with pytest.raises(KeyboardInterrupt):
        _train(run, overwrite=True)
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert not (run / ".replaced-run").exists()
    assert [p.name for p in run.iterdir() if p.name.startswith(".discarded-run-")]
    again = _train(run, overwrite=True, overrides=[*SMALL, "trainer.max_env_steps=400"])
    assert again.env_steps == 400
    assert not any(p.name.startswith((".replaced", ".discarded")) for p in run.iterdir())


def test_a_run_an_interrupted_overwrite_set_aside_is_named_until_restored_or_discarded(
    run: Path, finished: Path, tmp_path: Path, capsys
):
    from rlblocks.run._rundir import set_aside_run

    set_aside_run(run)  # what a start with --overwrite that was killed before it began leaves
    held = run / ".replaced-run"
    assert (held / "config.json").is_file() and not (run / "config.json").exists()
    kept, discard = f"an earlier run is kept in {held}", f"to discard it, delete {held}"
    restore = f"to restore it, move everything in {held} back into {run}"

    def names_it(text: str) -> bool:
        text = " ".join(text.split())
        return kept in text and restore in text and discard in text

    for argv in (["describe", str(run)], ["resume", str(run)],
                 ["train", "dqn", "--run-dir", str(run), "--resume"],
                 ["train", "dqn", "--run-dir", str(run), "--no-progress"],
                 ["train", "dqn", "--run-dir", str(run), "--dry-run"],
                 ["eval", str(run), "--episodes", "1"], ["verify", str(run)]):  # fmt: skip
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err
        assert names_it(err) and "a start with --overwrite was interrupted" in err, argv
    with pytest.raises(ConfigError) as refused:  # from Python, in the argument's words
        _train(run)
    assert names_it(str(refused.value)) and "pass overwrite=True" in str(refused.value)
    with pytest.raises(CheckpointError) as refused:
        rlblocks.resume(run)
    assert names_it(str(refused.value))
    with pytest.raises(CheckpointError) as refused:
        rlblocks.load(run)
    assert names_it(str(refused.value))
    # a folder of runs: the run set aside is named as such, not counted as a run of its own
    shutil.copytree(finished, tmp_path / "a")
    assert cli(["describe", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{tmp_path}: 1 run(s)" in out and "run/.replaced-run: not a run of its own" in out
    assert names_it(out)
    # after the restore it names, the run is whole again and says nothing more
    for path in list(held.iterdir()):
        path.rename(run / path.name)
    held.rmdir()
    assert verify_run(run) == []
    assert cli(["describe", str(run)]) == 0
    assert "finished" in capsys.readouterr().out
    # beside a run, it is a note of that run until deleted
    shutil.copytree(finished, held)
    assert cli(["describe", str(run)]) == 0
    assert names_it(capsys.readouterr().out)
    assert cli(["resume", str(run)]) == 2  # refused as finished, and warned of the other one
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {kept}") and names_it(err) and "finished" in err
    if importlib.util.find_spec("matplotlib") is not None:
        assert cli(["plot", str(tmp_path), "-o", str(tmp_path / "c.png")]) == 0
        captured = capsys.readouterr()
        assert "dqn on CartPole-v1 (2)" in captured.out  # a and run; not run/.replaced-run
        assert f"not plotted: {held}, an earlier run set aside" in captured.err
    shutil.rmtree(held)
    assert cli(["describe", str(run)]) == 0
    assert "kept in" not in capsys.readouterr().out


# -- damaged files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["text", "numpy", "list", "no_policy"])
def test_eval_of_a_file_that_is_no_checkpoint_says_so_in_its_own_words(
    run: Path, content: str, capsys
):
    path = run / "other.pt"
    if content == "text":
        path.write_text("hello")
    elif content == "numpy":
        torch.save({"policy": {"w": np.zeros(3)}}, path)
    elif content == "list":
        torch.save([1, 2], path)
    else:
        torch.save({"weights": 1}, path)
    assert cli(["eval", str(path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path} ") and "not an rlblocks checkpoint" in err
    assert err.count("\n") == 1 and "weights_only" not in err and "trusted" not in err
    if content == "numpy":
        assert "numpy" in err


def test_describe_names_a_damaged_tests_csv(run: Path, capsys):
    with open(run / "tests.csv", "a") as fh:
        fh.write("garbage\n")
    assert cli(["describe", str(run)]) == 0
    out = capsys.readouterr().out
    assert "tests: tests.csv is damaged" in out and "none finished yet" not in out
    assert cli(["describe", str(run.parent)]) == 0  # the folder view says the same
    assert "tests.csv is damaged" in capsys.readouterr().out


def test_describe_and_resume_agree_on_a_damaged_result_json(run: Path, capsys):
    (run / "result.json").write_text("{")
    assert cli(["describe", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "continue it" not in out and "state unknown: result.json is damaged" in out
    with pytest.raises(CheckpointError) as refused:
        rlblocks.resume(run, overrides=["trainer.max_env_steps=1200"])
    message = str(refused.value)
    assert "whether the run finished is unknown" in message and message in out
    assert any(p.startswith(f"{run / 'result.json'} is damaged") for p in verify_run(run))
    # doing what it says (deleting the file and its checksum) continues the run
    (run / "result.json").unlink()
    (run / "result.json.sha256").unlink()
    assert rlblocks.resume(run, overrides=["trainer.max_env_steps=800"]).env_steps >= 800


def test_verify_reads_a_best_pt_whose_checksum_file_was_deleted(run: Path, capsys):
    best = run / "checkpoints" / "best.pt"
    best.write_bytes(best.read_bytes()[:500])
    assert cli(["verify", str(run)]) == 1
    assert "best.pt.sha256" in capsys.readouterr().out
    (run / "checkpoints" / "best.pt.sha256").unlink()  # as the error message offers
    problems = verify_run(run)
    assert len(problems) == 1 and problems[0].startswith(f"{best} is not an rlblocks checkpoint")
    assert cli(["verify", str(run)]) == 1
    torch.save({"format": 1}, best)  # loads, but holds no weights
    assert verify_run(run) == [f"{best} is damaged: it holds no policy weights; restore it "
                               "from a copy"]  # fmt: skip


def test_plot_of_a_folder_skips_a_run_with_a_damaged_tests_csv(
    finished: Path, tmp_path: Path, capsys
):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "runs"
    shutil.copytree(finished, folder / "a")
    shutil.copytree(finished, folder / "b")
    with open(folder / "a" / "tests.csv", "a") as fh:
        fh.write("garbage\n")
    out = tmp_path / "c.png"
    assert cli(["plot", str(folder), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "warning: not plotted: " in captured.err and "a/tests.csv is damaged" in captured.err
    assert "dqn on CartPole-v1 (1)" in captured.out and out.stat().st_size > 0
    shutil.rmtree(folder / "b")
    assert cli(["plot", str(folder), "-o", str(out)]) == 2
    assert "none of the runs has a finished test to plot (1 unreadable" in capsys.readouterr().err
    assert cli(["plot", str(folder / "a"), "-o", str(out)]) == 2  # named itself: an error
    assert "tests.csv is damaged" in capsys.readouterr().err


# -- a stop signal after the budget was met --------------------------------------------------------


class _SignalAtBudget:
    """Sends SIGINT to this process at the first test taken at the end of the budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.sent = False

    @hookimpl
    def rlblocks_test_end(self, stats, env_step: int, trainer) -> None:
        if env_step >= self.budget and not self.sent:
            self.sent = True
            signal.raise_signal(signal.SIGINT)


class _StopRequestedMidCollect:
    """What a signal that lands during the collect that meets the budget leaves: a stop request
    the trainer sees only after that collect."""

    @hookimpl
    def rlblocks_rollout_end(self, stats, env_step: int, trainer) -> None:
        if env_step >= trainer.max_env_steps:
            trainer.request_stop("interrupted by SIGINT")


@pytest.mark.parametrize("hook", ["signal", "mid_collect"])
def test_a_stop_signal_after_the_budget_was_met_records_a_finished_run(
    tmp_path: Path, hook: str, capsys
):
    run = tmp_path / "run"
    hooks = [_SignalAtBudget(600) if hook == "signal" else _StopRequestedMidCollect()]
    result = _train(run, hooks=hooks)
    assert result.env_steps >= 600
    assert result.stop_reason == "reached max_env_steps=600"
    saved = json.loads((run / "result.json").read_text())
    assert saved["stop_reason"] == "reached max_env_steps=600"
    if hook == "signal":
        assert hooks[0].sent and "is finishing" in capsys.readouterr().err
