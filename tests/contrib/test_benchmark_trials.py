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


def _load_mujoco_bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_mujoco", BENCH / "mujoco_benchmark.py")
    bench = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("algo", ["crossq", "tqc"])
def test_mujoco_sb3_trial_trains_and_tests_on_the_schedule(
    algo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sb3-contrib's CrossQ and TQC trial on a tiny budget (a short warm-up and small networks
    over the zoo's settings): it tests 10 deterministic episodes at every interval from the end
    of the warm-up on, stops at the budget, times it, and records the zoo's settings for the env
    (Hopper drops 5 atoms in TQC)."""
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("mujoco")
    bench = _load_mujoco_bench(monkeypatch)
    small = {"learning_starts": 150, "policy_kwargs": {"net_arch": [32, 32]}}
    out = bench.trial_sb3(algo, "Hopper-v5", 0, 300, 100, hp_overrides=small)
    assert [step for step, _ in out["curve"]] == [200, 300]  # none at 100, inside the warm-up
    assert all(math.isfinite(v) and v > 0 for _, v in out["curve"]), out["curve"]
    assert out["env_steps"] == 300 and out["seconds"] > 0
    assert out["sb3_hyperparams"]["learning_starts"] == 150
    zoo = bench.sb3_hyperparams(algo, "Hopper-v5")
    if algo == "tqc":
        assert zoo["top_quantiles_to_drop_per_net"] == 5
        assert "top_quantiles_to_drop_per_net" not in bench.sb3_hyperparams(algo, "HalfCheetah-v5")
    else:
        assert zoo["policy_kwargs"]["net_arch"]["qf"] == [2048, 2048]
        assert "use_sde" not in zoo["policy_kwargs"]  # sb3 wrote into a copy, not the table


def test_mujoco_sac_simba_row_trains_sac_with_the_simba_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sac-simba row is rlblocks' SAC with ``algo.network=simba`` over its MuJoCo preset:
    the run resolves the SimBa network, tests on the schedule and trains the budget (here with
    a narrow SimBa: the row's own width of 512 costs about a CPU second per gradient step)."""
    pytest.importorskip("mujoco")
    bench = _load_mujoco_bench(monkeypatch)
    tiny = ["trainer.warmup_steps=150", "algo.network_width=32"]
    out = bench.trial_rlblocks("sac-simba", "Hopper-v5", 0, 300, 150, extra=tiny)
    assert out["rlblocks_network"] == "simba"
    assert out["rlblocks_variant"] == ["sac", "algo.network=simba"]
    assert out["env_steps"] == 300
    assert [step for step, _ in out["curve"]] == [150, 300]
    assert all(math.isfinite(v) for _, v in out["curve"])
    plain = bench.trial_rlblocks("sac", "Hopper-v5", 0, 200, 200, extra=tiny[:1])
    assert plain["rlblocks_network"] == "mlp" and "rlblocks_variant" not in plain


def test_mujoco_report_sets_new_rows_against_peers_and_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report's newer-learners table: a row with an sb3-contrib peer gets ratios, a
    peerless row none, 1-seed cells are marked, and each env's targets are computed (1.5x the
    landed SAC row; at least the peer's final return at most half its wall)."""
    bench = _load_mujoco_bench(monkeypatch)

    def trial(fw: str, algo: str, seed: int, final: float, seconds: float) -> dict:
        return {"framework": fw, "algo": algo, "env": "Hopper-v5", "seed": seed,
                "budget": 50_000, "curve": [[25_000, 10.0], [50_000, final]],
                "seconds": seconds}  # fmt: skip

    ok = [
        trial("rlblocks", "sac", 100, 600.0, 400.0),
        trial("rlblocks", "sac", 101, 800.0, 400.0),  # landed SAC: mean 700, goal 1050
        trial("rlblocks", "crossq", 100, 1200.0, 300.0),
        trial("sb3", "crossq", 100, 1000.0, 1000.0),  # ahead, wall 0.30
        trial("rlblocks", "tqc", 100, 500.0, 600.0),
        trial("sb3", "tqc", 100, 900.0, 1000.0),  # behind, wall 0.60
        trial("rlblocks", "sac-simba", 100, 1000.0, 900.0),
    ]
    lines = bench._new_rows_section(ok, ["Hopper-v5"])
    rows = {ln.split("|")[2].strip(): ln for ln in lines if ln.startswith("| Hopper-v5 |")}
    cells = {k: [c.strip() for c in v.strip("|").split("|")] for k, v in rows.items()}
    assert cells["crossq"][3] == "1 (1 seed only) / 1 (1 seed only)"
    assert cells["crossq"][6] == "1.20" and cells["crossq"][11] == "0.30"
    assert cells["crossq"][13] == "1.71"  # 1200 / 700
    assert cells["tqc"][6] == "0.56" and cells["tqc"][11] == "0.60"  # 500 / 900, 600 / 1000
    assert cells["sac-simba"][3].endswith("/ no peer") and cells["sac-simba"][5] == "–"
    text = "\n".join(lines)
    assert "goal 1050" in text and "crossq 1200 (1.71x, 1 seed)" in text
    assert "sac-simba 1000 (1.43x, 1 seed): **met**" in text
    crossq = next(ln for ln in lines if ln.startswith("- Hopper-v5, crossq against"))
    assert crossq.count("**met**") == 2
    tqc = next(ln for ln in lines if ln.startswith("- Hopper-v5, tqc against"))
    assert tqc.count("**not met**") == 2

    def over_sac(trials: list[dict]) -> str:
        out = bench._new_rows_section(trials, ["Hopper-v5"])
        return next(ln for ln in out if "at >= 1.5x" in ln)

    below = [*ok[:2], trial("rlblocks", "crossq", 100, 1000.0, 300.0)]  # 1000 < 1050
    assert over_sac(below).endswith("sac-simba not run: **not met**.")
    assert over_sac([*ok[:2], *ok[4:6]]).endswith("**not run**.")  # tqc only
