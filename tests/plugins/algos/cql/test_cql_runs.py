"""CQL as a whole run: ``rlblocks train cql --dataset FILE`` learns with the OfflineTrainer from an
hdf5 dataset, and a run interrupted during the behaviour-cloning warm start, with the Lagrange
multiplier learning, resumes to the same weights, optimizers and multiplier as a run left alone
(the pattern of td3bc's run tests in tests/integration/test_offline_runs.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import rlblocks
from rlblocks.collect import Collector
from rlblocks.plugins import hookimpl
from rlblocks.run import latest_checkpoint, load_checkpoint

#: a small, quick schedule: tests and checkpoints every 100 gradient steps, small networks, a
#: warm start that ends mid-run, the multiplier on
SMALL = [
    "trainer.test_interval=100",
    "trainer.test_episodes=1",
    "trainer.test_screen_episodes=0",
    "trainer.checkpoint_interval=100",
    "trainer.batch_size=32",
    "trainer.step_per_round=50",
    "env.num_test_envs=1",
    "algo.hidden_sizes=[32]",
    "algo.num_sampled_actions=4",
    "algo.bc_steps=150",
    "algo.with_lagrange=true",
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 transitions of random actions on Pendulum-v1, saved with ``save_hdf5``."""
    path = tmp_path_factory.mktemp("data") / "pendulum.h5"
    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=1, seed=0)
    buffer = rlblocks.make_buffer("replay", size=1_000, num_envs=1, seed=0)
    policy = rlblocks.make_policy(
        "cql", envs.observation_space, envs.action_space, hidden_sizes=[8]
    )
    Collector(policy, envs, buffer, seed=0).collect(n_step=1_000, random=True)
    envs.close()
    buffer.save_hdf5(path)
    return path


class StopAt:
    """Asks the run to stop (as SIGINT does) once a test at ``step`` gradient steps is done."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def rlblocks_test_end(self, stats, env_step, trainer):
        if trainer.state.gradient_step == self.step:
            trainer.request_stop("interrupted by a test")


def _train(dataset: Path, run_dir: Path, steps: int = 300, **kwargs: Any) -> Any:
    return rlblocks.train("cql", env="Pendulum-v1", dataset=dataset, max_gradient_steps=steps,
                          run_dir=run_dir, seed=0, loggers=[], progress=False, quiet=True,
                          overrides=SMALL, **kwargs)  # fmt: skip


def test_cli_trains_cql_from_a_dataset(dataset: Path, tmp_path: Path, capsys) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    sets = [a for item in SMALL for a in ("--set", item)]
    assert cli(["train", "cql", "--env", "Pendulum-v1", "--dataset", str(dataset),
                "--max-gradient-steps", "1e2", "--run-dir", str(run), "--logger", "csv",
                *sets]) == 0  # fmt: skip
    out = capsys.readouterr()
    saved = json.loads((run / "result.json").read_text())
    assert (saved["env_steps"], saved["gradient_steps"]) == (0, 100)
    assert "gradient step 100/100: test return" in out.out + out.err
    config = json.loads((run / "config.json").read_text())
    assert config["algo"]["with_lagrange"] is True and config["algo"]["bc_steps"] == 150
    assert config["trainer"]["max_gradient_steps"] == 100
    agent = rlblocks.load(run)  # the run's agent acts on raw Pendulum observations
    act = agent.act(torch.zeros(3).numpy())
    assert act.shape == (1,) and -2.0 <= float(act[0]) <= 2.0  # Pendulum's torque bounds


def test_an_interrupted_cql_run_resumes_bit_identically(dataset: Path, tmp_path: Path) -> None:
    whole = _train(dataset, tmp_path / "whole")
    run = tmp_path / "run"
    stopped = _train(dataset, run, hooks=[StopAt(100)])  # inside the 150-step warm start
    assert stopped.stop_reason.startswith("interrupted")
    assert stopped.gradient_steps == 100
    resumed = rlblocks.resume(run)
    assert (resumed.env_steps, resumed.gradient_steps) == (0, 300)
    assert resumed.last_test_return == pytest.approx(whole.last_test_return)
    a = load_checkpoint(latest_checkpoint(tmp_path / "whole"))
    b = load_checkpoint(latest_checkpoint(run))
    assert "log_alpha_cql" in a["policy"]
    for key in a["policy"]:
        assert torch.equal(a["policy"][key], b["policy"][key]), key
    # the multiplier learned (from log 5), and every optimizer's state came back
    assert float(a["policy"]["log_alpha_cql"]) != pytest.approx(math.log(5.0))
    optims_a, optims_b = a["policy_extra"]["optimizers"], b["policy_extra"]["optimizers"]
    assert set(optims_a) == {"actor", "critic", "alpha", "alpha_cql"}
    for name in optims_a:
        assert optims_a[name]["steps"] == optims_b[name]["steps"] == 300, name
        for p, state in optims_a[name]["optim"]["state"].items():
            for key, value in state.items():
                assert torch.equal(value, optims_b[name]["optim"]["state"][p][key]), (name, key)
    assert a["policy_extra"]["gradient_steps"] == b["policy_extra"]["gradient_steps"] == 300
