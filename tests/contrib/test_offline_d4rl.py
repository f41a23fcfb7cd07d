"""Smoke test of contrib/benchmarks/offline_d4rl.py at a toy size: the staged SAC run, the three
datasets written by ``rlblocks collect`` in Minari format, one rlblocks trial, the table, and
that a rerun skips the finished trial; the peer adapters where Tianshou and d3rlpy are installed.

Pendulum-v1 stands in for the MuJoCo tasks (no mujoco needed): SAC warms up for 100 env steps,
stops at 200 and 400 (the medium and expert points), the datasets hold 2 episodes (the replay
dataset the 200 steps of the medium point), a trial takes 5 gradient steps and plays 1 episode.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minari")

BENCH = Path(__file__).resolve().parents[2] / "contrib" / "benchmarks"
SCRIPT = BENCH / "offline_d4rl.py"
TOY = ["--envs", "Pendulum-v1", "--datasets", "medium-replay", "--seeds", "1",
       "--libraries", "rlblocks", "--algos", "bc", "--gradient-steps", "5",
       "--test-episodes", "1", "--sac-steps", "400", "--sac-stage", "200",
       "--sac-set", "trainer.warmup_steps=100", "--sac-set", "trainer.test_episodes=1",
       "--dataset-episodes", "2", "--trial-timeout", "600"]  # fmt: skip


def _load() -> Any:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_offline_d4rl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("d4rl")
    out, work = root / "out", root / "work"
    _run([*TOY, "--out-dir", str(out), "--work-dir", str(work)])
    return {"out": out, "work": work}


def test_datasets_are_minari_and_record_the_stages(toy: dict[str, Path]) -> None:
    import minari

    info = json.loads((toy["out"] / "datasets.json").read_text())["Pendulum-v1"]
    assert [s["env_steps"] for s in info["sac"]["stages"]] == [200, 400]
    assert info["sac"]["medium_env_steps"] == 200  # the only stage before the last
    sets = info["datasets"]
    assert sorted(sets) == ["expert", "medium", "medium-replay"]
    for name in ("expert", "medium"):
        data = minari.MinariDataset(Path(sets[name]["path"]) / "data")
        assert data.total_episodes == 2 and data.total_steps == 400  # Pendulum: 200 a game
    replay = minari.MinariDataset(Path(sets["medium-replay"]["path"]) / "data")
    assert replay.total_steps == 200  # the buffer up to the medium point, not to the end
    # the normaliser's ends: random actions lose more than the expert dataset's policy, or
    # at least the scale is not degenerate
    assert math.isfinite(info["random_return"]) and info["expert_return"] != info["random_return"]


def test_a_trial_is_scored_tabled_and_not_run_twice(toy: dict[str, Path]) -> None:
    results = toy["out"] / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 1 and not rows[0].get("error"), rows
    row = rows[0]
    assert (row["library"], row["algo"], row["gradient_steps"]) == ("rlblocks", "bc", 5)
    assert len(row["returns"]) == 1 and row["seconds"] > 0
    readme = (toy["out"] / "README.md").read_text()
    assert "| Pendulum-v1 | medium-replay | bc |" in readme
    _run([*TOY, "--out-dir", str(toy["out"]), "--work-dir", str(toy["work"])])
    assert len(results.read_text().splitlines()) == 1  # done before: skipped
    _run([*TOY, "--out-dir", str(toy["out"]), "--report-only"])
    assert "| Pendulum-v1 | medium-replay | bc |" in (toy["out"] / "README.md").read_text()


@pytest.mark.parametrize("library", ["tianshou", "d3rlpy"])
def test_peer_adapter_trains_and_plays(library: str, toy: dict[str, Path]) -> None:
    pytest.importorskip(library)
    bench = _load()
    info = json.loads((toy["out"] / "datasets.json").read_text())["Pendulum-v1"]
    spec = {"env": "Pendulum-v1", "dataset_name": "medium", "library": library, "algo": "bc",
            "seed": 0, "gradient_steps": 3, "test_episodes": 1,
            "dataset": info["datasets"]["medium"]["path"]}  # fmt: skip
    out = bench.trial(spec)
    assert len(out["returns"]) == 1 and math.isfinite(out["score"]) and out["seconds"] > 0


def test_table_marks_targets_against_the_better_peer() -> None:
    bench = _load()
    entries = {"Hopper-v5": {"random_return": 0.0, "expert_return": 100.0}}

    def r(lib: str, score: float, seconds: float, seed: int = 0) -> dict[str, Any]:
        return {"env": "Hopper-v5", "dataset_name": "medium", "library": lib, "algo": "bc",
                "seed": seed, "gradient_steps": 10, "score": score, "seconds": seconds}  # fmt: skip

    results = [r("rlblocks", 50, 1.0), r("rlblocks", 70, 3.0, 1), r("tianshou", 55, 4.0),
               r("d3rlpy", 40, 10.0), {**r("d3rlpy", 99, 1.0, 1), "error": "exit 1"}]  # fmt: skip
    row = next(x for x in bench.table(results, entries) if x.startswith("| Hopper-v5"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == ["60.0 ± 10.0 (2)", "55.0 ± 0.0 (1)", "40.0 ± 0.0 (1)"]
    assert cells[6:9] == ["2.0", "4.0", "10.0"]
    assert cells[9] == "met"  # 60 >= max(55, 40)
    assert cells[10] == "met"  # median 2.0 <= 4.0 / 2
