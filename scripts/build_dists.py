"""Build the wheel and sdist of every distribution in this repository into one folder.

    python scripts/build_dists.py dist/                    # core and every plugins/*/*
    python scripts/build_dists.py dist/ --only rlblocks rlblocks-algo-dqn rlblocks-env-dummy

The folder is then a package index of its own: ``pip install --find-links dist/
rlblocks-algo-sac`` installs core and the algorithm from it (add ``--no-index`` to install
offline, with the third-party dependencies already installed or in another ``--find-links``
folder). The plugin template (``contrib/plugin-template``) is not built: it is a template to
copy, not a distribution to publish.

Each distribution is built from a copy of its folder, so the repository gets no ``build/``,
``dist/`` or ``*.egg-info`` litter. Builds run without isolation by default (the build backend,
setuptools, comes from this environment), which needs no network; ``--isolated`` builds each in
a fresh environment as a release would (needs the package index). Needs ``build``
(``pip install build``). Standard library otherwise.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns(
    "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache"
)


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): ``Foo_Bar`` -> ``foo-bar``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(repo: Path = REPO) -> dict[str, Path]:
    """``{distribution name: folder}`` of core and every plugin distribution of ``repo``."""
    folders = [repo / "core", *sorted(repo.glob("plugins/*/*"))]
    found: dict[str, Path] = {}
    for folder in folders:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
            found[canonical(name)] = folder
    return found


def build(
    out: Path,
    only: list[str] | None = None,
    isolated: bool = False,
    repo: Path = REPO,
    quiet: bool = False,
) -> list[Path]:
    """Build the wheel and sdist of each distribution (``only``: these names) into ``out``;
    return the files written. An unknown name raises ValueError naming the known ones."""
    known = distributions(repo)
    names = list(known) if not only else [canonical(n) for n in only]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"no distribution named {', '.join(unknown)} in {repo}; the distributions are: "
            f"{', '.join(sorted(known))}"
        )
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    with tempfile.TemporaryDirectory(prefix="rlblocks-build-") as tmp:
        for name in names:
            copy = Path(tmp) / name
            shutil.copytree(known[name], copy, ignore=_IGNORE)
            cmd = [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out)]
            if not isolated:
                cmd.append("--no-isolation")
            if not quiet:
                print(f"building {name} ({known[name].relative_to(repo)})", flush=True)
            proc = subprocess.run([*cmd, str(copy)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"building {name} failed (exit {proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                )
    return sorted(set(out.iterdir()) - before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder the wheels and sdists go to")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="DIST",
        help="build only these distributions (rlblocks, rlblocks-algo-dqn...)",
    )
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="build each in a fresh environment (needs the package index)",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the distributions and their folders, build nothing",
    )
    args = parser.parse_args(argv)
    if args.list:
        for name, folder in distributions().items():
            print(f"{name}  {folder.relative_to(REPO)}")
        return 0
    try:
        written = build(args.out, args.only, isolated=args.isolated)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    wheels = sum(p.suffix == ".whl" for p in written)
    print(
        f"{wheels} wheels and {len(written) - wheels} sdists in {args.out}; install from it with "
        f"pip install --find-links {args.out} rlblocks-algo-dqn"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
