"""Wheels of core and an env plugin install into a bare venv where `rlblocks list` works.

The venv gets the two wheels (``--no-deps``) and attrs, nothing else: no torch, no numpy, no
pluggy. Listing them proves that tiers 0 and 1 of the registry need only attrs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DUMMY = REPO / "plugins" / "envs" / "dummy"
_IGNORE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.pyc")


def _run(cmd: list[str | Path], **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=120, check=False, **kwargs
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _build_wheel(source: Path, workdir: Path, outdir: Path) -> Path:
    # Build from a copy so the repository gets no build/ or egg-info litter.
    copy = workdir / source.name
    shutil.copytree(source, copy, ignore=_IGNORE)
    before = set(outdir.glob("*.whl"))
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", outdir, copy])
    (wheel,) = set(outdir.glob("*.whl")) - before
    return wheel


def _throwaway_env_plugin(root: Path) -> Path:
    """A minimal env plugin, used when the dummy plugin's package is not in the tree yet."""
    pkg = root / "src" / "rlblocks_env_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_spec.py").write_text(textwrap.dedent("""
        from rlblocks.plugins import EnvBackendSpec
        SPEC = EnvBackendSpec(name="probe", summary="Packaging probe.", impl="rlblocks_env_probe:X")
    """))
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=69"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "rlblocks-env-probe"
        version = "0.0.1"

        [project.entry-points."rlblocks.envs"]
        probe = "rlblocks_env_probe._spec:SPEC"

        [tool.setuptools.packages.find]
        where = ["src"]
    """))
    return root


def test_rlblocks_list_works_in_a_venv_with_only_attrs(tmp_path: Path):
    for module in ("build", "venv", "setuptools", "pip"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed; it is needed to build wheels and a venv")

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    core_wheel = _build_wheel(REPO / "core", tmp_path, wheels)
    if (DUMMY / "pyproject.toml").exists():
        plugin_source, plugin_name, plugin_dist = DUMMY, "dummy", "rlblocks-env-dummy"
    else:
        plugin_source = _throwaway_env_plugin(tmp_path / "probe-plugin")
        plugin_name, plugin_dist = "probe", "rlblocks-env-probe"
    plugin_wheel = _build_wheel(plugin_source, tmp_path / "plugin-build", wheels)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, system_site_packages=False)
    python = env_dir / "bin" / "python"
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    clean_env["PYTHONNOUSERSITE"] = "1"

    # pip from this interpreter installs into the venv (--python), so the venv needs no pip.
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "--quiet", core_wheel, plugin_wheel], env=clean_env)
    # attrs goes in by copying the installed package, so the test needs no network.
    import attr
    import attrs

    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     env=clean_env).stdout.strip())
    for package in (attr, attrs):
        src = Path(package.__file__).parent
        shutil.copytree(src, site / src.name, ignore=_IGNORE)

    probe = _run([python, "-c", textwrap.dedent("""
        import importlib.util
        print([m for m in ("torch", "numpy", "pluggy", "gymnasium")
               if importlib.util.find_spec(m) is not None])
    """)], env=clean_env, cwd=tmp_path)
    assert probe.stdout.strip() == "[]", f"the venv is not bare: {probe.stdout}"

    listing = _run([env_dir / "bin" / "rlblocks", "list"], env=clean_env, cwd=tmp_path)
    rows = {line.split()[0]: line.split() for line in listing.stdout.splitlines()[1:]}
    assert rows["replay"][1:3] == ["buffer", "rlblocks"], listing.stdout
    assert rows[plugin_name][1:3] == ["env", plugin_dist], listing.stdout
    assert "BROKEN" not in listing.stdout, listing.stdout
    assert listing.stderr == "", listing.stderr
