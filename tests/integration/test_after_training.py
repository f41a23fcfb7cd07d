"""Getting a trained agent back: rlblocks.load / act / evaluate / record, and the eval, plot and
describe commands; envs given as module:id, factories, wrappers and JSON make_kwargs; devices."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import Batch, CheckpointError, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.run import load_checkpoint, read_tests

SMALL = [
    "trainer.max_env_steps=600",
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


@pytest.fixture(scope="module")
def solved_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, rlblocks.TrainResult]:
    """DQN trained from scratch on CartPole-v1 until solved (about 10 s)."""
    run = tmp_path_factory.mktemp("after") / "dqn"
    result = rlblocks.train("dqn", env="CartPole-v1", seed=0, run_dir=run, progress=False,
                            loggers=[])  # fmt: skip
    assert result.solved
    return run, result


@pytest.mark.slow
def test_loaded_agent_scores_its_best_test_over_100_episodes(solved_run) -> None:
    run, result = solved_run
    agent = rlblocks.load(run)
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["test_return"] == pytest.approx(result.best_test_return)
    ev = agent.evaluate(episodes=100, seed=123)
    assert len(ev.returns) == 100 and len(ev.lengths) == 100
    assert ev.returns.dtype == np.float64 and ev.lengths.dtype == np.int64
    # the same weights that scored the best test score like it on 100 new episodes
    assert ev.mean >= 475.0
    assert abs(ev.mean - result.best_test_return) <= 25.0
    assert np.array_equal(ev.returns, ev.lengths.astype(np.float64))  # CartPole: 1 per step


@pytest.mark.slow
def test_train_returns_the_agent_and_act_handles_one_or_many_observations(solved_run) -> None:
    _run, result = solved_run
    agent = result.agent
    assert agent.algo == "dqn" and agent.env_id == "CartPole-v1"
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    one = agent.act(obs)
    assert np.ndim(one) == 0 and env.action_space.contains(int(one))
    many = agent.act(np.stack([obs, obs, obs]))
    assert many.shape == (3,) and (many == one).all()
    with pytest.raises(ConfigError, match="fits neither"):
        agent.act(np.zeros(7, np.float32))
    act, state = agent.act(obs, return_state=True)
    assert act == one and state is None


@pytest.mark.slow
def test_a_loaded_agent_builds_its_optimizers_only_when_trained_further(solved_run) -> None:
    """rlblocks.load makes no torch optimizer (the first one imports torch's compiler stack,
    seconds of start-up an agent that only acts never needs); trained further, its optimizers
    start from the checkpoint's state."""
    run, _result = solved_run
    probe = (
        "import sys, numpy as np, rlblocks\n"
        f"agent = rlblocks.load({str(run)!r})\n"
        "agent.act(np.zeros(4, np.float32))\n"
        "print('dynamo' if 'torch._dynamo' in sys.modules else 'no dynamo')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.split() == ["no", "dynamo"], out.stdout + out.stderr
    agent = rlblocks.load(run)
    saved = load_checkpoint(run / "checkpoints" / "best.pt")["policy_extra"]["optimizers"]
    assert saved and set(saved) == set(agent.policy.optim_steps)
    for name, step in agent.policy.optim_steps.items():
        assert "optim" not in step.__dict__ and step.steps == saved[name]["steps"] > 0
        state = step.optim.state_dict()["state"]  # built on first use, from the saved state
        assert state.keys() == saved[name]["optim"]["state"].keys()
        for key, values in state.items():
            for field, value in values.items():
                assert torch.equal(value, saved[name]["optim"]["state"][key][field])


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_act_matches_the_collector_action_mapping_and_obs_normalisation(
    algo: str, tmp_path: Path
) -> None:
    """Pendulum's actions live in [-2, 2]: act must map them as the collector does, and PPO's
    observation normaliser (fitted while training) must be applied inside the agent."""
    sets = ["trainer.max_env_steps=2048", "trainer.test_interval=1024", "trainer.test_episodes=2",
            "env.num_test_envs=2"]  # fmt: skip
    if algo == "ppo":
        sets += ["algo.obs_norm=true", "trainer.step_per_collect=512"]
    run = tmp_path / algo
    rlblocks.train(algo, env="Pendulum-v1", seed=0, run_dir=run, progress=False, loggers=[],
                   overrides=sets, stop_reward=1e9)  # fmt: skip
    agent = rlblocks.load(run, which="latest")
    if algo == "ppo":
        rms = agent.policy.obs_rms
        assert rms is not None and float(rms.count) > 100  # the fitted statistics came back
    obs = np.random.default_rng(0).uniform(-1, 1, size=(5, 3)).astype(np.float32)
    env_act = agent.act(obs)
    policy = agent.policy
    policy.eval()
    import torch

    with torch.inference_mode():
        raw = policy(Batch(obs=obs)).act
    raw = raw.cpu().numpy() if isinstance(raw, torch.Tensor) else np.asarray(raw)
    assert np.allclose(env_act, policy.map_action(raw))
    assert env_act.shape == (5, 1) and np.abs(env_act).max() <= 2.0 + 1e-6
    # evaluate (the collector) and a hand loop through act give the same episode
    ev = agent.evaluate(episodes=1, seed=7, num_envs=1)
    env = gym.make("Pendulum-v1")
    o, _ = env.reset(seed=7)
    total, done = 0.0, False
    while not done:
        o, r, term, trunc, _ = env.step(agent.act(o))
        total += float(r)
        done = term or trunc
    assert total == pytest.approx(float(ev.returns[0]), rel=1e-5)


@pytest.mark.slow
def test_best_pt_is_written_at_every_new_best_test(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rlblocks.train("dqn", seed=1, overrides=[*SMALL, "trainer.checkpoint_interval=100000"],
                   run_dir=run, progress=False, loggers=[])  # fmt: skip
    rows = read_tests(run)
    full = [r for r in rows if not r["screen"]]
    assert [r["env_step"] for r in full] == [200, 400, 600]
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["test_return"] == pytest.approx(max(r["return_mean"] for r in full))
    assert best["env_step"] == max(full, key=lambda r: r["return_mean"])["env_step"]
    assert rlblocks.load(run).evaluate(episodes=2).returns.shape == (2,)


def test_load_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="neither a run directory"):
        rlblocks.load(tmp_path / "missing")
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        rlblocks.load(tmp_path)
    with pytest.raises(ConfigError, match="'best' or 'latest'"):
        rlblocks.load(tmp_path, which="newest")


@pytest.mark.slow
def test_load_refuses_weights_that_do_not_fit_the_config(solved_run, tmp_path: Path) -> None:
    run, _ = solved_run
    copy = tmp_path / "copy"
    (copy / "checkpoints").mkdir(parents=True)
    config = json.loads((run / "config.json").read_text())
    config["algo"]["hidden_sizes"] = [7]
    (copy / "config.json").write_text(json.dumps(config))
    (copy / "checkpoints" / "best.pt").write_bytes((run / "checkpoints" / "best.pt").read_bytes())
    with pytest.raises(CheckpointError, match="does not fit dqn's networks"):
        rlblocks.load(copy)


@pytest.mark.slow
def test_cli_eval_writes_json_and_a_video_whose_frames_read_back(solved_run, tmp_path) -> None:
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("imageio_ffmpeg")
    run, _ = solved_run
    video, out = tmp_path / "cart.mp4", tmp_path / "eval.json"
    rc = cli(["eval", str(run), "--episodes", "5", "--seed", "3", "--video", str(video),
              "--json", str(out)])  # fmt: skip
    assert rc == 0
    data = json.loads(out.read_text())
    assert len(data["returns"]) == 5 and data["mean"] >= 475
    frames = np.stack(list(iio.imiter(video)))
    # one frame per step plus the first: a solved CartPole episode lasts 500 steps
    assert frames.shape[0] == 501 and frames.shape[-1] == 3
    assert frames.std() > 5.0  # not blank
    assert not np.array_equal(frames[0], frames[-1])  # the pole moved
    gif = tmp_path / "cart.gif"
    with pytest.warns(UserWarning, match=r"cut at 40 frames \(max_frames=40\): 0 of 1 episode"):
        rec = rlblocks.load(run).record(gif, episodes=1, seed=3, max_frames=40)
    assert rec.lengths[0] == 500
    gframes = iio.imread(gif, index=None)
    assert 2 <= gframes.shape[0] <= 40 and gframes.std() > 5.0


def test_a_recording_carries_a_recurrent_policys_memory(tmp_path: Path) -> None:
    """record() plays as act() with the state fed back does: a recurrent policy that forgot
    its memory at every step plays another episode (the control)."""
    pytest.importorskip("imageio")
    rlblocks.train("rppo", env="CartPole-v1", seed=0, progress=False, loggers=[], quiet=True,
                   run_dir=tmp_path / "run",
                   overrides=["trainer.max_env_steps=3000", "trainer.test_interval=3000",
                              "trainer.test_episodes=2"])  # fmt: skip
    agent = rlblocks.load(tmp_path / "run")

    def play(carry: bool) -> float:
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=3)
        state, total, done = None, 0.0, False
        while not done:
            act, new_state = agent.act(obs, state=state, return_state=True)
            state = new_state if carry else None
            obs, rew, terminated, truncated, _ = env.step(act)
            total, done = total + float(rew), terminated or truncated
        return total

    remembering, forgetting = play(True), play(False)
    assert remembering != forgetting  # the memory matters for this policy and seed
    rec = agent.record(tmp_path / "v.gif", episodes=1, seed=3, max_frames=5)
    assert list(rec.returns) == [remembering]


