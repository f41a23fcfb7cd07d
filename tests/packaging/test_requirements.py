"""requirements.txt installs what training needs and nothing heavy; requirements-dev.txt adds
everything else; between them every distribution of the repository is installed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what a newcomer who trains DQN on CartPole should not have to download
HEAVY = ("ray", "wandb", "mlflow", "envpool", "ale-py", "optuna", "mkdocs", "ruff", "minari",
         "pettingzoo", "mpe2", "gymnasium[mujoco")  # fmt: skip


def _lines(name: str) -> list[str]:
    text = (ROOT / name).read_text(encoding="utf-8")
    return [ln.split("#")[0].strip() for ln in text.splitlines() if ln.split("#")[0].strip()]


def _folders(lines: list[str]) -> set[str]:
    return {m.group(1) for ln in lines if (m := re.match(r"-e \./(\S+)$", ln))}


def test_requirements_train_without_the_heavy_libraries() -> None:
    lines = _lines("requirements.txt")
    assert "torch==2.13.0" in lines and "-e ./core" in lines
    folders = _folders(lines)
    assert {"plugins/algos/dqn", "plugins/envs/dummy", "plugins/loggers/tensorboard",
            "plugins/loggers/csv"} <= folders  # fmt: skip
    for folder in folders:  # no plugin whose own dependencies are heavy
        pyproject = (ROOT / folder / "pyproject.toml").read_text(encoding="utf-8")
        deps = pyproject.split("dependencies", 1)[1].split("]", 1)[0]
        assert not [h for h in HEAVY if f'"{h}' in deps], folder
    assert not [ln for ln in lines if ln.startswith(HEAVY)], lines


def test_dev_requirements_install_every_distribution_and_the_training_set() -> None:
    dev = _lines("requirements-dev.txt")
    assert dev[0] == "-r requirements.txt", "the dev install starts from the training install"
    installed = _folders(dev) | _folders(_lines("requirements.txt"))
    shipped = {
        p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("plugins/*/*/pyproject.toml")
    }
    assert shipped - installed == set(), "a plugin neither requirements file installs"
    assert "contrib/plugin-template" in installed  # tested like an outside plugin
    assert "build>=1.2" in dev, "scripts/build_dists.py and its test need build"
