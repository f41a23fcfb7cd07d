"""Plots a paper can use and multi-seed statistics: one panel per env, curves grouped by the
config fields that differ (or ``--group-by``), labels, curves that stop where their runs
stopped, PNG/PDF/SVG, ``plot --seeds`` with the IQM and a stratified-bootstrap band, and the
warning for too few seeds. The runs are tests.csv files the tests write themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlblocks.cli import main as cli
from rlblocks.contracts import ConfigError
from rlblocks.run import TestRecorder
from rlblocks.tools import (
    format_summary,
    group_runs,
    iqm,
    learning_curve,
    plot_runs,
    stratified_bootstrap,
    summarize,
)


def _run(
    path: Path, algo: str, env: str, returns: list[float], step: int = 100, **config: Any
) -> Path:
    """A run directory as plotting reads it: config.json (sections as `rlblocks train` writes
    them) and tests.csv."""
    path.mkdir(parents=True)
    cfg: dict[str, Any] = {"algo_name": algo, "env": {"id": env}, "algo": {}, "run": {}}
    for dotted, value in config.items():
        section, name = dotted.split("__")
        cfg.setdefault(section, {})[name] = value
    (path / "config.json").write_text(json.dumps(cfg))
    rows = [
        {"env_step": step * (k + 1), "wall_seconds": float(k + 1), "return_mean": r,
         "gradient_steps": 0, "episodes": 1, "screen": 0}
        for k, r in enumerate(returns)
    ]  # fmt: skip
    TestRecorder(path, lambda: None)._write(rows)
    return path


def test_runs_are_grouped_per_env_panel_by_the_fields_that_differ(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # two seeds of one config, one run with another lr, and PPO; seeds and paths never split
    _run(runs / "a", "dqn", "CartPole-v1", [1, 2], algo__lr=0.001, run__seed=0)
    _run(runs / "b", "dqn", "CartPole-v1", [2, 3], algo__lr=0.001, run__seed=1)
    _run(runs / "c", "dqn", "CartPole-v1", [5, 6], algo__lr=0.01, run__seed=0)
    _run(runs / "d", "ppo", "CartPole-v1", [7], algo__lr=0.0003)
    _run(runs / "e", "sac", "Pendulum-v1", [-1500, -200], run__seed=3)
    panels = group_runs([runs])
    assert list(panels) == ["CartPole-v1", "Pendulum-v1"]  # one panel (own y axis) per env
    cart = panels["CartPole-v1"]
    assert sorted(cart) == ["dqn (algo.lr=0.001)", "dqn (algo.lr=0.01)", "ppo"]
    assert [p.name for p in cart["dqn (algo.lr=0.001)"]] == ["a", "b"]
    assert list(panels["Pendulum-v1"]) == ["sac"]
    # --group-by: the named fields only (runs of both lrs in one curve when grouped by seed)
    by_seed = group_runs([runs], group_by=["run.seed"])["CartPole-v1"]
    assert sorted(by_seed) == ["dqn (run.seed=0)", "dqn (run.seed=1)", "ppo (run.seed=None)"]
    assert sorted(p.name for p in by_seed["dqn (run.seed=0)"]) == ["a", "c"]
    # --label: a template over the config
    labelled = group_runs([runs], label="{algo} at lr {algo.lr}")["CartPole-v1"]
    assert sorted(labelled) == ["dqn at lr 0.001", "dqn at lr 0.01", "ppo at lr 0.0003"]
    with pytest.raises(ConfigError, match=r"--group-by algo\.lrr: .*did you mean algo\.lr"):
        group_runs([runs], group_by=["algo.lrr"])
    with pytest.raises(ConfigError, match=r"--label .*\{SECTION\.FIELD\}"):
        group_runs([runs], label="{algo.nope}")


def test_a_curve_stops_where_its_runs_stopped_and_counts_only_runs_that_reached_a_point() -> None:
    def rows(returns: list[float]) -> list[dict[str, float]]:
        return [{"env_step": 100 * (k + 1), "wall_seconds": k + 1.0, "return_mean": r}
                for k, r in enumerate(returns)]  # fmt: skip

    long, short = rows([0.0, 10.0, 20.0, 30.0]), rows([100.0, 500.0])  # short: solved early
    grid, mean, lo, hi = learning_curve([long, short])
    assert grid.tolist() == [100, 200, 300, 400]
    # where both ran: their mean; after the short run stopped: the long run alone (the short
    # run's 500 is not held flat to the right edge)
    assert mean.tolist() == [50.0, 255.0, 20.0, 30.0]
    assert lo[2] == hi[2] == 20.0 and lo[0] <= 50.0 <= hi[0] and lo[0] < hi[0]
    grid_w, _, _, _ = learning_curve([long], x="wall_seconds")
    assert grid_w.tolist() == [1.0, 2.0, 3.0, 4.0]
    _, centre, lo, hi = learning_curve([rows([k]) for k in (1.0, 2.0, 3.0, 4.0, 100.0)],
                                       statistic="iqm")  # fmt: skip
    assert centre[0] == pytest.approx(3.0)  # the middle half of 1, 2, 3, 4, 100: 2, 3, 4
    assert lo[0] < 3.0 < hi[0] and hi[0] < 100.0  # the outlier barely moves the IQM's band
    with pytest.raises(ConfigError, match="statistic"):
        learning_curve([long], statistic="max")


def test_iqm_and_the_stratified_bootstrap() -> None:
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0, 100.0, 5.0, 6.0, 7.0])) == pytest.approx(4.5)
    assert iqm(np.array([1.0, np.nan, 3.0])) == pytest.approx(2.0)  # NaN left out
    curves = np.array([[1.0, np.nan], [3.0, 8.0], [5.0, 10.0], [7.0, np.nan]])
    np.testing.assert_allclose(iqm(curves, axis=0), [4.0, 9.0])
    # strata are resampled on their own: a task with one run contributes that run every time
    lone, spread = np.array([10.0]), np.array([0.0, 1.0, 2.0, 3.0])
    low, high = stratified_bootstrap([lone, spread], lambda x, axis: np.mean(x, axis=axis))
    # the pooled mean has 1 fixed value of 10 and 4 resampled from {0..3}: within [2, 4]
    assert 2.0 <= low < high <= 4.0
    same = stratified_bootstrap([np.array([5.0, 5.0])], lambda x, axis: np.mean(x, axis=axis))
    assert same == (5.0, 5.0)
    with pytest.raises(ValueError, match="at least one run"):
        stratified_bootstrap([np.array([])], np.mean)


def test_summary_warns_under_five_seeds_and_names_where_the_runs_are() -> None:
    three = summarize([100.0, 200.0, 300.0])
    assert three["iqm"] == three["mean"] == pytest.approx(200.0)  # what 3 seeds give
    assert "only 3 seeds" in three["note"] and "at least 5" in three["note"]
    assert summarize([1.0, 2.0, 3.0, 4.0, 5.0])["note"] is None
    summary = {"algo": "ppo", "env": "CartPole-v1", "run_dir": "runs/ppo-CartPole-v1-x",
               "seeds": [0, 1, 2], "solved": 1, "final_return": three, "best_return": three,
               "failed": []}  # fmt: skip
    text = format_summary(summary)
    first = text.splitlines()[0]
    assert first.startswith("ppo on CartPole-v1: 3 seed(s) finished")
    assert "runs in runs/ppo-CartPole-v1-x" in first
    assert "warning: only 3 seeds" in text


def test_plot_writes_panels_in_png_pdf_and_svg_and_warns_for_few_seeds(
    tmp_path: Path, capsys
) -> None:
    pytest.importorskip("matplotlib")
    runs = tmp_path / "runs"
    for s in range(3):
        _run(runs / f"ppo-{s}", "ppo", "CartPole-v1", [10.0 * s, 100.0 + s], run__seed=s)
    _run(runs / "sac-0", "sac", "Pendulum-v1", [-1500.0, -300.0])
    for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")):
        out = tmp_path / f"curves{suffix}"
        counts = plot_runs([runs], out)
        assert counts == {"ppo on CartPole-v1": 3, "sac on Pendulum-v1": 1}
        assert out.read_bytes().startswith(magic)
    svg = (tmp_path / "curves.svg").read_text()
    assert svg.count('id="axes_') >= 2  # one panel per env
    few = r"only 1 seed: .*\(curves: ppo on CartPole-v1 \(3\), sac on Pendulum-v1 \(1\)\)"
    with pytest.warns(UserWarning, match=few):  # the fewest seeds of a curve, then each
        plot_runs([runs], tmp_path / "seeds.png", seeds=True)
    assert cli(["plot", "--seeds", str(runs), "-o", str(tmp_path / "s.svg"),
                "--group-by", "run.seed", "--label", "{algo} seed {run.seed}"]) == 0  # fmt: skip
    out = capsys.readouterr()
    assert "ppo seed 0 on CartPole-v1 (1)" in out.out
    assert "warning: only 1 seed:" in out.err
    assert cli(["plot", str(runs), "-o", str(tmp_path / "x.nope")]) != 0
    assert "cannot write a plot as '.nope'" in capsys.readouterr().err