def test_video_file_needs_a_known_suffix(tmp_path: Path) -> None:
    from rlblocks.run import Agent

    agent = Agent.__new__(Agent)
    with pytest.raises(ConfigError, match=r"\.mp4 or \.gif"):
        agent.record(tmp_path / "x.avi")


@pytest.mark.slow
def test_cli_plot_draws_one_curve_per_algo_env_group(solved_run, tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    run, _ = solved_run
    other = tmp_path / "ppo"
    rlblocks.train("ppo", seed=0, run_dir=other, progress=False, loggers=[],
                   overrides=["trainer.max_env_steps=3000", "trainer.test_interval=1000",
                              "trainer.test_episodes=2", "env.num_test_envs=2"])  # fmt: skip
    out = tmp_path / "curves.png"
    from rlblocks.tools import plot_runs

    counts = plot_runs([run, other, run], out)  # a run named twice counts once
    assert counts == {"dqn on CartPole-v1": 1, "ppo on CartPole-v1": 1}
    assert cli(["plot", str(run), str(other), "--out", str(out), "--x", "wall_seconds"]) == 0
    pixels = image.imread(out)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 300
    rgb = (pixels[..., :3] * 255).round().astype(int).reshape(-1, 3)

    def has(colour: tuple[int, int, int]) -> bool:
        return bool((np.abs(rgb - np.array(colour)).sum(axis=1) < 30).any())

    assert has((31, 119, 180)) and has((255, 127, 14))  # matplotlib's first two line colours


def test_plot_needs_tests_in_the_runs(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"no tests\.csv"):
        read_tests(tmp_path)


def _fake_run(run: Path, algo: str, returns: list[float]) -> Path:
    """A run directory as `rlblocks train` leaves it, as far as plotting reads it."""
    from rlblocks.run import TestRecorder

    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"algo_name": algo, "env": {"id": "X-v0"}}))
    if returns:
        rows = [
            {"env_step": 100 * (k + 1), "return_mean": r, "gradient_steps": 0, "episodes": 1,
             "screen": 0}
            for k, r in enumerate(returns)
        ]  # fmt: skip
        TestRecorder(run, lambda: None)._write(rows)
    return run


