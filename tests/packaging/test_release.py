"""The release script's folder installs core + one algorithm + its logger offline into a fresh
venv, which then trains: the minimal install works, its default loggers falling back cleanly.

The venv has no system site-packages (the editable rlblocks packages of this environment must
not be seen); the third-party libraries core needs (torch, numpy, gymnasium...) are linked
from this environment into a folder on the venv's path, so pip finds them installed and needs
no network: ``pip install --no-index --find-links DIST`` gets every rlblocks package from the
release folder and nothing from anywhere else.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build_dists.py"
#: what the minimal install is: core, one algorithm, one backend and one logger
MINIMAL = ["rlblocks", "rlblocks-algo-dqn", "rlblocks-env-dummy", "rlblocks-logger-csv"]


def _run(cmd: list[str | Path], timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, check=False, **kwargs)  # fmt: skip
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(roots: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` need, transitively (extras left out)."""
    from packaging.requirements import Requirement

    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        req = Requirement(todo.pop())
        key = _canonical(req.name)
        if key in found or key.startswith("rlblocks"):
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform dependency this machine has no use for
        found[key] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(line)
    return found


def _link_dependencies(wheel_requires: list[str], into: Path) -> None:
    """Link every top-level entry (packages, modules, ``.dist-info``) of the installed
    distributions the wheels need into ``into``."""
    into.mkdir()
    for dist in _closure(wheel_requires).values():
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in sorted(tops):
            if (base / top).exists() and not (into / top).exists():
                (into / top).symlink_to(base / top)


def test_release_folder_installs_offline_into_a_fresh_venv_which_trains(tmp_path: Path) -> None:
    for module in ("build", "setuptools", "packaging"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed; it is needed to build the distributions")
    dist = tmp_path / "dist"
    out = _run([sys.executable, SCRIPT, dist, "--only", *MINIMAL], cwd=tmp_path).stdout
    built = sorted(p.name for p in dist.iterdir())
    for name in MINIMAL:  # a wheel and an sdist of each
        stem = name.replace("-", "_")
        assert any(b.startswith(f"{stem}-") and b.endswith(".whl") for b in built), built
        assert any(b.startswith(f"{stem}-") and b.endswith(".tar.gz") for b in built), built
    assert "4 wheels and 4 sdists" in out
    assert not list(REPO.glob("core/build")), "the build littered the repository"

    # the libraries the wheels need, from this environment, without the editable rlblocks
    requires = [r for n in MINIMAL for r in metadata.requires(n) or () if "extra ==" not in r]
    deps = tmp_path / "deps"
    _link_dependencies(requires, deps)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, system_site_packages=False)
    python = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "COV_CORE"))}
    clean["PYTHONNOUSERSITE"] = "1"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                env=clean).stdout.strip()  # fmt: skip
    Path(site, "rlblocks-test-deps.pth").write_text(f"{deps}\n")

    # what a user types: the algorithm and its logger by name, offline from the folder
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index",
          "--disable-pip-version-check", "--quiet", "--find-links", dist,
          "rlblocks-algo-dqn", "rlblocks-env-dummy", "rlblocks-logger-csv"], env=clean)  # fmt: skip
    where = _run([python, "-c", "import rlblocks; print(rlblocks.__file__)"], env=clean).stdout
    assert str(Path(site)) in where, f"rlblocks does not come from the venv: {where}"

    run_dir = tmp_path / "run"
    train = _run([env_dir / "bin" / "rlblocks", "train", "dqn", "--env", "CartPole-v1",
                  "--max-env-steps", "1500", "--no-progress", "--run-dir", run_dir],
                 env=clean, cwd=tmp_path)  # fmt: skip
    # tensorboard is a default logger and not installed: left out with the command to install it
    assert "default logger tensorboard is not installed" in train.stderr, train.stderr
    assert "pip install ./plugins/loggers/tensorboard" in train.stderr, train.stderr
    assert "Traceback" not in train.stderr, train.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert result["env_steps"] >= 1500
    assert json.loads((run_dir / "config.json").read_text())["run"]["loggers"] == ["csv"]
    assert (run_dir / "tests.csv").is_file() and list((run_dir / "logs").glob("*.csv"))
    assert f"logger csv: {run_dir / 'logs'}" in train.stderr, train.stderr
