"""The benchmark scripts' shared trial runner and table helpers (contrib/benchmarks/_trials.py),
and that every script using it still starts when run as a script (its folder on sys.path)."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "contrib" / "benchmarks"


def _load_trials():
    spec = importlib.util.spec_from_file_location("_bench_trials", BENCH / "_trials.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


trials = _load_trials()


def test_a_trial_returns_its_last_json_line_over_the_base() -> None:
    code = (
        "print('{\"seconds\": 0.5}'); print('chatter'); "
        'print(\'{"seconds": 1.5, "solved": true}\')'
    )
    r = trials.run_json_trial([sys.executable, "-c", code], {"seed": 7, "seconds": None})
    assert r == {"seed": 7, "seconds": 1.5, "solved": True}


def test_a_failed_trial_keeps_its_exit_status_and_traceback() -> None:
    code = (
        "import sys; print('no json here'); "
        "sys.stderr.write('Traceback (most recent call last):\\n  File x\\n'); "
        "sys.stderr.write('ValueError: bad rate\\n'); "
        "sys.exit(3)"
    )
    r = trials.run_json_trial(
        [sys.executable, "-c", code], {"seed": 1}, failed={"solved": False, "seconds": None}
    )
    assert r["seed"] == 1 and r["solved"] is False and r["seconds"] is None
    assert r["error"].startswith("exit 3:")
    assert trials.gist(r["error"]) == "ValueError: bad rate"
    assert trials.gist("just a last line\n") == "just a last line"


def test_a_trial_past_its_timeout_is_killed_and_said_so() -> None:
    r = trials.run_json_trial(
        [sys.executable, "-c", "import time; time.sleep(60)"], {"seed": 2}, timeout=0.5
    )
    assert "killed after" in r["error"] and r["seed"] == 2


def test_median_counts_an_unsolved_trial_slowest_and_all_errors_as_none() -> None:
    ok = {"solved": True, "seconds": 3.0}
    unsolved = {"solved": False, "seconds": 150.0}
    broken = {"solved": False, "seconds": None, "error": "exit 1: boom"}
    assert trials.median_seconds([ok, unsolved, {"solved": True, "seconds": 5.0}]) == 5.0
    assert math.isinf(trials.median_seconds([unsolved, unsolved, ok]))
    assert trials.median_seconds([broken, broken]) is None
    assert trials.median_seconds([]) is None
    assert trials.median_cell(None, 150) == "error"
    assert trials.median_cell(math.inf, 150) == ">150"
    assert trials.median_cell(7.25, 150) == "7.2"
    assert trials.finite(float("nan")) is None and trials.finite(math.inf) is None
    assert trials.finite(None) is None and trials.finite(2) == 2.0


@pytest.mark.parametrize(
    "script",
    [
        "atari100k.py",
        "dqn_time_to_solve.py",
        "end_to_end_fps.py",
        "mujoco_benchmark.py",
        "multiagent_benchmark.py",
        "offline_d4rl.py",
        "offpolicy_time_to_solve.py",
        "onpolicy_time_to_solve.py",
        "pipeline_lockstep.py",
        "value_time_to_solve.py",
    ],
)
def test_each_script_using_the_runner_starts_from_anywhere(script: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_mujoco_table_pairs_trials_by_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed-by-seed table differences each seed's two trials (final return and the mean of
    the last three tests) and leaves out a seed only one library ran."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_mujoco", BENCH / "mujoco_benchmark.py")
    bench = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(bench)

    def trial(fw: str, seed: int, returns: list[float]) -> dict:
        curve = [[25_000 + 5_000 * i, r] for i, r in enumerate(returns)]
        return {"framework": fw, "algo": "td3", "env": "Hopper-v5", "seed": seed,
                "budget": 50_000, "curve": curve}  # fmt: skip

    ok = [
        trial("rlblocks", 1, [0, 100, 200, 300]),  # last three 200, final 300
        trial("tianshou", 1, [0, 50, 50, 200]),  # last three 100, final 200
        trial("rlblocks", 2, [0, 0, 30, 0]),  # last three 10, final 0
        trial("tianshou", 2, [0, 40, 40, 40]),  # last three 40, final 40
        trial("rlblocks", 3, [0, 999, 999, 999]),  # no Tianshou trial: not a pair
    ]
    lines = bench._paired_table(ok, ["Hopper-v5"], ["td3"])
    row = [line for line in lines if line.startswith("| Hopper-v5 |")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    # final differences +100 and -40: mean +30, standard error 70; one of two ahead
    assert cells[2:4] == ["2", "+30 ± 70 (1 of 2 ahead)"]
    # last three tests: rlblocks 200 and 10, Tianshou 100 and 40; differences +100 and -30
    assert cells[4] == "105 ± 134"
    assert cells[5] == "70 ± 42"
    assert cells[6] == "+35 ± 65 (1 of 2 ahead)"


def test_lockstep_two_heads_is_the_sac_actor_computed_one_half_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SAC lockstep's actor (mean and log-std rows multiplied apart, as Tianshou's two
    heads are) gives the actor's own numbers to float rounding, for a batch and for the
    one-row products of acting, and its gradients reach both halves of the head."""
    import gymnasium as gym
    import numpy as np
    import torch

    import rlblocks

    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_lockstep", BENCH / "pipeline_lockstep.py")
    lockstep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lockstep)

    box = gym.spaces.Box(-1.0, 1.0, (11,), dtype=np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    actor = rlblocks.make_policy("sac", box, act, hidden_sizes=[256, 256]).actor
    split = lockstep.two_heads(actor)
    obs = torch.randn(256, 11, generator=torch.Generator().manual_seed(0))
    for ours, theirs in zip(actor.distribution(obs), split(obs), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    for ours, theirs in zip(actor.distribution(obs[:1]), split(obs[:1]), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    mean, log_std = split(obs)
    (mean.sum() + 2 * log_std.sum()).backward()
    grad = actor.head.weight.grad
    assert grad is not None and grad[:3].abs().sum() > 0 and grad[3:].abs().sum() > 0


def test_multiagent_rlblocks_trial_reports_a_per_agent_return(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tiny rlblocks MAPPO trial of the multi-agent benchmark (BenchMARL is not needed): it
    trains the budget it is given, times it, and reports a finite, negative return (simple_spread
    pays distances as negative rewards)."""
    pytest.importorskip("mpe2")
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_ma", BENCH / "multiagent_benchmark.py")
    bench = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(bench)
    out = bench.trial_rlblocks("mappo", seed=0, steps=800, episodes=4)
    assert out["env_steps"] == 800
    assert out["seconds"] > 0
    assert math.isfinite(out["return"]) and out["return"] < 0.0, out