def test_plot_takes_a_folder_of_runs_and_counts_each_run_once(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    from rlblocks.tools import find_runs, plot_runs

    a = _fake_run(tmp_path / "runs" / "dqn-a", "dqn", [1.0, 2.0])
    b = _fake_run(tmp_path / "runs" / "sweep" / "dqn-b", "dqn", [3.0])
    c = _fake_run(tmp_path / "runs" / "ppo-c", "ppo", [5.0, 6.0])
    _fake_run(a / "inner", "ppo", [9.0])  # inside a run: not searched
    warming = _fake_run(tmp_path / "runs" / "sac-d", "sac", [])  # no test finished yet
    assert find_runs([tmp_path / "runs", c]) == [
        (a, False), (c, True), (warming, False), (b, False)
    ]  # fmt: skip
    out = tmp_path / "curves.png"
    with pytest.warns(UserWarning, match=r"no test finished in them yet: .*sac-d"):
        counts = plot_runs([tmp_path / "runs", a], out)
    assert counts == {"dqn on X-v0": 2, "ppo on X-v0": 1}
    assert out.stat().st_size > 0
    with pytest.raises(CheckpointError, match=r"no tests\.csv"):  # named itself: an error
        plot_runs([warming], out)
    short = tmp_path / "short.png"  # -o is --out, as in most plotting tools
    assert cli(["plot", str(c), "-o", str(short)]) == 0 and short.stat().st_size > 0
    (tmp_path / "empty").mkdir()
    assert cli(["plot", str(tmp_path / "empty")]) != 0
    assert "is not a run directory (no config.json) and holds none" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="no such run directory"):
        find_runs([tmp_path / "nope"])


