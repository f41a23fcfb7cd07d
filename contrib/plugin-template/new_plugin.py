#!/usr/bin/env python
"""Start a new rlblocks algorithm package from this template, in one step.

    python contrib/plugin-template/new_plugin.py NAME DEST

copies the template directory to ``DEST`` (which must not exist, or be empty) and renames every
occurrence of the template's names for the algorithm ``NAME`` (lower case letters, digits, and
single ``-`` or ``_`` between them, e.g. ``mdqn`` or ``my-algo``):

=========================  ==============================  =================================
template                   becomes (``NAME=my-algo``)      where
=========================  ==============================  =================================
``rlblocks-algo-softq``    ``rlblocks-algo-my-algo``       distribution name
``rlblocks_algo_softq``    ``rlblocks_algo_my_algo``       import package, its directory
``softq.py``               ``my_algo.py``                  the policy module, and ``impl=``
``SoftQ``                  ``MyAlgo``                      class names (``MyAlgoPolicy``...)
``test_softq``             ``test_my_algo``                test module and test names
``softq``                  ``my-algo``                     registry name: entry point, spec
=========================  ==============================  =================================

Build artefacts and caches (``*.egg-info``, ``__pycache__``, ``build/``, ``dist/``, ...) and this
script itself are not copied, nor are the parts of the README between ``<!-- template-only -->``
and ``<!-- /template-only -->``. Only the standard library is used, so it runs before anything is
installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import keyword
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent
TEMPLATE_NAME = "softq"
#: Left out of the copy: build artefacts, caches, virtualenvs and this script.
IGNORED = ("*.egg-info", "__pycache__", "*.pyc", "build", "dist", ".pytest_cache",
           ".ruff_cache", ".mypy_cache", ".hypothesis", ".venv*", Path(__file__).name)
_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
#: Text between these markers (the README's instructions for using the template) is dropped.
_TEMPLATE_ONLY = re.compile(r"<!-- template-only -->.*?<!-- /template-only -->\n?", re.DOTALL)


def names(name: str) -> dict[str, str]:
    """The template's names mapped to the new algorithm's, most specific first (the order in
    which they are replaced)."""
    module = name.replace("-", "_")
    camel = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    t = TEMPLATE_NAME
    return {
        f"rlblocks-algo-{t}": f"rlblocks-algo-{name.replace('_', '-')}",
        f"rlblocks_algo_{t}": f"rlblocks_algo_{module}",
        "SoftQ": camel,
        f".{t}:": f".{module}:",  # the module part of the spec's impl= import path
        f"{t}.py": f"{module}.py",
        f"test_{t}": f"test_{module}",
        t: name,
    }


def check_name(name: str) -> str | None:
    """Why ``name`` cannot name an algorithm package, or None when it can."""
    if not _NAME.fullmatch(name):
        return (f"{name!r} is not a valid algorithm name: use lower case letters and digits, "
                "starting with a letter, with single '-' or '_' between words (e.g. my-algo)")
    module = name.replace("-", "_")
    if keyword.iskeyword(module):
        return f"{name!r} is a Python keyword and cannot name a module"
    if module == TEMPLATE_NAME:
        return f"{name!r} is the template's own name; pick the name of your algorithm"
    taken = _taken_by(name)
    if taken:
        return (f"{name!r} is taken: {taken}; a package of that name would replace it when "
                "installed, so pick another name (or publish under a qualified one)")
    return None


def _taken_by(name: str) -> str | None:
    """Which rlblocks algorithm already has this name: one of the repository's own plugins
    (when the template sits in its checkout) or an installed distribution; None if free."""
    dist = f"rlblocks-algo-{name.replace('_', '-')}"
    shipped = TEMPLATE.parent.parent / "plugins" / "algos"
    if (shipped / name).is_dir() or (shipped / name.replace("_", "-")).is_dir():
        return f"rlblocks ships the algorithm {name!r} as {dist}"
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    return f"the installed distribution {dist} {version} has it"


def rename(text: str, mapping: dict[str, str]) -> str:
    """Replace every template name in ``text``, in one pass, most specific name first."""
    pattern = re.compile("|".join(re.escape(old) for old in mapping))
    return pattern.sub(lambda m: mapping[m.group(0)], text)


def new_plugin(name: str, dest: Path) -> Path:
    """Copy the template to ``dest`` with every template name replaced; return ``dest``."""
    problem = check_name(name)
    if problem:
        raise ValueError(problem)
    dest = Path(dest)
    if dest.resolve() == TEMPLATE or TEMPLATE in dest.resolve().parents:
        raise ValueError(f"{dest} is inside the template; pick a directory outside it")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest} already exists and is not an empty directory")
    mapping = names(name)
    ignore = shutil.ignore_patterns(*IGNORED)
    for src in sorted(_files(TEMPLATE, ignore)):
        rel = src.relative_to(TEMPLATE)
        target = dest / Path(*(rename(part, mapping) for part in rel.parts))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = src.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file: copied as it is
            shutil.copy2(src, target)
            continue
        text = _TEMPLATE_ONLY.sub("", text)
        target.write_text(rename(text, mapping), encoding="utf-8")
        shutil.copymode(src, target)
    return dest


def _files(root: Path, ignore: Callable[[str, list[str]], set[str]]) -> list[Path]:
    """Every file under ``root`` that ``ignore`` keeps, directories pruned as copytree would."""
    out: list[Path] = []
    entries = sorted(p.name for p in root.iterdir())
    skipped = ignore(str(root), entries)
    for entry in entries:
        if entry in skipped:
            continue
        path = root / entry
        if path.is_dir():
            out += _files(path, ignore)
        elif path.is_file():
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Copy the rlblocks plugin template to DEST as the algorithm NAME."
    )
    parser.add_argument("name", metavar="NAME", help="registry name of the algorithm, e.g. my-algo")
    parser.add_argument("dest", metavar="DEST", type=Path, help="directory to create")
    args = parser.parse_args(argv)
    try:
        dest = new_plugin(args.name, args.dest)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mapping = names(args.name)
    package = mapping[f"rlblocks_algo_{TEMPLATE_NAME}"]
    print(f"created {dest}: distribution {mapping[f'rlblocks-algo-{TEMPLATE_NAME}']}, "
          f"package {package}, algorithm {args.name!r}")
    print(f"next: cd {dest} && pip install -e . && pytest tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
