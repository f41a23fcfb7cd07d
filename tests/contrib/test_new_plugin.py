"""``contrib/plugin-template/new_plugin.py`` makes a package that is renamed throughout, carries no
build artefacts, and whose own code and tests work as copied (nothing is pip-installed here: the
copy is imported from its ``src`` and registered in-process)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "contrib" / "plugin-template"
ARTEFACTS = ("rlblocks_algo_softq.egg-info", "__pycache__", "build", "dist")


def _run_script(template: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(template / "new_plugin.py"), *map(str, args)],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.fixture
def template(tmp_path: Path) -> Path:
    """A copy of the template, with the artefacts an installed checkout has planted in it."""
    copy = tmp_path / "plugin-template"
    shutil.copytree(TEMPLATE, copy, ignore=shutil.ignore_patterns(*ARTEFACTS, "*.pyc"))
    info = copy / "src" / "rlblocks_algo_softq.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Name: rlblocks-algo-softq\n")
    for folder in ("src/rlblocks_algo_softq/__pycache__", "build/lib", "dist"):
        (copy / folder).mkdir(parents=True)
        (copy / folder / "stale.txt").write_text("rlblocks_algo_softq")
    return copy


@pytest.fixture
def plugin(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "rlblocks-algo-tiny-q"
    proc = _run_script(template, "tiny-q", dest)
    assert proc.returncode == 0, proc.stderr
    return dest


@pytest.fixture
def importable(plugin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The copy's ``src`` on ``sys.path``; its modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(plugin / "src"))
    yield plugin
    for name in [m for m in sys.modules if m.startswith("rlblocks_algo_tiny_q")]:
        del sys.modules[name]


def test_copy_leaves_out_artefacts_and_the_script(plugin: Path) -> None:
    names = {p.name for p in plugin.rglob("*")}
    built = {"__pycache__", "build", "dist"}
    assert not [n for n in names if n.endswith(".egg-info") or n in built]
    assert "new_plugin.py" not in names
    assert (plugin / "src" / "rlblocks_algo_tiny_q" / "tiny_q.py").is_file()
    assert (plugin / "tests" / "test_tiny_q.py").is_file()


def test_no_template_name_remains(plugin: Path) -> None:
    leftovers = []
    for path in plugin.rglob("*"):
        if re.search("softq", str(path.relative_to(plugin)), re.IGNORECASE):
            leftovers.append(str(path))
        elif path.is_file() and re.search("softq", path.read_text("utf-8"), re.IGNORECASE):
            leftovers.append(f"text of {path}")
    assert not leftovers
    readme = (plugin / "README.md").read_text("utf-8")
    assert readme.startswith("# rlblocks-algo-tiny-q\n")
    assert "template-only" not in readme and "new_plugin.py" not in readme


def test_pyproject_names_the_renamed_package(plugin: Path) -> None:
    data = tomllib.loads((plugin / "pyproject.toml").read_text("utf-8"))
    project = data["project"]
    assert project["name"] == "rlblocks-algo-tiny-q"
    entry_points = project["entry-points"]["rlblocks.algos"]
    assert entry_points == {"tiny-q": "rlblocks_algo_tiny_q._spec:SPEC"}
    assert "slow" in " ".join(data["tool"]["pytest"]["ini_options"]["markers"])
    if isinstance(project.get("license"), str):  # an SPDX string needs setuptools >= 77
        (setuptools,) = [
            Requirement(r) for r in data["build-system"]["requires"]
            if Requirement(r).name == "setuptools"
        ]
        assert not setuptools.specifier.contains(Version("76.1")), setuptools


def test_renamed_spec_imports_and_points_at_the_renamed_policy(importable: Path) -> None:
    from rlblocks.plugins import AlgoSpec, import_object

    data = tomllib.loads((importable / "pyproject.toml").read_text("utf-8"))
    spec = import_object(data["project"]["entry-points"]["rlblocks.algos"]["tiny-q"])
    assert isinstance(spec, AlgoSpec)
    assert spec.name == "tiny-q"
    assert spec.impl == "rlblocks_algo_tiny_q.tiny_q:TinyQPolicy"
    assert spec.config.__name__ == "TinyQConfig"
    policy_cls = import_object(spec.impl)
    assert policy_cls.__module__ == "rlblocks_algo_tiny_q.tiny_q"


def test_copied_conformance_test_passes_untouched(importable: Path, rlblocks_add_plugin) -> None:
    from rlblocks.plugins import import_object

    rlblocks_add_plugin(import_object("rlblocks_algo_tiny_q._spec:SPEC"))
    path = importable / "tests" / "test_tiny_q.py"
    module_spec = importlib.util.spec_from_file_location("copied_test_tiny_q", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    module.test_tiny_q_conforms()


@pytest.mark.parametrize("name", ["Bad Name", "my--algo", "2fast", "softq", "class"])
def test_bad_names_are_refused(template: Path, tmp_path: Path, name: str) -> None:
    proc = _run_script(template, name, tmp_path / "out")
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
    assert not (tmp_path / "out").exists()


def test_an_existing_directory_is_not_overwritten(template: Path, tmp_path: Path) -> None:
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    proc = _run_script(template, "tiny-q", dest)
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_a_first_party_algorithm_s_name_is_refused(tmp_path: Path) -> None:
    # the package would be rlblocks-algo-dqn itself: installing it would replace rlblocks' DQN
    proc = _run_script(TEMPLATE, "dqn", tmp_path / "out")
    assert proc.returncode == 2 and "'dqn' is taken: rlblocks ships the algorithm" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_an_installed_algorithm_s_name_is_refused_outside_the_repository(
    template: Path, tmp_path: Path
) -> None:
    # a copy of the template away from the checkout still sees installed distributions
    proc = _run_script(template, "discrete_sac", tmp_path / "out")
    assert proc.returncode == 2
    assert "installed distribution rlblocks-algo-discrete-sac" in proc.stderr
