"""contrib/benchmarks/end_to_end_fps.py: the CPU smoke run CI makes (no GPU there), and how it
runs LeanRL's scripts and reads their speed, with stand-in scripts (LeanRL is not installed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "contrib" / "benchmarks"
SCRIPT = BENCH / "end_to_end_fps.py"


def _load(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports _trials from its folder
    spec = importlib.util.spec_from_file_location("_bench_end_to_end_fps", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True, text=True, timeout=240, check=False, cwd=cwd,
    )  # fmt: skip


@pytest.mark.slow
def test_smoke_run_measures_every_algorithm_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "fps.json"
    proc = _run("--smoke", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rlblocks only: no --leanrl PATH" in proc.stdout
    data = json.loads(out.read_text("utf-8"))
    assert data["device"] == "cpu" and data["steps"] == 240
    assert {t["algo"] for t in data["trials"]} == {"sac", "td3", "ppo"}
    for t in data["trials"]:
        assert "error" not in t, t
        assert t["env_steps"] == 240 and t["gradient_steps"] > 0
        # the figure is env steps over collect + update seconds (the trainer's counters)
        train_seconds = t["collect_seconds"] + t["update_seconds"]
        assert t["fps"] == pytest.approx(240 / train_seconds)
        assert t["fps_after_warmup"] > 0
        assert t["cuda_graph"] is False  # nothing is captured on a CPU
    assert data["trials"][0]["cuda_graph_asked"] is True  # SAC's captured step is on by default
    for algo in ("sac", "td3", "ppo"):
        assert data["summary"][algo]["rlblocks_fps"] > 0
        assert f"| {algo} |" in proc.stdout


@pytest.mark.slow
def test_leanrl_scripts_run_with_their_flags_and_their_reported_speed_is_compared(
    tmp_path: Path,
) -> None:
    leanrl = tmp_path / "LeanRL" / "leanrl"
    leanrl.mkdir(parents=True)
    argv_file = tmp_path / "argv.json"
    # a stand-in for LeanRL's PPO script: records its arguments, reports its speed as LeanRL's
    # progress bar does (tqdm descriptions on stderr, carriage returns between updates)
    (leanrl / "ppo_continuous_action_torchcompile.py").write_text(
        textwrap.dedent(f"""
            import json, os, sys
            json.dump({{"argv": sys.argv[1:], "wandb": os.environ.get("WANDB_MODE")}},
                      open({str(argv_file)!r}, "w"))
            sys.stderr.write("speed:  500.0 sps, reward avg: 1.0\\r")
            sys.stderr.write("speed:  750.5 sps, reward avg: 2.0\\r\\n")
        """),
        "utf-8",
    )
    out = tmp_path / "fps.json"
    proc = _run(
        "--smoke", "--algos", "ppo", "--leanrl", str(tmp_path / "LeanRL"), "--json", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(argv_file.read_text("utf-8"))
    assert seen["wandb"] == "disabled"
    assert seen["argv"] == [
        "--env-id", "HalfCheetah-v5", "--total-timesteps", "240", "--seed", "0",
        "--compile", "--no-cuda",
    ]  # fmt: skip
    data = json.loads(out.read_text("utf-8"))
    row = data["summary"]["ppo"]
    assert row["leanrl_fps_reported"] == 750.5
    assert row["ratio"] == pytest.approx(row["rlblocks_fps_after_warmup"] / 750.5)
    assert row["leanrl_fps_process"] > 0
    assert "rlblocks only" not in proc.stdout
    assert "| ppo |" in proc.stdout and "x |" in proc.stdout


def test_a_leanrl_path_without_its_scripts_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = _run("--smoke", "--leanrl", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no leanrl/ folder of scripts there; give the root of a checkout" in proc.stderr
    assert "frames/s" not in proc.stdout  # refused before any run


def test_a_leanrl_script_that_cannot_run_is_an_error_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2e = _load(monkeypatch)
    script = tmp_path / "leanrl" / "sac_continuous_action_torchcompile.py"
    script.parent.mkdir()
    script.write_text("import tensordict_not_installed_here\n", "utf-8")
    r = e2e.trial_leanrl([sys.executable, str(script)], 1000, timeout=60)
    assert r["error"].startswith("exit 1: Traceback")
    missing = e2e.trial_leanrl([sys.executable, str(tmp_path / "nowhere.py")], 1000, timeout=60)
    assert "give --leanrl the repository's root" in missing["error"]
    trials = [
        {"framework": "rlblocks", "algo": "sac", "fps": 100.0, "fps_after_warmup": 80.0},
        {"framework": "leanrl", "algo": "sac", **r},
    ]
    row = e2e.summarise(trials, ["sac"], with_leanrl=True)["sac"]
    assert row["ratio"] is None and row["rlblocks_fps"] == 100.0
    assert row["leanrl_errors"] == [
        "ModuleNotFoundError: No module named 'tensordict_not_installed_here'"
    ]