def test_plot_of_a_folder_skips_a_damaged_run_and_says_so(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from rlblocks.tools import plot_runs

    _fake_run(tmp_path / "runs" / "dqn-a", "dqn", [1.0, 2.0])
    broken = _fake_run(tmp_path / "runs" / "dqn-b", "dqn", [3.0])
    (broken / "config.json").write_text("{")  # cut short, e.g. copied while being written
    out = tmp_path / "curves.png"
    with pytest.warns(UserWarning, match=r"not plotted: .*dqn-b: cannot read the run's config"):
        assert plot_runs([tmp_path / "runs"], out) == {"dqn on X-v0": 1}
    with pytest.raises(CheckpointError, match=r"dqn-b: cannot read the run's config\.json"):
        plot_runs([broken], out)  # named itself: an error


def test_the_command_line_prints_warnings_as_one_line(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    _fake_run(tmp_path / "runs" / "dqn-a", "dqn", [1.0, 2.0])
    _fake_run(tmp_path / "runs" / "sac-b", "sac", [])  # no test finished yet
    assert cli(["plot", str(tmp_path / "runs"), "-o", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: not plotted, no test finished in them yet: ")
    assert "sac-b" in err and "UserWarning" not in err and "cli.py" not in err
    with pytest.warns(UserWarning, match="not plotted"):  # --debug: Python's own warnings
        assert cli(["plot", str(tmp_path / "runs"), "-o", str(tmp_path / "c.png"), "--debug"]) == 0


def test_describe_lists_fields_defaults_presets_and_meaning(capsys) -> None:
    assert cli(["describe", "sac", "--env", "HalfCheetah-v5"]) == 0
    out = capsys.readouterr().out
    assert "[algo]  (SACConfig)" in out and "[trainer]" in out
    assert "hidden_sizes = [256, 256]" in out  # the MuJoCo preset
    assert "warmup_steps = 10000" in out
    assert "Adam learning rate of the actor." in out  # the field's docstring
    assert max(len(line) for line in out.splitlines()) <= 200
    assert cli(["describe", "sac"]) == 0
    assert "hidden_sizes = [64, 64]" in capsys.readouterr().out  # Pendulum defaults


@pytest.mark.slow
def test_describe_a_finished_run(solved_run, capsys) -> None:
    run, result = solved_run
    assert cli(["describe", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # wrapped to the terminal: words compared
    assert out.startswith(f"{run}: dqn on CartPole-v1, seed 0, device cpu")
    assert "ran with: rlblocks " in out and "rlblocks-algo-dqn " in out
    assert f"finished (solved): {result.stop_reason}; {result.env_steps} env steps" in out
    rows = read_tests(run)
    tests = [t for t in rows if not t["screen"]]
    best = max(t["return_mean"] for t in tests)
    # "tests: N" counts tests.csv's rows, screened tests included (issue 57)
    screened = len(rows) - len(tests)
    assert screened > 0  # DQN's defaults screen (test_screen_episodes), so this run has some
    assert (
        f"tests: {len(rows)} ({screened} screened: ended after their first episodes fell "
        f"clearly short of stop_reward); last full test at env step {tests[-1]['env_step']}"
    ) in out
    assert f"best {best:.4g} at env step" in out
    assert "best.pt (the weights of the best test" in out and "with the replay buffer" in out
    changed = out.split("settings that differ from dqn's defaults for CartPole-v1")[1]
    # what rlblocks.train was given besides the env and seed (the run directory is the run)
    assert "run.loggers = [] (default " in changed and "run.progress = False" in changed
    assert "run.run_dir" not in changed and "algo." not in changed
    assert "note:" not in out


class _StopAt:
    """Kills the run (an exception out of a hook) once ``env_step`` is reached; on the way,
    describes the run directory as another process would see it."""

    def __init__(self, run: Path, env_step: int) -> None:
        self.run, self.env_step, self.seen = run, env_step, ""

    @hookimpl
    def rlblocks_rollout_end(self, stats: dict, env_step: int, trainer) -> None:
        if env_step >= self.env_step:
            from rlblocks.tools import describe_run

            self.seen = describe_run(self.run)
            raise RuntimeError("killed")


def test_describe_a_running_then_stopped_run_and_bad_paths(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    run = tmp_path / "cut"
    sets = [*SMALL, "trainer.checkpoint_interval=100", "algo.lr=5e-4"]
    stop = _StopAt(run, 450)
    with pytest.raises(RuntimeError, match="killed"):
        rlblocks.train("dqn", env="CartPole-v1", seed=4, overrides=sets, run_dir=run,
                       progress=False, loggers=[], hooks=[stop])  # fmt: skip
    assert "running now (pid " in stop.seen
    assert cli(["describe", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{run}: dqn on CartPole-v1, seed 4" in out
    assert "not finished: its last checkpoint is at env step 4" in out
    assert f"continue it: rlblocks resume {run}" in out
    assert "(the resume point, with the replay buffer)" in out
    assert "tests: 2; last at env step 4" in out  # tests at 200 and 400 of the 450 steps
    changed = out.split("settings that differ from dqn's defaults for CartPole-v1")[1]
    assert "trainer.max_env_steps = 600 (default " in changed
    assert "algo.lr = 0.0005 (default " in changed
    assert "run.seed" not in changed  # shown on the first line
    # a folder of runs: one line each, a damaged one said so without hiding the others
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    assert cli(["describe", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(f"{tmp_path}: 2 run(s)")
    assert "broken: unreadable (" in out and "config.json is unreadable" in out
    assert ("cut: dqn on CartPole-v1, seed 4; not finished: its last checkpoint is at env step "
            "400; best test ") in out  # fmt: skip
    # a folder without runs, a path that is none, and --env with a run directory
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    assert cli(["describe", "folder"]) == 2  # a bare name: an algorithm, or a folder here
    assert "folder is neither a run directory (no config.json in or below it) nor an" in (
        capsys.readouterr().err
    )
    assert cli(["describe", "./folder"]) == 2
    assert "is not a run directory (no config.json) and holds none" in capsys.readouterr().err
    assert cli(["describe", "nothing-here"]) == 2
    assert "no algo named 'nothing-here'" in capsys.readouterr().err
    assert cli(["describe", "folder/nope"]) == 2
    assert "folder/nope is not a run directory" in capsys.readouterr().err
    assert cli(["describe", str(run), "--env", "Pendulum-v1"]) == 2
    assert "--env applies to an algorithm name" in capsys.readouterr().err


def test_list_details_stays_readable(capsys) -> None:
    assert cli(["list", "algo", "--details"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) < 400


def test_device_auto_and_clear_errors() -> None:
    import torch

    from rlblocks.run import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="unknown device 'banana'"):
        resolve_device("banana")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no CUDA GPU"):
            resolve_device("cuda")


def test_cli_train_with_a_bad_device_is_one_line(tmp_path: Path, capsys) -> None:
    rc = cli(["train", "dqn", "--device", "banana", "--run-dir", str(tmp_path / "r"),
              "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "unknown device 'banana'" in err


def test_python_dash_m_runs_the_command() -> None:
    out = subprocess.run([sys.executable, "-m", "rlblocks", "--version"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.startswith("rlblocks ")


# -- envs: module:id, factories, wrappers, JSON make_kwargs -----------------------------------

ENV_MODULE = '''
import gymnasium as gym
gym.register("ShortCart-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
             max_episode_steps=50, reward_threshold=45.0)
'''


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch) -> str:
    name = f"user_envs_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.mark.slow
def test_env_module_prefix_is_imported_like_gymnasium_does(env_module: str, tmp_path) -> None:
    run = tmp_path / "run"
    result = rlblocks.train("dqn", env=f"{env_module}:ShortCart-v0", seed=0, run_dir=run,
                            progress=False, loggers=[], overrides=SMALL)  # fmt: skip
    assert result.stop_reward == 45.0  # the registered env's threshold was found
    sys.modules.pop(env_module)
    with pytest.raises(ConfigError, match="importing it runs its code"):
        rlblocks.load(run, which="latest")
    agent = rlblocks.load(run, which="latest", trust_imports=True)
    assert agent.evaluate(episodes=2).lengths.max() <= 50
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        rlblocks.train("dqn", env="no_such_module_xyz:Env-v0", run_dir=tmp_path / "x")


@pytest.mark.slow
def test_env_factory_wrappers_and_json_make_kwargs(tmp_path: Path) -> None:
    made = []

    def factory() -> gym.Env:
        made.append(1)
        return gym.make("CartPole-v1", max_episode_steps=30)

    run = tmp_path / "f"
    result = rlblocks.train("dqn", env=factory, seed=0, run_dir=run, progress=False, loggers=[],
                            overrides=SMALL)  # fmt: skip
    assert made and result.env_steps >= 600
    assert json.loads((run / "config.json").read_text())["env"]["id"] == "CartPole-v1"
    assert max(r["length_mean"] for r in read_tests(run)) <= 30  # the factory's envs ran

    run = tmp_path / "w"
    rlblocks.train("dqn", seed=0, run_dir=run, progress=False, loggers=[], overrides=[
        *SMALL,
        "env.wrappers=[{path='gymnasium.wrappers:ClipReward', kwargs={min_reward=0.0, "
        "max_reward=0.5}}]",
        'env.make_kwargs={"sutton_barto_reward": true}',
    ])  # fmt: skip
    saved = json.loads((run / "config.json").read_text())["env"]
    assert saved["make_kwargs"] == {"sutton_barto_reward": True}
    assert saved["wrappers"][0]["kwargs"] == {"min_reward": 0.0, "max_reward": 0.5}
    # Sutton-Barto reward is 0 per step and -1 at failure; clipped into [0, 0.5]: all zero
    assert all(r["return_max"] == 0.0 for r in read_tests(run))
    with pytest.raises(ConfigError, match=r"env\.wrappers entry"):
        rlblocks.train("dqn", run_dir=tmp_path / "bad", overrides=["env.wrappers=['nocolon']"])
    with pytest.raises(ConfigError, match="ClipReward with kwargs"):
        rlblocks.train("dqn", run_dir=tmp_path / "bad2", progress=False, loggers=[],
                       overrides=["env.wrappers=['gymnasium.wrappers:ClipReward']"])  # fmt: skip


@pytest.mark.slow
def test_resume_truncates_the_test_record_to_the_checkpoint(tmp_path: Path) -> None:
    from rlblocks.testing import CrashAt

    run = tmp_path / "run"
    sets = [*SMALL, "trainer.checkpoint_interval=200", "trainer.max_env_steps=800"]
    with pytest.raises(RuntimeError):
        rlblocks.train("dqn", seed=0, overrides=sets, run_dir=run, progress=False, loggers=[],
                       hooks=[CrashAt(500)])  # fmt: skip
    before = [r["env_step"] for r in read_tests(run) if not r["screen"]]
    assert before == [200, 400]
    rlblocks.resume(run)
    after = [r["env_step"] for r in read_tests(run) if not r["screen"]]
    assert after == sorted(set(after)) and after[-1] == 800 and after[:2] == [200, 400]


# -- hooks that act, progress lines -----------------------------------------------------------


@pytest.mark.slow
def test_hooks_get_the_live_trainer_and_can_change_lr_save_evaluate_and_stop(tmp_path) -> None:
    from rlblocks.plugins import hookimpl

    seen: dict[str, list] = {"lr": [], "saved": [], "own_test": []}

    class Callback:
        @hookimpl
        def rlblocks_update_end(self, stats, env_step, trainer):
            name, step = next(iter(trainer.policy.optim_steps.items()))
            seen["lr"].append(stats[f"lr/{name}"])
            step.lr = 1e-4  # a learning-rate schedule of the user's own

        @hookimpl
        def rlblocks_test_end(self, stats, env_step, trainer):
            if env_step >= 400 and not seen["own_test"]:
                import torch

                path = trainer.run_dir / f"mine-{env_step}.pt"
                torch.save(trainer.policy.state_dict(), path)
                seen["saved"].append(path)
                seen["own_test"].append(None)  # our own test below calls this hook again
                seen["own_test"][0] = trainer.test(screen=False).mean_return
                trainer.request_stop("my callback stopped it")

    run = tmp_path / "run"
    sets = [*SMALL, "trainer.max_env_steps=2000"]
    result = rlblocks.train("dqn", seed=0, overrides=sets, run_dir=run, progress=False,
                            loggers=[], hooks=[Callback()])  # fmt: skip
    assert result.stop_reason == "my callback stopped it"
    assert 400 <= result.env_steps < 2000
    assert seen["saved"] and seen["saved"][0].is_file()
    assert len(seen["own_test"]) == 1 and seen["own_test"][0] > 0
    assert seen["lr"][0] != 1e-4  # logged before the callback changed it
    assert next(iter(result.agent.policy.optim_steps.values())).lr == pytest.approx(1e-4)


def test_progress_prints_one_line_per_test_when_not_on_a_terminal(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlblocks", "train", "dqn", "--run-dir", str(tmp_path / "r"),
         *[a for s in SMALL for a in ("--set", s)]],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("env step ")]
    assert [ln.split(":")[0] for ln in lines][-3:] == [
        "env step 200/600", "env step 400/600", "env step 600/600"]  # fmt: skip
    assert "\r" not in out.stderr  # no bar redraws in a log file
    assert out.stderr.startswith("training dqn on CartPole-v1 for 600 env steps")


# -- several seeds, tuning --------------------------------------------------------------------


def test_parse_seeds_and_summary_statistics() -> None:
    from rlblocks.tools import parse_seeds, summarize

    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("1, 5,9") == [1, 5, 9]
    assert parse_seeds("0-2,10") == [0, 1, 2, 10]
    for bad in ("4-1", "a", "1,1", "-3"):
        with pytest.raises(ConfigError, match="seeds"):
            parse_seeds(bad)
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0, 5.0, 6.0, 7.0])
    assert s["n"] == 8 and s["mean"] == pytest.approx(16.0)
    assert s["iqm"] == pytest.approx(4.5)  # the middle half: 3, 4, 5, 6
    for key in ("mean", "median", "iqm"):
        lo, hi = s[f"{key}_ci95"]
        assert lo <= s[key] <= hi and lo < hi
    assert summarize([500.0, 500.0])["iqm_ci95"] == [500.0, 500.0]
    assert summarize([math_nan := float("nan")])["n"] == 0 and math_nan != math_nan


@pytest.mark.slow
def test_cli_seeds_in_parallel_processes_write_runs_and_a_summary(tmp_path: Path, capsys) -> None:
    base = tmp_path / "seeds"
    rc = cli(["train", "dqn", "--seeds", "0-2", "--workers", "2", "--run-dir", str(base),
              *[a for s in SMALL for a in ("--set", s)]])  # fmt: skip
    assert rc == 0
    summary = json.loads((base / "summary.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and not summary["failed"]
    finals = [r["last_test_return"] for r in summary["runs"]]
    assert summary["final_return"]["mean"] == pytest.approx(sum(finals) / 3)
    for s in (0, 1, 2):
        saved = json.loads((base / f"seed-{s}" / "config.json").read_text())
        assert saved["run"]["seed"] == s and saved["run"]["torch_threads"] == 1
    assert len({tuple(r["returns"]) if "returns" in r else r["last_test_return"]
                for r in summary["runs"]}) >= 2  # different seeds, different runs  # fmt: skip
    out = capsys.readouterr().out
    assert "IQM" in out and "95% bootstrap intervals" in out
    assert cli(["train", "dqn", "--seed", "1", "--seeds", "0-1"]) == 2
    # again into the same folder: every seed refused, a failing exit, the summary kept
    again = ["train", "dqn", "--seeds", "0-1", "--workers", "1", "--run-dir", str(base),
             *[a for s in SMALL for a in ("--set", s)]]  # fmt: skip
    before = (base / "summary.json").read_text()
    assert cli(again) == 1
    assert "already holds a run" in capsys.readouterr().out
    assert (base / "summary.json").read_text() == before
    # --overwrite reaches every seed's run
    assert cli([*again, "--overwrite"]) == 0
    assert json.loads((base / "summary.json").read_text())["seeds"] == [0, 1]


def test_ctrl_c_during_seeds_stops_the_set_and_keeps_it_out_of_the_figures(tmp_path) -> None:
    import os
    import signal

    from rlblocks.plugins import hookimpl
    from rlblocks.tools import exit_status, train_seeds

    class CtrlCAtFirstTest:
        @hookimpl
        def rlblocks_test_end(self, stats, env_step) -> None:
            os.kill(os.getpid(), signal.SIGINT)

    lines: list[str] = []
    summary = train_seeds("dqn", [0, 1, 2], tmp_path / "s", workers=1, report=lines.append,
                          overrides=SMALL, hooks=[CtrlCAtFirstTest()])  # fmt: skip
    assert summary["interrupted"] == [0] and summary["not_started"] == [1, 2]
    assert summary["seeds"] == [] and summary["final_return"] == {"n": 0}
    assert exit_status(summary) == 130
    assert any("continue it: rlblocks resume" in line for line in lines)


@pytest.mark.slow
def test_seeds_on_a_local_ray(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from rlblocks.tools import train_seeds

    lines: list[str] = []
    summary = train_seeds("dqn", [3, 4], tmp_path / "ray", ray_address="local",
                          report=lines.append, overrides=SMALL)  # fmt: skip
    assert summary["seeds"] == [3, 4] and not summary["failed"]
    assert (tmp_path / "ray" / "seed-4" / "result.json").is_file()


@pytest.mark.slow
def test_tune_dqn_8_trials_then_its_best_toml_trains_when_passed_back(tmp_path, capsys) -> None:
    pytest.importorskip("optuna")
    import tomllib

    root = tmp_path / "tune"
    rc = cli(["tune", "dqn", "--env", "CartPole-v1", "--trials", "8", "--max-env-steps", "3000",
              "--run-dir", str(root), "--set", "trainer.test_interval=1000",
              "--set", "trainer.test_episodes=5"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert out.count("trial ") >= 8 and "best: trial" in out
    best = tomllib.loads((root / "best.toml").read_text())
    # what tune forced on its trials is not handed on: a run from the file logs as any run
    assert not {"run_dir", "loggers", "progress"} & set(best.get("run", {}))
    assert "train longer with --max-env-steps" in (root / "best.toml").read_text()
    import optuna

    study = optuna.load_study(study_name="dqn-CartPole-v1", storage=f"sqlite:///{root}/study.db")
    assert len(study.trials) == 8
    bt = study.best_trial
    assert best["algo"]["lr"] == pytest.approx(bt.params["algo.lr"])
    assert best["trainer"]["batch_size"] == bt.params["trainer.batch_size"]
    # passed back, it trains with exactly the tuned settings
    again = tmp_path / "again"
    assert cli(["train", "dqn", "--config", str(root / "best.toml"), "--run-dir", str(again),
                "--no-progress"]) == 0  # fmt: skip
    saved = json.loads((again / "config.json").read_text())
    assert saved["algo"]["lr"] == pytest.approx(bt.params["algo.lr"])
    assert saved["trainer"]["max_env_steps"] == 3000
    assert saved["run"]["loggers"] == ["tensorboard", "csv"]
    # running the command again continues the same study
    assert cli(["tune", "dqn", "--env", "CartPole-v1", "--trials", "1", "--max-env-steps",
                "3000", "--run-dir", str(root)]) == 0  # fmt: skip
    assert len(optuna.load_study(study_name="dqn-CartPole-v1",
                                 storage=f"sqlite:///{root}/study.db").trials) == 9  # fmt: skip


def test_tune_param_syntax_and_typos() -> None:
    from rlblocks.tools import parse_param

    assert parse_param("algo.lr=loguniform:1e-5:1e-2")[1].kind == "loguniform"
    assert parse_param("algo.hidden_sizes=choice:[64]|[128, 128]")[1].choices == ([64], [128, 128])
    for bad in ("algo.lr=loguniform:0:1", "algo.lr=gauss:1:2", "lr=uniform:0:1",
                "algo.gamma=choice:0.9"):  # fmt: skip
        with pytest.raises(ConfigError, match="--param"):
            parse_param(bad)
    pytest.importorskip("optuna")
    from rlblocks.tools import tune

    with pytest.raises(ConfigError, match=r"has no field algo\.lrr"):
        tune("dqn", trials=1, params=["algo.lrr=uniform:0:1"])


def test_logger_options_come_from_the_run_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rlblocks.train("dqn", run_dir=run, loggers=["csv"], progress=False,
                   overrides=[*SMALL, 'run.logger_options={"csv": {"jsonl": false}}'])  # fmt: skip
    assert (run / "logs" / "test.csv").is_file()
    assert not (run / "logs" / "metrics.jsonl").exists()
    typo = 'run.logger_options={"csv": {"jsnl": false}}'
    where = r"^\$\.run\.logger_options\.csv\.jsnl: "  # the field's path in the run's config
    with pytest.raises(ConfigError, match=where + "unknown field; did you mean 'jsonl'"):
        rlblocks.train("dqn", run_dir=tmp_path / "x", loggers=["csv"], progress=False,
                       overrides=[*SMALL, typo])  # fmt: skip
    with pytest.raises(ConfigError, match=r"not among run\.loggers"):
        rlblocks.train("dqn", run_dir=tmp_path / "y", loggers=["csv"], progress=False,
                       overrides=[*SMALL, 'run.logger_options={"tensorboard": {}}'])  # fmt: skip


@pytest.mark.slow
def test_cli_eval_render_opens_the_human_render_mode(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a window without a screen
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")
    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    made: list[str | None] = []
    real_make = gym.make

    def spy(*args, **kwargs):
        env = real_make(*args, **kwargs)
        made.append(env.render_mode)
        return env

    monkeypatch.setattr(gym, "make", spy)
    assert cli(["eval", str(run), "--episodes", "1", "--render", "--which", "latest"]) == 0
    assert "human" in made


def test_after_training_mistakes_are_named_not_raised_from_deep_inside(
    tmp_path: Path, capsys
) -> None:
    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    agent = rlblocks.load(run)
    # the path `eval --which latest` prints loads too (a generation's file, two levels down)
    gen_file = max((run / "checkpoints").glob("gen-*/latest.pt"))
    assert rlblocks.load(gen_file).checkpoint == gen_file
    with pytest.raises(ConfigError, match=r"observation space Box.*\(3,\).*acts on Box.*\(4,\)"):
        agent.evaluate(env="Pendulum-v1", episodes=1)
    with pytest.raises(ConfigError, match="episodes must be at least 1"):
        agent.record(tmp_path / "v.gif", episodes=0)
    with pytest.raises(ConfigError, match="fps must be positive"):
        agent.record(tmp_path / "v.gif", fps=-5)
    assert not list(tmp_path.glob("*.gif*"))
    capsys.readouterr()
    assert cli(["plot", str(run), "--out", str(tmp_path / "c.xyz")]) == 2
    assert re.search(r"error: cannot write a plot as '\.xyz'; use one of .*\.png",
                     capsys.readouterr().err)  # fmt: skip
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="afile is a file, not a directory"):
        rlblocks.train("dqn", run_dir=tmp_path / "afile" / "sub", overrides=SMALL, loggers=[],
                       progress=False)  # fmt: skip
    with pytest.raises(ConfigError, match=r"cannot be made with the keyword arguments \['bad'\]"):
        rlblocks.train("dqn", run_dir=tmp_path / "mk", loggers=[], progress=False,
                       overrides=[*SMALL, 'env.make_kwargs={"bad": 1}'])  # fmt: skip
    with pytest.raises(ConfigError, match=r"^\$\.algo\.loss: 'loss' must be in \['huber', 'mse'\] "
                                          r"\(got 'foo'\)$"):
        rlblocks.train("dqn", run_dir=tmp_path / "l", overrides=["algo.loss=foo"])


def test_a_curve_band_before_a_run_s_first_test_uses_only_runs_tested_there() -> None:
    from rlblocks.tools import bootstrap_band

    nan = float("nan")
    mean, lo, hi = bootstrap_band(np.array([[10.0, 20.0, 30.0], [nan, 200.0, 300.0]]))
    assert mean[0] == 10.0 and lo[0] == hi[0] == 10.0  # not pulled towards the later 200
    assert mean[1:].tolist() == [110.0, 165.0]


def test_small_argument_mistakes_after_training_are_named(tmp_path: Path, capsys) -> None:
    from rlblocks.tools import describe_algo

    with pytest.raises(ConfigError, match="CartPol-v1"):
        describe_algo("dqn", env="CartPol-v1")
    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    with pytest.raises(ConfigError, match="num_envs must be at least 1"):
        rlblocks.load(run).evaluate(episodes=2, num_envs=0)
    capsys.readouterr()
    assert cli(["plot", str(run), "--out", str(tmp_path / "curves")]) == 0
    assert f"wrote {tmp_path / 'curves.png'}:" in capsys.readouterr().out
    assert (tmp_path / "curves.png").is_file()
