"""The trust rule for run directories: the code a run's config.json names (env wrappers, a
buffer part's functions, an encoder, a ``module:EnvId`` env id) is not imported by
``rlblocks.load`` / ``eval`` / ``resume`` unless the module is imported already, belongs to
rlblocks, its plugins or gymnasium, or the user passes ``trust_imports``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks.run import build_config, spec_lookup
from rlblocks.run._trust import check_run_imports


def _planted_module(folder: Path, marker: Path) -> str:
    """A module that writes ``marker`` when imported and holds a do-nothing env wrapper."""
    name = f"planted_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        "import gymnasium as gym\n"
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "class Wrap(gym.Wrapper):\n"
        "    pass\n"
        "def reward(achieved_goal, desired_goal, info):\n"
        "    return 0.0\n"
    )
    return name


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    folder = tmp_path / "code"
    folder.mkdir()
    marker = tmp_path / "marker.txt"
    monkeypatch.syspath_prepend(str(folder))  # importable, were the gate to let it through
    return _planted_module(folder, marker), marker


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trust") / "run"
    rlblocks.train(
        "dqn", env="CartPole-v1", seed=0, run_dir=run, loggers=[], progress=False,
        max_env_steps=200, stop_reward=1e9, quiet=True,
        overrides=["trainer.warmup_steps=100", "trainer.test_episodes=1"],
    )  # fmt: skip
    return run


def _plant_wrapper(run: Path, tmp: Path, module: str) -> Path:
    """A copy of ``run`` whose config.json names ``module``'s wrapper in env.wrappers."""
    import shutil

    copy = tmp / f"run-{uuid.uuid4().hex[:6]}"
    shutil.copytree(run, copy)
    config = json.loads((copy / "config.json").read_text())
    config["env"]["wrappers"] = [f"{module}:Wrap"]
    (copy / "config.json").write_text(json.dumps(config))
    (copy / "config.json.sha256").unlink()  # as whoever crafted it would (or rewrite it)
    return copy


def test_load_and_resume_refuse_a_wrapper_from_an_untrusted_module_and_import_nothing(
    finished_run: Path, planted: tuple[str, Path], tmp_path: Path
) -> None:
    module, marker = planted
    run = _plant_wrapper(finished_run, tmp_path, module)
    for attempt in (
        lambda: rlblocks.load(run),
        lambda: rlblocks.resume(run, overrides=["trainer.max_env_steps=400"]),
    ):
        with pytest.raises(ConfigError, match=rf"env.wrappers: '{module}:Wrap' names code in "
                           rf"the module '{module}'.*trust_imports=True"):
            attempt()
        assert not marker.exists()
    # the gate is what kept it out: trusted, the same run imports the module
    agent = rlblocks.load(run, trust_imports=True)
    assert marker.read_text() == "imported"
    assert agent is not None


def test_wrappers_of_rlblocks_and_gymnasium_need_no_trust(finished_run: Path) -> None:
    config = json.loads((finished_run / "config.json").read_text())
    config["env"]["wrappers"] = [
        "gymnasium.wrappers:RecordEpisodeStatistics", "rlblocks.run:FireReset"
    ]  # fmt: skip
    resolved = build_config("dqn", file_data=config, spec_lookup=spec_lookup)
    check_run_imports(resolved, trusted=False)  # no error


def test_a_buffer_parts_function_from_an_untrusted_module_is_refused(planted) -> None:
    module, marker = planted
    her = {"name": "vector", "relabel": "her", "compute_reward": f"{module}:reward"}
    resolved = build_config("dqn", flags={"buffer": her}, spec_lookup=spec_lookup)
    with pytest.raises(ConfigError, match=rf"buffer.compute_reward: '{module}:reward' names"):
        check_run_imports(resolved, trusted=False)
    check_run_imports(resolved, trusted=True)  # the user's word lets it through
    assert not marker.exists()  # checking imports nothing


def test_train_resume_takes_trust_imports_like_resume(
    finished_run: Path, planted: tuple[str, Path], tmp_path: Path, capsys
) -> None:
    """``rlblocks train ALGO --resume --run-dir RUN`` refuses the planted wrapper like
    ``rlblocks resume`` does, and imports it with ``--trust-imports``; without ``--resume`` the
    flag is refused as meaningless."""
    from rlblocks.cli import main

    module, marker = planted
    run = _plant_wrapper(finished_run, tmp_path, module)
    argv = ["train", "dqn", "--resume", "--run-dir", str(run), "--no-progress",
            "--max-env-steps", "600", "--set", "run.loggers=[]"]  # fmt: skip
    assert main(argv) != 0
    assert "trust-imports" in capsys.readouterr().err and not marker.exists()
    main([*argv, "--trust-imports"])  # the planted wrapper then fails the env snapshot check
    assert marker.read_text() == "imported"
    assert "trust-imports" not in capsys.readouterr().err
    assert main(["train", "dqn", "--trust-imports", "--run-dir", str(tmp_path / "n")]) != 0
    assert "--trust-imports goes with --resume or --init-from" in capsys.readouterr().err


def test_verify_reports_what_load_and_resume_would_refuse_and_imports_nothing(
    finished_run: Path, planted: tuple[str, Path], tmp_path: Path, capsys
) -> None:
    """``rlblocks verify`` checks what load and resume check: a run whose config names a
    wrapper from an untrusted module (checksums recomputed, as whoever planted it would) fails
    verify with that line, without importing it; ``--trust-imports`` passes it; a whole run
    passes."""
    from rlblocks.cli import main

    module, marker = planted
    assert main(["verify", str(finished_run)]) == 0
    run = _plant_wrapper(finished_run, tmp_path, module)
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert f"refused: env.wrappers: '{module}:Wrap' names code in the module" in out
    assert not marker.exists()
    assert main(["verify", str(run), "--trust-imports"]) == 0
    assert not marker.exists()  # trusted, verify still imports nothing
