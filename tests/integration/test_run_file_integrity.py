"""Flipped bytes in any file a run writes are detected: ``verify_run`` / ``rlblocks verify``
name the file, and the readers (resume, load, the test history) refuse it with our own error or
fall back to the previous checkpoint generation with a warning — never a silent wrong result."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import RlblocksError
from rlblocks.run import read_tests, verify_run

SETS = ["trainer.max_env_steps=600", "trainer.warmup_steps=96", "trainer.test_interval=200",
        "trainer.checkpoint_interval=200", "trainer.test_episodes=4", "env.num_envs=4",
        "env.num_test_envs=4"]  # fmt: skip
#: files every off-policy run directory holds, besides logs
EXPECTED = {"config.json", "plugins.json", "result.json", "tests.csv", "best.pt", "latest.pt",
            "buffer.h5", "MANIFEST.json", "CURRENT"}  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("damage") / "run"
    rlblocks.train("dqn", seed=0, overrides=SETS, run_dir=run, progress=False, loggers=[],
                   quiet=True)  # fmt: skip
    return run


def _files(run: Path) -> list[Path]:
    return sorted(
        p for p in run.rglob("*")
        if p.is_file() and p.name != ".lock" and not p.name.endswith(".sha256")
        and "logs" not in p.relative_to(run).parts
    )  # fmt: skip


def test_a_whole_run_verifies(finished_run: Path, capsys) -> None:
    assert {p.name for p in _files(finished_run)} >= EXPECTED
    assert verify_run(finished_run) == []
    assert cli(["verify", str(finished_run)]) == 0
    assert "every file matches" in capsys.readouterr().out


@pytest.mark.parametrize("bit", [0x01, 0x80])
def test_a_flipped_bit_in_any_run_file_is_named_and_never_read_silently(
    finished_run: Path, tmp_path: Path, bit: int, capsys
) -> None:
    for original in _files(finished_run):
        rel = original.relative_to(finished_run)
        copy = tmp_path / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(finished_run, copy)
        target = copy / rel
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= bit
        target.write_bytes(bytes(data))

        problems = verify_run(copy)
        assert problems and any(target.name in p or target.parent.name in p for p in problems), (
            f"{rel}: {problems}"
        )
        assert cli(["verify", str(copy)]) == 1
        assert "damaged" in capsys.readouterr().out

        # the readers: each refuses the damaged file or says it falls back
        if target.name in {"config.json", "best.pt"}:
            with pytest.raises(RlblocksError, match="damaged"):
                rlblocks.load(copy)
        if target.name == "tests.csv":
            with pytest.raises(RlblocksError, match="damaged"):
                read_tests(copy)
        if target.name in {"config.json", "result.json", "tests.csv"}:
            with pytest.raises(RlblocksError, match="damaged"):
                rlblocks.resume(copy, overrides=["trainer.max_env_steps=700"])
        if target.parent.name.startswith("gen-") and target.name != "CURRENT":
            current = (copy / "checkpoints" / "CURRENT").read_text().strip()
            capsys.readouterr()
            result = rlblocks.resume(copy, overrides=["trainer.max_env_steps=700"])
            if target.parent.name == current:  # the damaged generation is skipped, loudly
                assert "using gen-" in capsys.readouterr().err
            assert result.env_steps >= 700
